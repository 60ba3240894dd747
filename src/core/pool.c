/* pool.c — the worker pool of pool.h: workers created on first use (up to the
 * number of cores minus one) and kept for the process's lifetime. */
#define _GNU_SOURCE
#include "core/pool.h"
#include "core/core.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define POOL_MAX_WORKERS 255
#define POOL_SPIN 20000 /* polls of the job counter before sleeping */

static struct {
    pthread_mutex_t mu;     /* guards gen, the job fields and sleeping workers */
    pthread_cond_t cv_work; /* a new job is posted */
    pthread_cond_t cv_done; /* the last participating worker finished */
    pthread_mutex_t busy;   /* held by the thread running a job */
    pthread_once_t once;
    int n_workers;
    atomic_ulong gen;       /* job generation */
    as_task_fn fn;
    void *ctx;
    int n_tasks, n_part;    /* tasks, participating workers */
    atomic_int next;        /* next task index */
    atomic_int finished;    /* participating workers done with this job */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv_work = PTHREAD_COND_INITIALIZER,
       .cv_done = PTHREAD_COND_INITIALIZER, .busy = PTHREAD_MUTEX_INITIALIZER,
       .once = PTHREAD_ONCE_INIT};

static _Thread_local int t_in_task = 0;

static void run_tasks(int tid) {
    int i;
    t_in_task = 1;
    while ((i = atomic_fetch_add(&P.next, 1)) < P.n_tasks) P.fn(P.ctx, i, tid);
    t_in_task = 0;
}

static void *worker(void *arg) {
    int w = (int)(intptr_t)arg; /* worker w runs as tid w + 1 */
    unsigned long seen = 0;
    for (;;) {
        unsigned long g = atomic_load(&P.gen);
        for (int s = 0; g == seen && s < POOL_SPIN; s++) {
            if ((s & 255) == 255) sched_yield();
            g = atomic_load(&P.gen);
        }
        if (g == seen) {
            pthread_mutex_lock(&P.mu);
            while ((g = atomic_load(&P.gen)) == seen) pthread_cond_wait(&P.cv_work, &P.mu);
            pthread_mutex_unlock(&P.mu);
        }
        seen = g;
        if (w >= P.n_part) continue;
        run_tasks(w + 1);
        if (atomic_fetch_add(&P.finished, 1) + 1 == P.n_part) {
            pthread_mutex_lock(&P.mu);
            pthread_cond_signal(&P.cv_done);
            pthread_mutex_unlock(&P.mu);
        }
    }
    return NULL;
}

static void pool_start(void) {
    int n = as_n_cores() - 1;
    if (n > POOL_MAX_WORKERS) n = POOL_MAX_WORKERS;
    for (int i = 0; i < n; i++) {
        pthread_t th;
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&th, &at, worker, (void *)(intptr_t)i) == 0) P.n_workers++;
        pthread_attr_destroy(&at);
    }
}

void as_parallel_for(int n_tasks, int n_threads, as_task_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (n_threads > 1 && !t_in_task) pthread_once(&P.once, pool_start);
    int part = n_threads - 1 < P.n_workers ? n_threads - 1 : P.n_workers;
    if (part > n_tasks - 1) part = n_tasks - 1;
    if (part <= 0 || t_in_task || pthread_mutex_trylock(&P.busy) != 0) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, 0);
        return;
    }
    pthread_mutex_lock(&P.mu);
    P.fn = fn;
    P.ctx = ctx;
    P.n_tasks = n_tasks;
    P.n_part = part;
    atomic_store(&P.next, 0);
    atomic_store(&P.finished, 0);
    atomic_fetch_add(&P.gen, 1);
    pthread_cond_broadcast(&P.cv_work);
    pthread_mutex_unlock(&P.mu);
    run_tasks(0);
    if (atomic_load(&P.finished) != part) {
        for (int s = 0; s < POOL_SPIN && atomic_load(&P.finished) != part; s++)
            if ((s & 255) == 255) sched_yield();
        pthread_mutex_lock(&P.mu);
        while (atomic_load(&P.finished) != part) pthread_cond_wait(&P.cv_done, &P.mu);
        pthread_mutex_unlock(&P.mu);
    }
    pthread_mutex_unlock(&P.busy);
}
