/* SPDX-License-Identifier: MIT */
/*
 * Deaths and restarts (daemon/host/workers/lifecycle.c) on hand-built state: one worker
 * slot holding tasks in a task ring of plain memory, its report block saying which call
 * it was in, and the run's side (h->pool.up) replaced by recorders. No job runs and no
 * process starts: lifecycle_exited is called with a chosen exit status, and restarts
 * are ones that retire the GPU or are not made (the run is stopping).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "host.h"
#include "shm_layout.h"
#include "workers/lifecycle.h"

#define RING_CAP 65536u
#define MAX_SEEN 8

/* What the run's side was told. */
struct seen {
	unsigned n_requeued, n_outcomes, n_events;
	struct task_ent requeued[MAX_SEEN], outcome_of[MAX_SEEN];
	enum cause causes[MAX_SEEN];
	char messages[MAX_SEEN][512];
	char inputs[MAX_SEEN][16];
	enum gpud_event_kind events[MAX_SEEN];
};

static struct seen seen;

static void on_outcome(struct host *h, const struct host_worker *w, const struct task_ent *t,
		       const void *input, enum cause cause, const void *result, size_t result_size,
		       const char *message, double seconds)
{
	(void)h, (void)w, (void)input, (void)result, (void)result_size, (void)seconds;
	cr_assert_lt(seen.n_outcomes, MAX_SEEN);
	seen.outcome_of[seen.n_outcomes] = *t;
	seen.causes[seen.n_outcomes] = cause;
	snprintf(seen.messages[seen.n_outcomes], sizeof seen.messages[0], "%s",
		 message ? message : "");
	seen.n_outcomes++;
}

static void on_event(struct host *h, enum gpud_event_kind kind, const struct host_worker *w,
		     const char *message)
{
	(void)h, (void)w, (void)message;
	cr_assert_lt(seen.n_events, MAX_SEEN);
	seen.events[seen.n_events++] = kind;
}

static void on_requeue(struct host *h, const struct task_ent *t, const void *input, int avoid,
		       unsigned stage)
{
	(void)h, (void)avoid, (void)stage;
	cr_assert_lt(seen.n_requeued, MAX_SEEN);
	memcpy(seen.inputs[seen.n_requeued], input, t->size < 16 ? t->size : 16);
	seen.requeued[seen.n_requeued++] = *t;
}

static void on_ready(struct host *h, struct host_worker *w)
{
	(void)h, (void)w;
	cr_assert_fail("no worker becomes ready here");
}

static const struct lifecycle_up up = {on_outcome, on_event, on_requeue, on_ready};

struct bench {
	struct cfg cfg;
	struct host h;
	struct host_worker w;
	struct shm_report rep;
	struct shm_feed feed;
	struct task_ent tt[16];
	int gpus[1];
	unsigned restarts[1];
	bool retired[1];
	_Alignas(64) uint8_t ring[RING_CAP];
};

/* A ready worker on GPU 0 holding tasks `ids` (n of them, each input "task<ID>"), none
 * of it started yet; max_worker_restarts = `restarts`. */
static struct bench *bench_new(const uint64_t *ids, unsigned n, unsigned restarts)
{
	memset(&seen, 0, sizeof seen);
	struct bench *b = calloc(1, sizeof *b);
	cr_assert(b);
	b->gpus[0] = 0;
	b->cfg.gpus = b->gpus;
	b->cfg.n_gpus = 1;
	b->cfg.workers_per_gpu = 1;
	b->cfg.gpus_per_worker = 1;
	b->cfg.max_retries = 1;
	b->cfg.max_worker_restarts = restarts;
	b->h = (struct host)HOST_INIT(&b->cfg);
	b->h.view.mode = UI_PLAIN; /* notes kept, for the test to read */
	pthread_mutex_init(&b->h.view.notes.lock, NULL);
	b->h.pool.w = &b->w;
	b->h.pool.n = 1;
	b->h.pool.n_gpu_workers = 1;
	b->h.pool.restarts = b->restarts;
	b->h.pool.retired = b->retired;
	b->h.pool.up = &up;
	b->w.rep = &b->rep;
	b->w.feed = &b->feed;
	b->w.state = HW_READY;
	b->w.pid = -1;
	b->w.tasks = (struct ring){b->ring, RING_CAP, 0};
	b->w.tt = b->tt;
	b->w.tt_mask = 15;
	for (unsigned i = 0; i < n; i++) {
		struct task_ent e = {.id = ids[i], .size = 8};
		struct shm_rec *r = ring_at(&b->w.tasks, b->w.task_head);
		snprintf(ring_payload(r), 9, "task%04llu", (unsigned long long)ids[i]);
		tasks_place(&b->w, r, &e);
	}
	atomic_store(&b->rep.task_tail, b->w.task_free);
	atomic_store(&b->rep.run_from, b->w.task_free);
	b->h.flow.in_flight = n;
	return b;
}

/* The ring position of the k-th task held. */
static uint64_t pos_of(const struct bench *b, unsigned k)
{
	return b->tt[k].pos;
}

/* The worker says it runs the call [tasks first..last] (busy since 1 s ago). */
static void running(struct bench *b, unsigned first, unsigned last)
{
	atomic_store(&b->rep.run_from, pos_of(b, first));
	atomic_store(&b->rep.task_tail, pos_of(b, last) + ring_span(b->tt[last].size));
	atomic_store(&b->rep.busy_since_ns, wait_now_ns() - 1000000000ull);
}

static bool noted(const struct bench *b, const char *what)
{
	for (uint64_t i = 0; i < b->h.view.notes.count && i < HOST_NOTES; i++)
		if (strstr(b->h.view.notes.text[i], what))
			return true;
	return false;
}

/* A crash in a call of one task: that task fails naming how, the one before it (done,
 * its result never taken) and the one after it (not started) run again; with
 * max_worker_restarts = 0 the GPU is retired, said to the operator and to the sink. */
Test(deaths, a_crash_blames_the_running_task_alone)
{
	const uint64_t ids[] = {10, 11, 12};
	struct bench *b = bench_new(ids, 3, 0);
	running(b, 1, 1);
	b->w.exit_status = SIGSEGV; /* killed by a signal: the wait status */
	lifecycle_exited(&b->h, &b->w);

	cr_assert_eq(seen.n_outcomes, 1, "one task blamed");
	cr_expect_eq(seen.outcome_of[0].id, 11);
	cr_expect_eq(seen.causes[0], CAUSE_CRASH);
	cr_expect(strstr(seen.messages[0], "while running task 11"), "%s", seen.messages[0]);
	cr_expect(strstr(seen.messages[0], "SIGSEGV") || strstr(seen.messages[0], "signal"), "%s",
		  seen.messages[0]);
	cr_assert_eq(seen.n_requeued, 2, "the others run again");
	cr_expect_eq(seen.requeued[0].id, 10);
	cr_expect_eq(seen.requeued[1].id, 12);
	cr_expect(!memcmp(seen.inputs[1], "task0012", 8), "the input goes with it");
	cr_expect_eq(tasks_held(&b->w), 0);
	cr_expect_eq(b->h.flow.in_flight, 0);
	cr_expect(b->retired[0], "GPU 0 retired (max_worker_restarts = 0)");
	cr_expect_eq(b->w.state, HW_GONE);
	cr_assert_eq(seen.n_events, 1);
	cr_expect_eq(seen.events[0], GPUD_GPU_RETIRED);
	cr_expect(noted(b, "GPU 0 retired"), "the operator is told");
	free(b);
}

/* A death in a batch of two that nothing narrows: neither is blamed, each runs again
 * alone, so that only a task that kills a worker by itself is ever called poison. */
Test(deaths, a_death_in_a_batch_runs_each_task_again_alone)
{
	const uint64_t ids[] = {20, 21};
	struct bench *b = bench_new(ids, 2, 0);
	running(b, 0, 1);
	b->w.exit_status = SIGABRT;
	lifecycle_exited(&b->h, &b->w);
	cr_expect_eq(seen.n_outcomes, 0, "nobody blamed");
	cr_assert_eq(seen.n_requeued, 2);
	cr_expect(seen.requeued[0].alone && seen.requeued[1].alone, "each alone from now on");
	cr_expect_eq(seen.requeued[0].crashes, 0, "no crash counted against either");
	free(b);
}

/* A task that killed a worker before kills one again: past max_retries it is poison
 * (final), and this restart is the task's, not the GPU's (not counted). */
Test(deaths, a_task_that_crashed_twice_is_poison_and_its_restart_is_free)
{
	const uint64_t ids[] = {30};
	struct bench *b = bench_new(ids, 1, 0);
	b->tt[0].crashes = 1;
	b->h.ctl.stopping = true; /* no process is started here */
	running(b, 0, 0);
	b->w.exit_status = SIGSEGV;
	lifecycle_exited(&b->h, &b->w);
	cr_assert_eq(seen.n_outcomes, 1);
	cr_expect_eq(seen.causes[0], CAUSE_FINAL);
	cr_expect(strstr(seen.messages[0], "poison task: 2 workers died"), "%s", seen.messages[0]);
	cr_expect(b->w.free_restart, "its restart is marked the task's");
	cr_expect_eq(b->restarts[0], 0, "not counted against GPU 0");
	cr_expect(!b->retired[0]);
	cr_expect_eq(b->w.state, HW_GONE, "the run is stopping: not restarted");
	free(b);
}

/* A worker that exits TAINTED (its plugin wrote before a result buffer): the call's task
 * gets a strike and runs again, and the operator is told why the worker was replaced. */
Test(deaths, a_tainted_exit_is_told_and_gives_its_task_a_strike)
{
	const uint64_t ids[] = {40, 41};
	struct bench *b = bench_new(ids, 2, 0);
	running(b, 0, 0);
	b->w.exit_status = WORKER_EXIT_TAINTED << 8; /* exited with that status */
	lifecycle_exited(&b->h, &b->w);
	cr_expect_eq(seen.n_outcomes, 0, "a strike, not a failure");
	cr_assert_eq(seen.n_requeued, 2);
	cr_expect_eq(seen.requeued[0].id, 40);
	cr_expect_eq(seen.requeued[0].strikes, 1, "the call's task has a strike");
	cr_expect_eq(seen.requeued[1].strikes, 0, "the next one none");
	cr_expect(noted(b, "exited tainted"), "the operator is told");
	free(b);
}
