/* SPDX-License-Identifier: MIT */
/*
 * Dynamic shares (claims.c): with `[job] shares = dynamic`, ranks take chunks of
 * RANKS_CHUNK ids as they need them, by claims in a folder every rank sees (`[job]
 * claims`, on the shared filesystem their outputs live on). No coordinator: a claim is
 * one atomic create, symlink("r<K> n<L> ...", "<claims>/c<first chunk>"), which exactly
 * one rank wins (EEXIST for the others, who read the winner's length and go past it).
 *
 * The claims form one chain from chunk 0: a rank claims only where the last claim it
 * knows ends, so every chunk is in exactly one claim and a rank walks the chain in id
 * order, like the generator's stream. A rank knows its own claims (its share) and the
 * end of the chain it has seen (`cursor`): every chunk below it that is not its own is
 * another rank's.
 *
 * Batches: a claim's length is sized from this rank's rate so that one covers at least
 * CLAIMS_TARGET_NS of its work and at least CLAIMS_COST_FACTOR times what a claim costs
 * (so claiming stays well under 1% of the rank's time), growing at most 8x a claim; when
 * the generator counts its tasks, never more than the unclaimed chunks / (2 x ranks)
 * (guided self-scheduling), so ranks finish together.
 *
 * Owner: the run's feeding thread (dispatcher.c) alone claims; the journal asks
 * claims_foreign from the same thread.
 */
#ifndef GPUD_CLAIMS_H
#define GPUD_CLAIMS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "cluster/mpi.h"
#include "cluster/ranks.h"

#define CLAIMS_TARGET_NS 200000000u /* a claim covers at least 0.2 s of a rank's work */
#define CLAIMS_COST_FACTOR 1000u    /* ... and 1,000 times what claiming costs */
#define CLAIMS_MAX_BATCH 65536u     /* chunks in one claim (4M ids) */
#define CLAIMS_REFUSALS                                                                            \
	5 /* takeovers a live (stopped) rank refuses before the                                    \
	     others stop waiting for it */

struct claims_range {
	uint64_t first, end; /* chunks [first, end) */
	uint64_t nth;        /* own ids before `first` */
};

struct claims {
	char *dir;
	int dfd;
	unsigned rank, ranks;
	uint64_t total_chunks;    /* UINT64_MAX: the generator does not count its tasks */
	uint64_t total_ids;       /* its count of tasks (UINT64_MAX: none) */
	uint64_t cursor;          /* the end of the chain of claims this rank has seen */
	struct claims_range *own; /* this rank's claims, in order */
	size_t n_own, cap_own;
	size_t cur;       /* own[cur]: the claim the stream is in (or the last one) */
	uint64_t lo, hi;  /* ids of own[cur] ([0, 0) before the first) */
	uint64_t lo_nth;  /* own ids before lo */
	uint64_t batch;   /* the next claim's length, in chunks */
	uint64_t last_ns; /* when the last claim was made */
	uint64_t cost_ns; /* what a claim costs, on average */
	uint64_t claims, collisions, claim_ns; /* made, lost to another rank, time spent */
	uint64_t nonce;
	bool ended; /* every chunk is claimed (a counted generator) */
	/* The lease (claims_live): alive.r<K> touched every lease / 4 by `beat`. */
	double lease;
	int alive_fd;
	pthread_t beat;
	bool beating;
	atomic_bool stop;
	unsigned takeovers;      /* lost ranks this one finished (claims_sweep) */
	unsigned *of;            /* of[r]: the number of ranks rank r's claims were made with */
	bool no_new;             /* a takeover's child: it finishes the lost rank's claims only */
	struct mpi_counter *mpi; /* where claims start, under mpirun (mpi.h); NULL: files */
	unsigned n_of;
	/* For the metrics thread: claims made, ids claimed, ns spent claiming. */
	_Atomic uint64_t pub_claims, pub_ids, pub_ns;
};

/* What claims_open is told of the job: the claims folder, this rank's journal as this
 * run names it (NULL: none), and the job's identity (cfg.stream_id; 0: not checked). */
struct claims_job {
	const char *dir;
	const char *journal;
	uint64_t stream_id;
};

/* Opens (makes) the claims folder `job->dir` for rank `rank` of `ranks`, and reads the
 * chain already there: this rank's claims of an earlier run of the job are its own again
 * (CLAIMS_RESUME); CLAIMS_FRESH refuses a folder holding claims of this rank (an
 * earlier run's: its outputs are about to be emptied). Refused too, before anything is
 * claimed: a folder another job made (its `job` link), a gap in the chain after a claim
 * made without MPI (a claim file removed), and a journal holding done tasks that no
 * claim of its rank covers (the folder or a claim lost since): this rank's (resuming)
 * and every other rank's that journal.r<K> names. A gap the MPI counter left (chunks
 * it gave a rank that died before recording them) is claimed as it is met, except by a
 * look or a takeover's child. 0, or -1 with why. */
enum { CLAIMS_FRESH, CLAIMS_RESUME, CLAIMS_LOOK /* gpud status: nothing made */ };
int claims_open(struct claims *c, const struct claims_job *job, unsigned rank, unsigned ranks,
		int mode, char *why, size_t len);
void claims_close(struct claims *c);

/* The rank is running: journal.r<K> in the folder names its journal (NULL: none),
 * alive.r<K> in the folder is touched every `lease` / 4 seconds
 * (from a thread of its own, until claims_close), and done.r<K> of an earlier run is
 * removed. 0, or -1 with why. */
int claims_live(struct claims *c, double lease, const char *journal, char *why, size_t len);
/* Every task of this rank's share has its outcome (its journal says so): done.r<K>. */
void claims_finished(struct claims *c);
/* After this rank's own run: waits until every other rank has finished, and finishes
 * the share of a rank whose alive.r<R> stood still for the lease, by running `gpud run
 * ARGS --rank R/N --resume` (this process's own arguments otherwise) as a child: it
 * resumes R's journal and R's output, and R's locks on them (runlock.h) refuse it while
 * R still runs, stopped or slow. `status` is this rank's exit status; returns it, or 1
 * when it was 0 and a rank it finished had failed tasks. */
int claims_sweep(struct claims *c, int status);

/* Under Open MPI's mpirun (the rank from its environment): claims start where a
 * counter in rank 0's MPI window says (mpi.h). Collective. 0 (in use, or not here:
 * *note says why not, when it is not), or -1 with why. */
int claims_use_mpi(struct claims *c, char *note, size_t note_len, char *why, size_t len);

/* `gpud status` of a job with dynamic shares: every rank's claims, ids, done (from its
 * journal, named by journal.r<K>), state (finished, its last sign of life), and the ids
 * claimed but not done; `total`: the generator's count, or -1. 0, or 2. */
int claims_status(const char *dir, int64_t total, FILE *out);

void claims_set_total(struct claims *c, uint64_t total);

/* The first id at or after `id` that is this rank's, claiming the next chunks when the
 * stream has passed its claims; UINT64_MAX when there is none (every chunk is claimed,
 * by a counted generator's end), or on an error claiming (errno set; *why filled). */
uint64_t claims_from(struct claims *c, uint64_t id, char *why, size_t len);

/* Whether `id` is this rank's, among the claims made: own[cur] first (the stream's),
 * then the rest. */
static inline bool claims_mine(struct claims *c, uint64_t id)
{
	if (id >= c->lo && id < c->hi)
		return true;
	uint64_t ch = id / RANKS_CHUNK;
	size_t a = 0, b = c->n_own;
	while (a < b) {
		size_t m = (a + b) / 2;
		if (c->own[m].end <= ch)
			a = m + 1;
		else
			b = m;
	}
	return a < c->n_own && c->own[a].first <= ch;
}

/* How many of this rank's ids come before `id` (its share of the ids below it). */
uint64_t claims_nth_slow(const struct claims *c, uint64_t id);
static inline uint64_t claims_nth(const struct claims *c, uint64_t id)
{
	if (id >= c->lo && id < c->hi)
		return c->lo_nth + (id - c->lo);
	return claims_nth_slow(c, id);
}

/* Whether chunk `chunk` is another rank's, as far as this rank knows (below the end of
 * the chain it has seen, and not its own): for the journal's low-water mark. */
bool claims_foreign(void *claims, uint64_t chunk);

/* A rank's share, static (ranks.h) or dynamic (`cl` not NULL): whether `id` is its, and
 * how many of its ids come before `id`. */
static inline bool shares_mine(struct claims *cl, uint64_t id, unsigned rank, unsigned ranks)
{
	return cl ? claims_mine(cl, id) : ranks_mine(id, rank, ranks);
}

static inline uint64_t shares_nth(const struct claims *cl, uint64_t id, unsigned rank,
				  unsigned ranks)
{
	return cl ? claims_nth(cl, id) : ranks_share(id, rank, ranks);
}

#endif
