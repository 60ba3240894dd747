/* pool.h — a small worker pool for the inference forward's data parallelism.
 * Workers wait passively (a short spin, then a condition variable), so idle
 * threads never burn a core that another thread or process needs — unlike an
 * OpenMP team spinning at its barriers on a busy machine.
 * It does not schedule dependent work: one job (n independent tasks) at a time.
 */
#ifndef AS_POOL_H
#define AS_POOL_H

/* Task i of a job, 0 <= i < n_tasks; tid in [0, n_threads) identifies the thread
 * running it (for per-thread scratch). */
typedef void (*as_task_fn)(void *ctx, int i, int tid);

/* Runs fn(ctx, i, tid) for every i in [0, n_tasks) on up to n_threads threads (the
 * caller included) and returns when all are done. Tasks are handed out
 * dynamically. Runs serially when n_threads <= 1, when called from inside a task,
 * or when another thread is using the pool at that moment. */
void as_parallel_for(int n_tasks, int n_threads, as_task_fn fn, void *ctx);

#endif
