/* drive.c — the resumable loop of the corpus runner: from n_done to n_total, K
 * sentences per transaction, in one process or over MPI ranks (sentence i is scored by
 * rank i mod N, and rank 0 writes every record in sentence order), with a progress
 * line; and the MPI agreement on setup errors and on where the run stands.
 * What it does not: produce sentences (analyze.c, import.c) or score them (records.c).
 */
#include "analysis/runner_internal.h"

#include <string.h>

#ifdef AS_MPI
#include <mpi.h>
#endif

static void progress(an_ctx *c, int done) {
    if (!c->progress) return;
    double el = as_now() - c->t0, rate = (done - c->n_start) / (el > 1e-9 ? el : 1e-9);
    double eta = rate > 0 ? (c->n_total - done) / rate : 0;
    fprintf(stderr, "\rattnscope: %d/%d sentences  %.1f/s  ETA %dm%02ds   ", done, c->n_total, rate, (int)eta / 60,
            (int)eta % 60);
    if (done == c->n_total) fputc('\n', stderr);
    fflush(stderr);
}

#define REC_TAG 7 /* MPI tag of sentence records */

/* Sentence idx on this rank: produced, scored into c->rb, released. Failures become an
 * error record when mpi_error != 0 (so rank 0 can report them). */
static as_status build_one(an_ctx *c, int idx, produce_fn produce, release_fn release, void *user, as_error *err) {
    an_sent s;
    memset(&s, 0, sizeof s);
    as_status rc = produce(user, idx, idx < c->explain, &s, err);
    if (!rc) rc = an_rec_build(c, idx, &s, &c->rb, err);
    release(user);
    return rc;
}

#ifdef AS_MPI
/* Rank 0: receives the record of sentence idx from rank `from` into c->rb. Each rank
 * sends its sentences in increasing order and MPI keeps the order of messages between
 * two ranks, so the next message from `from` is sentence idx. */
static as_status recv_one(an_ctx *c, int from, int idx, as_error *err) {
    MPI_Status ms;
    int n = 0;
    if (MPI_Probe(from, REC_TAG, MPI_COMM_WORLD, &ms) != MPI_SUCCESS || MPI_Get_count(&ms, MPI_BYTE, &n) != MPI_SUCCESS)
        return as_err_set(err, AS_ERR_INTERNAL, "MPI: cannot receive sentence %d from rank %d", idx, from);
    an_rb_reset(&c->rb);
    if (!an_rb_reserve(&c->rb, (size_t)n)) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
    if (MPI_Recv(c->rb.b, n, MPI_BYTE, from, REC_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return as_err_set(err, AS_ERR_INTERNAL, "MPI: cannot receive sentence %d from rank %d", idx, from);
    c->rb.n = (size_t)n;
    int32_t got[3] = {0, 0, -1};
    if (n >= 12) memcpy(got, c->rb.b, 12);
    if (got[0] != AN_REC_MAGIC || (got[1] == 0 && got[2] != idx))
        return as_err_set(err, AS_ERR_INTERNAL, "MPI: rank %d sent sentence %d, expected %d", from, got[2], idx);
    return AS_OK;
}

/* Ranks > 0: build and send the records of sentences n_done..n_total-1 that are theirs
 * (idx % size == rank), in order. A failure is sent as an error record and ends the loop. */
as_status an_drive_worker(an_ctx *c, int n_done, produce_fn produce, release_fn release, void *user, as_error *err) {
    for (int idx = n_done; idx < c->n_total; idx++) {
        if (idx % c->size != c->rank) continue;
        as_status rc = build_one(c, idx, produce, release, user, err);
        if (rc) an_rec_error(&c->rb, idx, rc, err->msg);
        if (c->rb.oom || MPI_Send(c->rb.b, (int)c->rb.n, MPI_BYTE, 0, REC_TAG, MPI_COMM_WORLD) != MPI_SUCCESS)
            return as_err_set(err, AS_ERR_INTERNAL, "MPI: rank %d cannot send sentence %d", c->rank, idx);
        if (rc) return rc;
    }
    return AS_OK;
}
#else
as_status an_drive_worker(an_ctx *c, int n_done, produce_fn produce, release_fn release, void *user, as_error *err) {
    (void)c;
    (void)n_done;
    (void)produce;
    (void)release;
    (void)user;
    return as_err_set(err, AS_ERR_INTERNAL, "built without MPI");
}
#endif

/* The resumable loop: from n_done to n_total, K sentences per transaction. Under MPI
 * (c->size > 1) this runs on rank 0, which scores its own sentences (idx % size == 0),
 * receives the others' records, and writes every record in sentence order. */
static as_status drive(an_ctx *c, int n_done, produce_fn produce, release_fn release, void *user, as_error *err) {
    as_status rc = AS_OK;
    c->n_start = n_done;
    c->t0 = as_now();
    int open = 0;
    for (int idx = n_done; idx < c->n_total; idx++) {
        if (!open) {
            if ((rc = store_exec(c->st, "BEGIN IMMEDIATE", err))) return rc;
            open = 1;
            c->chunk_first = idx;
            c->chunk_n = 0;
        }
        int owner = c->size > 1 ? idx % c->size : 0;
        if (owner == 0) rc = build_one(c, idx, produce, release, user, err);
#ifdef AS_MPI
        else rc = recv_one(c, owner, idx, err);
#endif
        if (!rc) rc = an_rec_apply(c, &c->rb, err);
        if (rc) break;
        c->chunk_n++;
        if ((idx + 1) % c->chunk == 0 || idx + 1 == c->n_total) {
            if ((rc = an_chunk_commit(c, err))) break;
            open = 0;
        }
        progress(c, idx + 1);
    }
    if (rc && open) {
        as_error e2;
        store_exec(c->st, "ROLLBACK", &e2);
        if (c->progress) fputc('\n', stderr);
    }
    return rc;
}

as_status an_finish_run(an_ctx *c, store *st, int n_done, int done, produce_fn pf, release_fn rf, void *user,
                        const an_opts *o, const char *what, as_error *err) {
    as_status rc = AS_OK;
    if (done) {
        if (!o->quiet) printf("%s: run %lld is complete (%d sentences); nothing to do\n", what, (long long)c->run, c->n_total);
        return AS_OK;
    }
    if ((rc = an_run_truncate(st, c->run, n_done, err))) return rc;
    if (n_done < c->n_total && (rc = drive(c, n_done, pf, rf, user, err))) return rc;
    if ((rc = an_finalize(st, c->run, c->induction, err))) return rc;
    if (!o->quiet)
        printf("%s: run %lld done: %d sentences (%d this time)\n", what, (long long)c->run, c->n_total, c->n_total - n_done);
    return AS_OK;
}

void an_mpi_rank(int *rank, int *size) {
    *rank = 0;
    *size = 1;
#ifdef AS_MPI
    int mpi_on = 0, mpi_off = 0;
    MPI_Initialized(&mpi_on);
    if (mpi_on) MPI_Finalized(&mpi_off);
    if (mpi_on && !mpi_off) {
        MPI_Comm_rank(MPI_COMM_WORLD, rank);
        MPI_Comm_size(MPI_COMM_WORLD, size);
    }
#endif
}

as_status an_mpi_agree(int rank, int size, as_status rc, as_error *err) {
#ifdef AS_MPI
    if (size > 1) {
        /* every rank's setup status; rank 0 reports its own error, a worker only an error
         * rank 0 did not have (an empty message tells the caller not to print) */
        int *all = as_calloc((size_t)size, sizeof *all), mine = (int)rc, bad = -1;
        if (!all) return as_err_set(err, AS_ERR_INTERNAL, "out of memory");
        MPI_Allgather(&mine, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
        for (int r = 0; r < size && bad < 0; r++)
            if (all[r]) bad = r;
        int r0 = all[0];
        free(all);
        if (bad >= 0) {
            if (rank == 0 && !rc) rc = as_err_set(err, AS_ERR_INTERNAL, "MPI rank %d could not start (see its message)", bad);
            else if (rank > 0 && (r0 || !rc)) {
                err->msg[0] = 0;
                if (!rc) rc = AS_ERR_INTERNAL;
            }
        }
    }
#else
    (void)rank;
    (void)size;
    (void)err;
#endif
    return rc;
}

as_status an_mpi_sync(int rank, int size, as_status rc, int *n_done, int *done, as_error *err) {
#ifdef AS_MPI
    if (size > 1) {
        /* rank 0 tells where the run stands (or that it failed) */
        int info[3] = {(int)rc, *n_done, *done};
        MPI_Bcast(info, 3, MPI_INT, 0, MPI_COMM_WORLD);
        if (rank > 0) {
            if (info[0]) {
                err->msg[0] = 0;
                return (as_status)info[0];
            }
            *n_done = info[1];
            *done = info[2];
        }
    }
#else
    (void)rank;
    (void)size;
    (void)n_done;
    (void)done;
    (void)err;
#endif
    return rc;
}
