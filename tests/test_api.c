/* SPDX-License-Identifier: MIT */
/* libgpud's API (gpud/gpud.h): jobs of keys, in-process callbacks, a stop from another
 * thread and the resume after it, misuse answered with errors. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <gpud/gpud.h>

#include "helpers.h"

#define N_MAX 1000

/* The caller's tasks: "item-<i>" for i below n; next and skip move along them. */
struct feed {
	unsigned n, next;
	int fail_at; /* -1, or the item whose next() fails */
	bool closed;
};

static int feed_next(void *ctx, struct gpud_buf *item, struct gpud_error *err)
{
	struct feed *f = ctx;
	if (f->fail_at >= 0 && f->next == (unsigned)f->fail_at)
		return gpud_fail(err, "feed: no item %u today", f->next);
	if (f->next >= f->n)
		return 0;
	item->size = (size_t)snprintf(item->data, item->capacity, "item-%u", f->next++);
	return 1;
}

static int64_t feed_total(void *ctx)
{
	return ((struct feed *)ctx)->n;
}

static int feed_skip(void *ctx, uint64_t n, struct gpud_error *err)
{
	(void)err;
	((struct feed *)ctx)->next += (unsigned)n;
	return 0;
}

static void feed_close(void *ctx)
{
	((struct feed *)ctx)->closed = true;
}

static const struct gpud_generator_ops feed_ops = {
	.size = sizeof feed_ops,
	.next = feed_next,
	.total = feed_total,
	.skip = feed_skip,
	.close = feed_close,
};

/* The caller's sink: how often each task came ok with the right result. */
struct tally {
	atomic_uint events; /* outcomes seen, read by the stopping thread */
	unsigned ok[N_MAX], bad;
	int fail_at; /* -1, or the outcome count at which event() fails */
	bool closed;
	struct gpud_stats closed_with;
};

static int tally_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	struct tally *t = ctx;
	if (ev->kind != GPUD_TASK_OK && ev->kind != GPUD_TASK_ERROR)
		return 0;
	if (t->fail_at >= 0 && atomic_load(&t->events) == (unsigned)t->fail_at)
		return gpud_fail(err, "tally: disk full at task %llu",
				 (unsigned long long)ev->task_id);
	char want[64];
	snprintf(want, sizeof want, "id=%llu in=item-%llu ", (unsigned long long)ev->task_id,
		 (unsigned long long)ev->task_id);
	if (ev->kind == GPUD_TASK_OK && ev->task_id < N_MAX && ev->result_size >= strlen(want) &&
	    !memcmp(ev->result, want, strlen(want)))
		t->ok[ev->task_id]++;
	else
		t->bad++;
	atomic_fetch_add(&t->events, 1);
	return 0;
}

static int tally_close(void *ctx, const struct gpud_stats *stats, struct gpud_error *err)
{
	(void)err;
	struct tally *t = ctx;
	t->closed = true;
	t->closed_with = *stats;
	return 0;
}

static uint32_t tally_events(void *ctx)
{
	(void)ctx;
	return GPUD_EVENT_BIT(GPUD_TASK_OK) | GPUD_EVENT_BIT(GPUD_TASK_ERROR);
}

/* On resume: what this sink already holds, as its output would tell. */
static int tally_resume(void *ctx, void (*done)(void *, uint64_t, int), void *done_ctx,
			struct gpud_error *err)
{
	(void)err;
	struct tally *t = ctx;
	for (uint64_t i = 0; i < N_MAX; i++)
		if (t->ok[i])
			done(done_ctx, i, 0);
	return 0;
}

static const struct gpud_sink_ops tally_ops = {
	.size = sizeof tally_ops,
	.event = tally_event,
	.close = tally_close,
	.events = tally_events,
	.resume = tally_resume,
};

/* A job of keys alone: two simulated GPUs, the probe worker. */
static gpud_job *keys_job(const char *dir, long sleep_us, bool journal)
{
	gpud_job *job = gpud_job_new();
	cr_assert_not_null(job);
	char probe[4096];
	snprintf(probe, sizeof probe, "%s/worker-probe.so", t_env("FIXTURES"));
	cr_assert_eq(gpud_job_set(job, "job.gpus", "0,1"), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "worker.plugin", probe), 0, "%s", gpud_job_error(job));
	char v[64];
	snprintf(v, sizeof v, "%ld", sleep_us);
	cr_assert_eq(gpud_job_set(job, "worker.sleep_us", v), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "job.drain_timeout", "30"), 0);
	if (journal) {
		char j[4096];
		snprintf(j, sizeof j, "job.journal=%s/run.journal", dir);
		cr_assert_eq(gpud_job_set(job, j, NULL), 0, "%s", gpud_job_error(job));
	}
	return job;
}

Test(api, keys_only_callbacks_every_result)
{
	const char *dir = t_tmpdir();
	struct feed f = {.n = 300, .fail_at = -1};
	static struct tally t = {.fail_at = -1};
	gpud_job *job = keys_job(dir, 0, false);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &tally_ops, &t), 0);
	struct gpud_run_options o = {.size = sizeof o, .ui = GPUD_UI_OFF};
	cr_assert_null(gpud_job_stats(job), "no stats before the run");
	int rc = gpud_job_run(job, &o);
	cr_assert_eq(rc, 0, "status %d: %s", rc, gpud_job_error(job));
	for (unsigned i = 0; i < f.n; i++)
		cr_expect_eq(t.ok[i], 1, "task %u delivered %u times", i, t.ok[i]);
	cr_expect_eq(t.bad, 0);
	cr_expect(f.closed && t.closed, "both closed");
	const struct gpud_stats *s = gpud_job_stats(job);
	cr_assert_not_null(s);
	cr_expect_eq(s->ok, 300);
	cr_expect_eq(s->generated, 300);
	cr_expect_eq(t.closed_with.ok, 300);
	const char *json = gpud_job_stats_json(job);
	cr_assert_not_null(json);
	cr_expect(strstr(json, "\"ok\": 300,") && strstr(json, "\"exit_status\": 0"), "%s", json);
	/* One run per job. */
	cr_expect_eq(gpud_job_run(job, &o), -1);
	cr_expect(strstr(gpud_job_error(job), "one run per job"), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_set(job, "job.gpus", "0"), -1, "no change after the run");
	gpud_job_free(job);
}

struct stopper {
	gpud_job *job;
	struct tally *t;
	unsigned after;
};

static void *stop_part_way(void *arg)
{
	struct stopper *s = arg;
	while (atomic_load(&s->t->events) < s->after)
		usleep(1000);
	gpud_job_stop(s->job);
	return NULL;
}

Test(api, stopped_from_a_thread_then_resumed_every_task_once)
{
	const char *dir = t_tmpdir();
	static struct tally t = {.fail_at = -1};
	struct feed f = {.n = 400, .fail_at = -1};
	gpud_job *job = keys_job(dir, 2000, true);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &tally_ops, &t), 0);
	struct stopper st = {job, &t, 60};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, stop_part_way, &st), 0);
	struct gpud_run_options o = {.size = sizeof o};
	int rc = gpud_job_run(job, &o);
	pthread_join(th, NULL);
	cr_assert_eq(rc, 4, "stopped with a journal: %d (%s)", rc, gpud_job_error(job));
	unsigned first = atomic_load(&t.events);
	cr_assert(first >= 60 && first < 400, "stopped part way: %u", first);
	cr_expect_eq(gpud_job_stats(job)->ok, first);
	gpud_job_free(job);

	/* A new job, resumed: the rest, each task once. */
	struct feed f2 = {.n = 400, .fail_at = -1};
	job = keys_job(dir, 2000, true); /* the same job: its keys are in the journal */
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f2), 0);
	cr_assert_eq(gpud_job_set_sink(job, &tally_ops, &t), 0);
	o.flags = GPUD_RUN_RESUME;
	rc = gpud_job_run(job, &o);
	cr_assert_eq(rc, 0, "resumed: %d (%s)", rc, gpud_job_error(job));
	for (unsigned i = 0; i < 400; i++)
		cr_expect_eq(t.ok[i], 1, "task %u delivered %u times", i, t.ok[i]);
	cr_expect_eq(t.bad, 0);
	cr_expect_eq(gpud_job_stats(job)->ok, 400 - first);
	gpud_job_free(job);
}

Test(api, a_stop_before_the_run_stops_it_at_once)
{
	const char *dir = t_tmpdir();
	static struct tally t = {.fail_at = -1};
	struct feed f = {.n = 100000, .fail_at = -1};
	gpud_job *job = keys_job(dir, 1000, false);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &tally_ops, &t), 0);
	gpud_job_stop(job);
	int rc = gpud_job_run(job, NULL);
	cr_expect_eq(rc, 3, "stopped without a journal: %d", rc);
	cr_expect_lt(gpud_job_stats(job)->ok, 100000);
	gpud_job_free(job);
}

Test(api, generator_callback_error_is_a_generator_failure)
{
	const char *dir = t_tmpdir();
	static struct tally t = {.fail_at = -1};
	struct feed f = {.n = 50, .fail_at = 20};
	gpud_job *job = keys_job(dir, 0, false);
	gpud_job_set_generator(job, &feed_ops, &f);
	gpud_job_set_sink(job, &tally_ops, &t);
	int rc = gpud_job_run(job, NULL);
	cr_expect_eq(rc, 3);
	cr_expect(strstr(gpud_job_error(job), "feed: no item 20 today"), "%s", gpud_job_error(job));
	/* What it yielded before still ran. */
	for (unsigned i = 0; i < 20; i++)
		cr_expect_eq(t.ok[i], 1, "task %u", i);
	gpud_job_free(job);
}

Test(api, sink_callback_error_is_a_sink_failure)
{
	const char *dir = t_tmpdir();
	static struct tally t = {.fail_at = 5};
	struct feed f = {.n = 50, .fail_at = -1};
	gpud_job *job = keys_job(dir, 0, false);
	gpud_job_set_generator(job, &feed_ops, &f);
	gpud_job_set_sink(job, &tally_ops, &t);
	int rc = gpud_job_run(job, NULL);
	cr_expect_eq(rc, 3);
	cr_expect(strstr(gpud_job_error(job), "tally: disk full at task"), "%s",
		  gpud_job_error(job));
	gpud_job_free(job);
}

Test(api, bad_keys_are_named_with_their_place)
{
	const char *dir = t_tmpdir();
	gpud_job *job = gpud_job_new();
	cr_expect_eq(gpud_job_set(job, "job.queue_size", "0"), -1);
	cr_expect(strstr(gpud_job_error(job), "--set job.queue_size=0"), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_set(job, "job.no_such_key", "1"), -1);
	cr_expect(strstr(gpud_job_error(job), "no_such_key"), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_set(job, "nodot=1", NULL), -1);
	cr_expect(strstr(gpud_job_error(job), "expected SECTION.KEY=VALUE"), "%s",
		  gpud_job_error(job));
	/* A job file's bad line: file:line. */
	char *path = t_write(dir, "bad.ini", "[job]\ngpus = 0\nworkers_per_gpu = many\n");
	cr_expect_eq(gpud_job_load(job, path), -1);
	char want[4200];
	snprintf(want, sizeof want, "%s:3:", path);
	cr_expect(strstr(gpud_job_error(job), want), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_load(job, "/no/such/job.ini"), -1);
	cr_expect(strstr(gpud_job_error(job), "/no/such/job.ini"), "%s", gpud_job_error(job));
	/* What the whole job lacks is said when it runs: status 2, nothing ran. */
	cr_expect_eq(gpud_job_run(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), "gpus is required"), "%s", gpud_job_error(job));
	free(path);
	gpud_job_free(job);
}

/* A sink that, at its first outcome, tries to run a second job in the same process. */
struct nester {
	const char *dir;
	int rc;
	char why[512];
	bool tried;
};

static int nest_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	(void)err;
	struct nester *n = ctx;
	if (ev->kind != GPUD_TASK_OK || n->tried)
		return 0;
	n->tried = true;
	gpud_job *second = keys_job(n->dir, 0, false);
	n->rc = gpud_job_run(second, NULL);
	snprintf(n->why, sizeof n->why, "%s", gpud_job_error(second));
	gpud_job_free(second);
	return 0;
}

/* One run at a time per process; a key without a value, a key holding '=' beside a
 * value and a sink without event are refused, each saying so. */
Test(api, one_run_at_a_time_and_incomplete_calls_are_refused)
{
	const char *dir = t_tmpdir();
	struct feed f = {.n = 20, .fail_at = -1};
	struct nester n = {.dir = dir};
	struct gpud_sink_ops nest_ops = {.size = sizeof nest_ops, .event = nest_event};
	gpud_job *job = keys_job(dir, 0, false);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &nest_ops, &n), 0);
	int rc = gpud_job_run(job, NULL);
	cr_expect_eq(rc, 0, "the first run: %d (%s)", rc, gpud_job_error(job));
	cr_assert(n.tried, "the sink saw an outcome");
	cr_expect_eq(n.rc, -1, "a second run meanwhile: %d", n.rc);
	cr_expect(strstr(n.why, "another gpud run is in progress"), "%s", n.why);
	gpud_job_free(job);

	job = gpud_job_new();
	cr_expect_eq(gpud_job_set(job, "job.gpus", NULL), -1);
	cr_expect(strstr(gpud_job_error(job), "has no value"), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_set(job, "job.gpus=0", "1"), -1);
	cr_expect(strstr(gpud_job_error(job), "holds '='"), "%s", gpud_job_error(job));
	struct gpud_sink_ops no_event = {.size = sizeof no_event};
	cr_expect_eq(gpud_job_set_sink(job, &no_event, NULL), -1);
	cr_expect(strstr(gpud_job_error(job), "event is required"), "%s", gpud_job_error(job));
	gpud_job_free(job);
}

Test(api, misuse_is_answered_with_errors)
{
	cr_expect_eq(gpud_job_load(NULL, "x.ini"), -1);
	cr_expect_eq(gpud_job_set(NULL, "job.gpus", "0"), -1);
	cr_expect_eq(gpud_job_set_generator(NULL, &feed_ops, NULL), -1);
	cr_expect_eq(gpud_job_set_sink(NULL, &tally_ops, NULL), -1);
	cr_expect_eq(gpud_job_run(NULL, NULL), -1);
	cr_expect_eq(gpud_job_check(NULL, NULL), -1);
	cr_expect_eq(gpud_job_status(NULL, NULL), -1);
	cr_expect_null(gpud_job_stats(NULL));
	cr_expect_null(gpud_job_stats_json(NULL));
	cr_expect_not_null(gpud_job_error(NULL));
	gpud_job_stop(NULL);
	gpud_job_free(NULL);

	gpud_job *job = gpud_job_new();
	cr_expect_eq(gpud_job_load(job, NULL), -1);
	cr_expect_eq(gpud_job_set(job, NULL, "1"), -1);
	struct gpud_generator_ops no_next = {.size = sizeof no_next};
	cr_expect_eq(gpud_job_set_generator(job, &no_next, NULL), -1);
	cr_expect(strstr(gpud_job_error(job), "next is required"), "%s", gpud_job_error(job));
	struct gpud_sink_ops tiny = {.size = 1};
	cr_expect_eq(gpud_job_set_sink(job, &tiny, NULL), -1);
	cr_expect(strstr(gpud_job_error(job), "too small"), "%s", gpud_job_error(job));
	struct gpud_run_options bad = {.size = sizeof bad, .ui = (enum gpud_ui)7};
	cr_expect_eq(gpud_job_run(job, &bad), -1);
	cr_expect(strstr(gpud_job_error(job), "ui is 7"), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_api_version() >> 16, GPUD_API_MAJOR);
	cr_expect_str_not_empty(gpud_version());
	gpud_job_free(job);
}

Test(api, check_a_job_of_keys_with_callbacks)
{
	const char *dir = t_tmpdir();
	struct feed f = {.n = 1, .fail_at = -1};
	static struct tally t = {.fail_at = -1};
	gpud_job *job = keys_job(dir, 0, false);
	gpud_job_set_generator(job, &feed_ops, &f);
	gpud_job_set_sink(job, &tally_ops, &t);
	cr_expect_eq(gpud_job_check(job, NULL), 0, "%s", gpud_job_error(job));
	cr_expect_eq(atomic_load(&t.events), 0, "check runs nothing");
	gpud_job_free(job);
}

/* (API 1.5) The check report carries the shared memory's figures, the same as its
 * text's "shared memory:" lines: in all, the run memfd, a result memfd per worker;
 * each worker's rings; the workers. */
Test(api, check_report_gives_the_shared_memory_figures)
{
	const char *dir = t_tmpdir();
	struct feed f = {.n = 1, .fail_at = -1};
	static struct tally t = {.fail_at = -1};
	gpud_job *job = keys_job(dir, 0, false);
	cr_assert_eq(gpud_job_set(job, "job.batch_size", "5"), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "job.max_task_bytes", "100K"), 0);
	cr_assert_eq(gpud_job_set(job, "job.max_result_bytes", "30K"), 0);
	gpud_job_set_generator(job, &feed_ops, &f);
	gpud_job_set_sink(job, &tally_ops, &t);
	cr_assert_eq(gpud_job_check(job, NULL), 0, "%s", gpud_job_error(job));
	const struct gpud_check_report *r = gpud_job_check_report(job);
	cr_assert_not_null(r);
	cr_expect_eq(r->shm_workers, 2);
	/* Rings are powers of two with room for two batches: 5 x (100 KiB + a header)
	 * twice is just under 1 MiB; 5 x (30 KiB + header + gap) twice, 512 KiB. */
	cr_expect_eq(r->shm_task_ring, 1u << 20, "%s", r->text);
	cr_expect_eq(r->shm_result_ring, 512u << 10, "%s", r->text);
	cr_expect_geq(r->shm_result_memfd, r->shm_result_ring);
	cr_expect_geq(r->shm_run_memfd, 2 * r->shm_task_ring);
	cr_expect_eq(r->shm_total, r->shm_run_memfd + 2 * r->shm_result_memfd + 4096);
	char want[160];
	snprintf(want, sizeof want, " in all, %llu bytes: the run's memfd of ",
		 (unsigned long long)r->shm_total);
	cr_expect(strstr(r->text, want), "%s not in %s", want, r->text);
	snprintf(want, sizeof want, " (%llu bytes), a bell page",
		 (unsigned long long)r->shm_result_memfd);
	cr_expect(strstr(r->text, want), "%s not in %s", want, r->text);
	gpud_job_free(job);
}

/* A job of keys for the sha256 worker, which declares its keys, with callbacks. */
static gpud_job *sha_job(struct feed *f, struct tally *t)
{
	gpud_job *job = gpud_job_new();
	cr_assert_eq(gpud_job_set(job, "job.gpus", "0"), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "worker.plugin", "sha256"), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &tally_ops, t), 0);
	return job;
}

/* Every status 2 found before the run has its reason in gpud_job_error, not only on
 * standard error. */
Test(api, reasons_found_by_check_and_run_reach_the_error)
{
	const char *dir = t_tmpdir();
	struct feed f = {.n = 5, .fail_at = -1};
	static struct tally t = {.fail_at = -1};
	/* A key the plugin does not declare: known only once the plugin is. */
	gpud_job *job = sha_job(&f, &t);
	cr_expect_eq(gpud_job_set(job, "worker.salty", "1"), 0, "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_check(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), "--set worker.salty=1: unknown key 'salty'"), "%s",
		  gpud_job_error(job));
	cr_expect_eq(gpud_job_run(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), "--set worker.salty=1: unknown key 'salty'"), "%s",
		  gpud_job_error(job));
	gpud_job_free(job);

	/* A worker plugin that is not there. */
	job = sha_job(&f, &t);
	cr_assert_eq(gpud_job_set(job, "worker.plugin", "/nonexistent.so"), 0);
	cr_expect_eq(gpud_job_run(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), "/nonexistent.so"), "%s", gpud_job_error(job));
	gpud_job_free(job);

	/* A job file's undeclared key, on line 5. */
	char *path = t_write(dir, "job.ini",
			     "[job]\ngpus = 0\njournal = off\n[worker]\nroundz = 3\n"
			     "plugin = sha256\n");
	job = gpud_job_new();
	cr_assert_eq(gpud_job_load(job, path), 0, "%s", gpud_job_error(job));
	gpud_job_set_generator(job, &feed_ops, &f);
	gpud_job_set_sink(job, &tally_ops, &t);
	char want[4200];
	snprintf(want, sizeof want, "%s:5: unknown key 'roundz'", path);
	cr_expect_eq(gpud_job_check(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), want), "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_run(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), want), "%s", gpud_job_error(job));
	gpud_job_free(job);
	free(path);

	/* A resume of a journal another job wrote. */
	char journal[4200];
	snprintf(journal, sizeof journal, "%s/other.journal", dir);
	job = sha_job(&f, &t);
	gpud_job_set(job, "job.journal", journal);
	gpud_job_set(job, "worker.rounds", "1");
	gpud_job_stop(job);
	cr_assert_eq(gpud_job_run(job, NULL), 4, "%s", gpud_job_error(job));
	gpud_job_free(job);
	job = sha_job(&f, &t);
	gpud_job_set(job, "job.journal", journal);
	gpud_job_set(job, "worker.rounds", "2");
	struct gpud_run_options o = {.size = sizeof o, .flags = GPUD_RUN_RESUME};
	cr_expect_eq(gpud_job_run(job, &o), 2);
	cr_expect(strstr(gpud_job_error(job), "was written by another job"), "%s",
		  gpud_job_error(job));
	gpud_job_free(job);
}

/* gpud_job_set refuses what cannot be one key and one value, whatever its length. */
Test(api, set_refuses_control_bytes_and_lengths)
{
	gpud_job *job = gpud_job_new();
	cr_expect_eq(gpud_job_set(job, "job.gpus", "0\n[worker]\nplugin=/x.so"), -1);
	cr_expect(
		strstr(gpud_job_error(job), "--set job.gpus: the value has a control byte (0x0a)"),
		"%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_set(job, "worker.salt", "1\tx"), -1);
	cr_expect_eq(gpud_job_set(job, "worker.sa\nlt", "1"), -1);
	cr_expect(strstr(gpud_job_error(job), "the key has a control byte"), "%s",
		  gpud_job_error(job));
	cr_expect_eq(gpud_job_set(job, "job.gpus=0", "1"), -1);
	cr_expect_eq(gpud_job_set(job, "job.gpus", "abc"), -1);

	char big[1200];
	memset(big, 'a', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	cr_expect_eq(gpud_job_set(job, big, "1"), -1, "a 1,199-byte key");
	cr_expect(strstr(gpud_job_error(job), "1199 bytes long"), "%s", gpud_job_error(job));
	memcpy(big, "job", 3); /* "jobaaa...": no dot, but short */
	big[40] = '\0';
	cr_expect_eq(gpud_job_set(job, big, "1"), -1);
	cr_expect(strstr(gpud_job_error(job), "expected SECTION.KEY=VALUE"), "%s",
		  gpud_job_error(job));

	char zeros[1200];
	memset(zeros, '0', sizeof zeros - 1);
	zeros[sizeof zeros - 1] = '\0';
	cr_expect_eq(gpud_job_set(job, "job.queue_size", zeros), -1, "1,199 zeros");
	cr_expect(strstr(gpud_job_error(job), "--set job.queue_size=000"), "%s",
		  gpud_job_error(job));
	char *huge = malloc((2 << 20) + 1);
	memset(huge, '1', 2 << 20);
	huge[2 << 20] = '\0';
	cr_expect_eq(gpud_job_set(job, "worker.salt", huge), -1);
	cr_expect(strstr(gpud_job_error(job), "bytes long: at most"), "%s", gpud_job_error(job));
	free(huge);

	/* None of them stayed in the job: its one fault is its own, said briefly. */
	cr_expect_eq(gpud_job_set(job, "job.queue_size", "8"), 0);
	cr_expect_str_empty(gpud_job_error(job), "a call that succeeds clears the error");
	cr_expect_eq(gpud_job_check(job, NULL), 2);
	cr_expect(strstr(gpud_job_error(job), "gpus is required"), "%s", gpud_job_error(job));
	cr_expect_lt(strlen(gpud_job_error(job)), 200, "%s", gpud_job_error(job));
	gpud_job_free(job);
}

static int count_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	(void)err;
	if (ev->kind == GPUD_TASK_OK)
		(*(unsigned *)ctx)++;
	return 0;
}

/* The caller's children from before the run are the caller's: the run neither kills
 * them nor takes their exit status, and a worker's death is still seen while one of
 * them is an unreaped zombie. */
Test(api, the_callers_children_are_left_alone, .timeout = 120)
{
	pid_t sleeper = fork();
	cr_assert_geq(sleeper, 0);
	if (sleeper == 0) {
		execlp("sleep", "sleep", "30", (char *)NULL);
		_exit(127);
	}
	pid_t quick = fork();
	cr_assert_geq(quick, 0);
	if (quick == 0) {
		usleep(50000);
		_exit(7);
	}
	char faulty[4096];
	snprintf(faulty, sizeof faulty, "%s/worker-faulty.so", t_env("FIXTURES"));
	unsigned ok = 0;
	struct gpud_sink_ops sink = {.size = sizeof sink, .event = count_event};
	gpud_job *job = gpud_job_new();
	cr_assert_eq(gpud_job_set(job, "job.gpus", "0"), 0);
	cr_assert_eq(gpud_job_set(job, "worker.plugin", faulty), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "worker.sleep_us", "3000"), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "worker.crash_on", "100"), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "worker.first_attempt_only", "1"), 0);
	cr_assert_eq(gpud_job_set(job, "job.max_retries", "1"), 0);
	cr_assert_eq(gpud_job_set(job, "generator.plugin", "range"), 0);
	cr_assert_eq(gpud_job_set(job, "generator.stop", "200"), 0);
	cr_assert_eq(gpud_job_set_sink(job, &sink, &ok), 0);
	int rc = gpud_job_run(job, NULL);
	cr_expect_eq(rc, 0, "status %d: %s", rc, gpud_job_error(job));
	cr_expect_eq(ok, 200);
	cr_expect_geq(gpud_job_stats(job)->worker_restarts, 1, "the crash was seen");
	/* The quick one exited during the run: its status is still ours to take. */
	int st;
	cr_expect_eq(waitpid(quick, &st, WNOHANG), quick, "the exited child kept its status");
	cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 7, "status %#x", st);
	/* The sleeper lives on. */
	cr_expect_eq(waitpid(sleeper, &st, WNOHANG), 0, "the sleeping child is alive");
	kill(sleeper, SIGTERM);
	cr_expect_eq(waitpid(sleeper, &st, 0), sleeper);
	cr_expect(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "status %#x", st);
	gpud_job_free(job);
}

static double json_number(const char *json, const char *key)
{
	char k[64];
	snprintf(k, sizeof k, "\"%s\": ", key);
	const char *p = strstr(json, k);
	cr_assert_not_null(p, "%s in %s", key, json);
	return strtod(p + strlen(k), NULL);
}

static double wall_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The stats' times are the run's, on a precise clock; its CPU time is the run's share
 * of the process's, not what the caller burnt before. */
Test(api, stats_times_and_cpu_are_the_runs)
{
	const char *dir = t_tmpdir();
	/* CPU the caller spends before the run. */
	volatile double x = 0;
	struct timespec c0, c1;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
	do {
		for (int i = 0; i < 100000; i++)
			x += i * 0.5;
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
	} while ((double)(c1.tv_sec - c0.tv_sec) + (double)(c1.tv_nsec - c0.tv_nsec) * 1e-9 < 0.6);
	struct feed f = {.n = 20, .fail_at = -1};
	static struct tally t = {.fail_at = -1};
	gpud_job *job = keys_job(dir, 10000, false);
	gpud_job_set_generator(job, &feed_ops, &f);
	gpud_job_set_sink(job, &tally_ops, &t);
	double before = wall_now();
	cr_assert_eq(gpud_job_run(job, NULL), 0, "%s", gpud_job_error(job));
	double after = wall_now();
	const char *json = gpud_job_stats_json(job);
	cr_assert_not_null(json);
	double start = json_number(json, "start_time"), end = json_number(json, "end_time");
	cr_expect(start >= before - 0.002 && end <= after + 0.002 && start <= end,
		  "start %.3f end %.3f, called at %.3f, returned at %.3f", start, end, before,
		  after);
	cr_expect_lt(json_number(json, "host_cpu_seconds"), 0.5, "%s", json);
	gpud_job_free(job);
}

/* The tally without resume: the journal alone says what is done. */
static const struct gpud_sink_ops journaled_ops = {
	.size = sizeof journaled_ops,
	.event = tally_event,
	.close = tally_close,
	.events = tally_events,
};

/* A live source: n items, then next() blocks (a read of a pipe) until interrupt()
 * writes to it; without .interrupt it blocks for good. */
struct live {
	unsigned n, next;
	int pipe[2];
	atomic_bool blocked;
	atomic_uint interrupts;
	bool closed;
};

static int live_next(void *ctx, struct gpud_buf *item, struct gpud_error *err)
{
	(void)err;
	struct live *l = ctx;
	if (l->next < l->n) {
		item->size = (size_t)snprintf(item->data, item->capacity, "item-%u", l->next++);
		return 1;
	}
	atomic_store(&l->blocked, true);
	char c;
	while (read(l->pipe[0], &c, 1) < 0)
		;
	return 0;
}

static void live_interrupt(void *ctx)
{
	struct live *l = ctx;
	atomic_fetch_add(&l->interrupts, 1);
	cr_assert_eq(write(l->pipe[1], "x", 1), 1);
}

static void live_close(void *ctx)
{
	((struct live *)ctx)->closed = true;
}

/* A tally that also counts the calls made on another thread than the run's. */
struct placed {
	struct tally t;
	pthread_t caller;
	atomic_uint elsewhere;
};

static int placed_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	struct placed *p = ctx;
	if (!pthread_equal(pthread_self(), p->caller))
		atomic_fetch_add(&p->elsewhere, 1);
	return tally_event(&p->t, ev, err);
}

static int placed_close(void *ctx, const struct gpud_stats *stats, struct gpud_error *err)
{
	struct placed *p = ctx;
	if (!pthread_equal(pthread_self(), p->caller))
		atomic_fetch_add(&p->elsewhere, 1);
	return tally_close(&p->t, stats, err);
}

static const struct gpud_sink_ops placed_ops = {
	.size = sizeof placed_ops,
	.event = placed_event,
	.close = placed_close,
	.events = tally_events,
	.flags = GPUD_SINK_CALLING_THREAD,
};

struct live_stopper {
	gpud_job *job;
	struct live *l;
	const char *ran; /* the probe's PROBE_COUNT_FILE: a line a task done */
};

/* Lines in the file at path so far (0 before it exists). */
static unsigned lines_in(const char *path)
{
	unsigned n = 0;
	FILE *f = fopen(path, "r");
	for (int c; f && (c = getc(f)) != EOF;)
		n += c == '\n';
	if (f)
		fclose(f);
	return n;
}

/* Stops the run once the generator has blocked and the workers have finished what it
 * gave (their results come while it blocks): waited for, not timed. */
static void *stop_once_blocked(void *arg)
{
	struct live_stopper *s = arg;
	while (!atomic_load(&s->l->blocked) || lines_in(s->ran) < s->l->n)
		usleep(1000);
	gpud_job_stop(s->job);
	return NULL;
}

/* The probe workers started from now on append each task's id to dir/ran (through
 * their environment: PROBE_COUNT_FILE); its path. */
static const char *count_into(const char *dir)
{
	static char path[4200];
	snprintf(path, sizeof path, "%s/ran", dir);
	cr_assert_eq(setenv("PROBE_COUNT_FILE", path, 1), 0);
	return path;
}

static gpud_job *live_job(const char *dir, struct live *l, struct placed *p, bool interrupt)
{
	struct gpud_generator_ops g = {.size = sizeof g,
				       .next = live_next,
				       .close = live_close,
				       .interrupt = interrupt ? live_interrupt : NULL};
	gpud_job *job = keys_job(dir, 0, true);
	cr_assert_eq(pipe(l->pipe), 0);
	cr_assert_eq(gpud_job_set_generator(job, &g, l), 0);
	cr_assert_eq(gpud_job_set_sink(job, &placed_ops, p), 0);
	p->caller = pthread_self();
	return job;
}

/* The results that come while the generator blocks wait for the calling thread; a stop
 * meanwhile interrupts the generator, and the run ends there: every result reached the
 * sink, on the calling thread, before the journal recorded it, and the run returns. */
Test(api, a_calling_thread_sink_gets_every_result_when_a_blocked_generator_is_interrupted)
{
	const char *dir = t_tmpdir();
	static struct live l = {.n = 100};
	static struct placed p = {.t = {.fail_at = -1}};
	gpud_job *job = live_job(dir, &l, &p, true);
	struct live_stopper st = {job, &l, count_into(dir)};
	pthread_t th;
	cr_assert_eq(pthread_create(&th, NULL, stop_once_blocked, &st), 0);
	struct gpud_run_options o = {.size = sizeof o};
	int rc = gpud_job_run(job, &o);
	pthread_join(th, NULL);
	cr_assert_eq(rc, 4, "stopped with a journal: %d (%s)", rc, gpud_job_error(job));
	cr_expect_eq(atomic_load(&l.interrupts), 1);
	cr_expect(l.closed && p.t.closed, "the generator and the sink closed on return");
	cr_expect_eq(atomic_load(&p.elsewhere), 0, "sink calls on another thread");
	for (unsigned i = 0; i < 100; i++)
		cr_expect_eq(p.t.ok[i], 1, "task %u delivered %u times", i, p.t.ok[i]);
	cr_expect_eq(gpud_job_stats(job)->ok, 100);
	gpud_job_free(job);

	/* Every one of them is journaled: a resume runs none again. */
	struct feed f = {.n = 100, .fail_at = -1};
	job = keys_job(dir, 0, true);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &journaled_ops, &p.t), 0);
	o.flags = GPUD_RUN_RESUME;
	rc = gpud_job_run(job, &o);
	cr_assert_eq(rc, 0, "resumed: %d (%s)", rc, gpud_job_error(job));
	for (unsigned i = 0; i < 100; i++)
		cr_expect_eq(p.t.ok[i], 1, "task %u delivered %u times", i, p.t.ok[i]);
	gpud_job_free(job);
}

/* Without an interrupt entry the run ends on the stand-in, and the process with it
 * (gpud.h): what waited for the calling thread never reached the sink and is not
 * journaled, so the resume delivers every task. */
Test(api, results_a_calling_thread_sink_never_got_are_not_journaled)
{
	const char *dir = t_tmpdir();
	/* Made here: the child must not assert (Criterion's reports are the parent's). */
	static struct live l = {.n = 100};
	/* What the child's sink got, seen here after it ended. */
	struct placed *p =
		mmap(NULL, sizeof *p, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	p->t.fail_at = -1;
	gpud_job *job = live_job(dir, &l, p, false);
	const char *ran = count_into(dir);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		p->caller = pthread_self();
		struct live_stopper stopper = {job, &l, ran};
		pthread_t th;
		if (pthread_create(&th, NULL, stop_once_blocked, &stopper) != 0)
			_exit(100);
		struct gpud_run_options o = {.size = sizeof o};
		gpud_job_run(job, &o);
		_exit(101); /* not reached: the stand-in ends the process */
	}
	gpud_job_free(job);
	int st;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 4, "the stopped run's process: %#x", st);
	static struct tally t = {.fail_at = -1};
	struct feed f = {.n = 100, .fail_at = -1};
	job = keys_job(dir, 0, true);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &journaled_ops, &t), 0);
	struct gpud_run_options o = {.size = sizeof o, .flags = GPUD_RUN_RESUME};
	int rc = gpud_job_run(job, &o);
	cr_assert_eq(rc, 0, "resumed: %d (%s)", rc, gpud_job_error(job));
	unsigned before = atomic_load(&p->t.events);
	cr_expect_lt(before, 100, "results waited for the blocked calling thread");
	cr_expect_eq(atomic_load(&p->elsewhere), 0, "sink calls on another thread");
	for (unsigned i = 0; i < 100; i++)
		cr_expect_eq(p->t.ok[i] + t.ok[i], 1, "task %u delivered %u + %u times", i,
			     p->t.ok[i], t.ok[i]);
	cr_expect_eq(gpud_job_stats(job)->ok, 100 - before);
	gpud_job_free(job);
	munmap(p, sizeof *p);
}

/* A tally that also counts the events that carried their task's input. */
struct inputs {
	struct tally t;
	atomic_uint with_input, right_input;
};

static int inputs_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	struct inputs *s = ctx;
	if (ev->input || ev->input_size) {
		atomic_fetch_add(&s->with_input, 1);
		char want[32];
		int n = snprintf(want, sizeof want, "item-%llu", (unsigned long long)ev->task_id);
		if (ev->input && ev->input_size == (size_t)n && !memcmp(ev->input, want, (size_t)n))
			atomic_fetch_add(&s->right_input, 1);
	}
	return tally_event(&s->t, ev, err);
}

/* GPUD_SINK_NO_INPUT: no event carries its input, also those held for ordered delivery
 * (ordered = true, two workers: outcomes come out of order and wait); without it, every
 * event carries its own task's input. Every result reaches the sink once either way. */
Test(api, a_sink_without_inputs_gets_none_and_every_result)
{
	for (int flag = 0; flag < 2; flag++) {
		struct feed f = {.n = 300, .fail_at = -1};
		static struct inputs s;
		memset(&s, 0, sizeof s);
		s.t.fail_at = -1;
		struct gpud_sink_ops ops = {.size = sizeof ops,
					    .event = inputs_event,
					    .close = tally_close,
					    .events = tally_events,
					    .flags = GPUD_SINK_CALLING_THREAD |
						     (flag ? GPUD_SINK_NO_INPUT : 0)};
		gpud_job *job = keys_job(t_tmpdir(), 200, false);
		cr_assert_eq(gpud_job_set(job, "job.ordered", "true"), 0, "%s",
			     gpud_job_error(job));
		cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
		cr_assert_eq(gpud_job_set_sink(job, &ops, &s), 0);
		struct gpud_run_options o = {.size = sizeof o};
		int rc = gpud_job_run(job, &o);
		cr_assert_eq(rc, 0, "run: %d (%s)", rc, gpud_job_error(job));
		for (unsigned i = 0; i < 300; i++)
			cr_expect_eq(s.t.ok[i], 1, "task %u delivered %u times", i, s.t.ok[i]);
		cr_expect_eq(s.t.bad, 0);
		if (flag)
			cr_expect_eq(atomic_load(&s.with_input), 0, "%u events carried an input",
				     atomic_load(&s.with_input));
		else
			cr_expect_eq(atomic_load(&s.right_input), 300, "%u of 300 with their input",
				     atomic_load(&s.right_input));
		gpud_job_free(job);
	}
}

/* What the log callback was handed: every line, with its level, in one buffer. */
struct captured {
	pthread_mutex_t lock;
	char text[65536];
	size_t used;
	unsigned lines[3], bad_level;
};

static void capture_log(void *data, int level, const char *message)
{
	struct captured *c = data;
	pthread_mutex_lock(&c->lock);
	if (level < GPUD_LOG_ERROR || level > GPUD_LOG_INFO)
		c->bad_level++;
	else
		c->lines[level]++;
	int n = snprintf(c->text + c->used, sizeof c->text - c->used, "%d %s\n", level, message);
	if (n > 0 && (size_t)n < sizeof c->text - c->used)
		c->used += (size_t)n;
	pthread_mutex_unlock(&c->lock);
}

/* Runs fn with standard error (fd 2) sent to a file; returns how many bytes reached it. */
static long with_stderr_captured(void (*fn)(void *), void *arg)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/stderr.txt", t_tmpdir());
	fflush(stderr);
	int saved = dup(2);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (saved < 0 || fd < 0)
		return -1;
	dup2(fd, 2);
	close(fd);
	fn(arg);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	struct stat st;
	if (stat(path, &st) < 0)
		return -1;
	if (st.st_size > 0) {
		/* Shown, so a failure says what leaked. */
		char buf[2048] = "";
		FILE *f = fopen(path, "r");
		if (f) {
			size_t got = fread(buf, 1, sizeof buf - 1, f);
			buf[got] = '\0';
			fclose(f);
		}
		fprintf(stderr, "on standard error:\n%s\n", buf);
	}
	return (long)st.st_size;
}

struct logged_runs {
	struct captured cap;
	int rc_setup, rc_bad_key, rc_check;
	unsigned ok;
	char err_bad_key[4096];
};

static void logged_runs(void *arg)
{
	struct logged_runs *r = arg;
	char faulty[4096];
	snprintf(faulty, sizeof faulty, "%s/worker-faulty.so", t_env("FIXTURES"));
	struct gpud_run_options o = {
		.size = sizeof o, .ui = GPUD_UI_PLAIN, .log = capture_log, .log_data = &r->cap};
	/* A setup that fails on GPU 0 (the run goes on with GPU 1) and tasks that fail. GPU
	 * 1's 20 tasks take 2 s, so that GPU 0's failed setup is seen before the run ends
	 * however late its process starts (at once, GPU 1 could finish first: seen under
	 * the sanitizers on a loaded machine, the setup's message then never came). */
	struct gpud_sink_ops sink = {.size = sizeof sink, .event = count_event};
	gpud_job *job = gpud_job_new();
	gpud_job_set(job, "job.gpus", "0,1");
	gpud_job_set(job, "worker.plugin", faulty);
	gpud_job_set(job, "worker.setup_fail_gpu", "0");
	gpud_job_set(job, "worker.fail_on", "3,5");
	gpud_job_set(job, "worker.sleep_us", "100000");
	gpud_job_set(job, "generator.plugin", "range");
	gpud_job_set(job, "generator.stop", "20");
	gpud_job_set_sink(job, &sink, &r->ok);
	r->rc_setup = gpud_job_run(job, &o);
	gpud_job_free(job);
	/* A key the worker plugin does not know: refused before anything runs. */
	job = gpud_job_new();
	gpud_job_set(job, "job.gpus", "0");
	gpud_job_set(job, "worker.plugin", faulty);
	gpud_job_set(job, "generator.no_such_key", "1");
	gpud_job_set(job, "generator.plugin", "range");
	gpud_job_set(job, "generator.stop", "5");
	r->rc_check = gpud_job_check(job, &o);
	r->rc_bad_key = gpud_job_run(job, &o);
	snprintf(r->err_bad_key, sizeof r->err_bad_key, "%s", gpud_job_error(job));
	gpud_job_free(job);
}

/* Every message through the callback, nothing on standard error: a failed setup, task
 * failures (plain mode), the summary, a bad key found by check and by run. */
Test(api, log_callback_takes_every_message, .timeout = 120)
{
	static struct logged_runs r = {.cap = {.lock = PTHREAD_MUTEX_INITIALIZER}};
	long leaked = with_stderr_captured(logged_runs, &r);
	cr_expect_eq(leaked, 0, "%ld bytes reached standard error", leaked);
	cr_expect_eq(r.rc_setup, 1, "status %d (tasks 3 and 5 fail)", r.rc_setup);
	cr_expect_eq(r.ok, 18);
	cr_expect_eq(r.rc_check, 2);
	cr_expect_eq(r.rc_bad_key, 2);
	cr_expect_eq(r.cap.bad_level, 0);
	const char *t = r.cap.text;
	cr_expect(strstr(t, "no_such_key"), "the bad key: %s", t);
	cr_expect(strstr(r.err_bad_key, "no_such_key"), "%s", r.err_bad_key);
	cr_expect(strstr(t, "setup"), "the failed setup: %s", t);
	cr_expect_geq(r.cap.lines[GPUD_LOG_ERROR], 2, "%s", t);
	cr_expect_geq(r.cap.lines[GPUD_LOG_INFO], 1, "the summary: %s", t);
	cr_expect(!strstr(t, "gpud: "), "no prefix: %s", t);
}

/* A sink with the plugin sink's 1.3 and 1.6 calls: tasks, resumed, finish. */
struct ending {
	unsigned events, closes, finishes, resumeds, tasks_calls;
	int64_t total;
	int exit_status;
	bool aborted;
	uint64_t done_count, failed_id;
	size_t n_failed;
};

static int ending_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	(void)err;
	if (ev->kind == GPUD_TASK_OK || ev->kind == GPUD_TASK_ERROR)
		((struct ending *)ctx)->events++;
	return 0;
}

static int ending_close(void *ctx, const struct gpud_stats *stats, struct gpud_error *err)
{
	(void)stats;
	(void)err;
	((struct ending *)ctx)->closes++;
	return 0;
}

static int ending_finish(void *ctx, const struct gpud_stats *stats, const struct gpud_run_end *end,
			 struct gpud_error *err)
{
	(void)stats;
	(void)err;
	struct ending *e = ctx;
	e->finishes++;
	e->exit_status = end->exit_status;
	e->aborted = end->abort_reason != NULL;
	return 0;
}

static int ending_resumed(void *ctx, const struct gpud_resume_info *info, struct gpud_error *err)
{
	(void)err;
	struct ending *e = ctx;
	e->resumeds++;
	for (size_t k = 0; k < info->n_done; k++)
		e->done_count += info->done[2 * k + 1];
	e->n_failed = info->n_failed;
	if (info->n_failed)
		e->failed_id = info->failed[0];
	return 0;
}

static int ending_tasks(void *ctx, int64_t total, struct gpud_error *err)
{
	(void)err;
	struct ending *e = ctx;
	e->tasks_calls++;
	e->total = total;
	return 0;
}

static const struct gpud_sink_ops ending_ops = {
	.size = sizeof ending_ops,
	.event = ending_event,
	.close = ending_close,
	.finish = ending_finish,
	.resumed = ending_resumed,
	.tasks = ending_tasks,
};

static int ending_run(const char *dir, unsigned flags, struct ending *e)
{
	char faulty[4096], j[4096];
	snprintf(faulty, sizeof faulty, "%s/worker-faulty.so", t_env("FIXTURES"));
	snprintf(j, sizeof j, "job.journal=%s/end.journal", dir);
	gpud_job *job = gpud_job_new();
	cr_assert_eq(gpud_job_set(job, "job.gpus", "0"), 0);
	cr_assert_eq(gpud_job_set(job, "worker.plugin", faulty), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set(job, "worker.fail_on", "3"), 0);
	cr_assert_eq(gpud_job_set(job, "generator.plugin", "range"), 0);
	cr_assert_eq(gpud_job_set(job, "generator.stop", "10"), 0);
	cr_assert_eq(gpud_job_set(job, j, NULL), 0, "%s", gpud_job_error(job));
	cr_assert_eq(gpud_job_set_sink(job, &ending_ops, e), 0, "%s", gpud_job_error(job));
	struct gpud_run_options o = {.size = sizeof o, .flags = flags};
	int rc = gpud_job_run(job, &o);
	gpud_job_free(job);
	return rc;
}

/* finish takes close's place and says how the run ended; tasks says how many; a resume
 * hands resumed what earlier runs finished, before any event. */
Test(api, sink_finish_resumed_and_tasks, .timeout = 120)
{
	const char *dir = t_tmpdir();
	struct ending first = {.total = -2};
	int rc = ending_run(dir, 0, &first);
	cr_expect_eq(rc, 1, "task 3 fails");
	cr_expect_eq(first.finishes, 1);
	cr_expect_eq(first.closes, 0, "finish is called instead of close");
	cr_expect_eq(first.exit_status, 1);
	cr_expect(!first.aborted);
	cr_expect_eq(first.tasks_calls, 1);
	cr_expect_eq(first.total, 10);
	cr_expect_eq(first.resumeds, 0, "not on a fresh run");
	cr_expect_eq(first.events, 10);

	struct ending again = {.total = -2};
	rc = ending_run(dir, GPUD_RUN_RESUME | GPUD_RUN_RETRY_FAILED, &again);
	cr_expect_eq(rc, 1, "task 3 fails again");
	cr_expect_eq(again.resumeds, 1);
	cr_expect_eq(again.done_count, 9, "all but the failed task are kept");
	cr_expect_eq(again.n_failed, 0, "--retry-failed: the failed one runs");
	cr_expect_eq(again.events, 1, "only task 3 runs again");
	cr_expect_eq(again.tasks_calls, 1);
	cr_expect_eq(again.finishes, 1);
	cr_expect_eq(again.closes, 0);
	cr_expect_eq(again.exit_status, rc);
}

/* gpud_job_check keeps what it found for the caller, and prints nothing itself. */
struct checked {
	struct captured cap;
	int rc_ok, rc_bad, run_misuse;
	char text[8192], error[4096];
	int ok_ok, bad_ok;
	size_t n_gpus;
	unsigned workers_per_gpu, ranks;
	bool before_null;
};

static void checked_jobs(void *arg)
{
	struct checked *k = arg;
	char faulty[4096];
	snprintf(faulty, sizeof faulty, "%s/worker-faulty.so", t_env("FIXTURES"));
	struct gpud_run_options o = {.size = sizeof o, .log = capture_log, .log_data = &k->cap};
	gpud_job *job = gpud_job_new();
	k->before_null = gpud_job_check_report(job) == NULL;
	gpud_job_set(job, "job.gpus", "0,1");
	gpud_job_set(job, "job.workers_per_gpu", "2");
	gpud_job_set(job, "worker.plugin", faulty);
	gpud_job_set(job, "generator.plugin", "range");
	gpud_job_set(job, "generator.stop", "5");
	k->rc_ok = gpud_job_check(job, &o);
	const struct gpud_check_report *r = gpud_job_check_report(job);
	if (r) {
		k->ok_ok = r->ok;
		snprintf(k->text, sizeof k->text, "%s", r->text);
		k->n_gpus = r->n_gpus;
		k->workers_per_gpu = r->workers_per_gpu;
		k->ranks = r->ranks;
	}
	gpud_job_set(job, "generator.no_such_key", "1");
	k->rc_bad = gpud_job_check(job, &o);
	r = gpud_job_check_report(job);
	if (r) {
		k->bad_ok = r->ok;
		snprintf(k->error, sizeof k->error, "%s", r->error);
	}
	gpud_job_free(job);
	k->run_misuse = gpud_job_run(NULL, NULL);
}

Test(api, check_report_is_data, .timeout = 60)
{
	static struct checked k = {
		.cap = {.lock = PTHREAD_MUTEX_INITIALIZER}, .ok_ok = -1, .bad_ok = -1};
	/* Standard output too: the report is the caller's to print. */
	char path[4096];
	snprintf(path, sizeof path, "%s/stdout.txt", t_tmpdir());
	fflush(stdout);
	int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert(saved >= 0 && fd >= 0);
	dup2(fd, 1);
	close(fd);
	long leaked = with_stderr_captured(checked_jobs, &k);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_size, 0, "gpud_job_check printed %lld bytes", (long long)st.st_size);
	cr_expect_eq(leaked, 0);
	cr_expect(k.before_null);
	cr_expect_eq(k.rc_ok, GPUD_EXIT_OK);
	cr_expect_eq(k.ok_ok, 1);
	cr_expect(strstr(k.text, "OK: 2 GPUs x 2 workers"), "%s", k.text);
	cr_expect(strstr(k.text, "shared memory"), "%s", k.text);
	cr_expect_eq(k.n_gpus, 2);
	cr_expect_eq(k.workers_per_gpu, 2);
	cr_expect_eq(k.ranks, 1);
	cr_expect_eq(k.rc_bad, GPUD_EXIT_REFUSED);
	cr_expect_eq(k.bad_ok, 0);
	cr_expect(strstr(k.error, "unknown key 'no_such_key'"), "%s", k.error);
	cr_expect(strstr(k.cap.text, "unknown key 'no_such_key'"), "%s", k.cap.text);
	cr_expect_eq(k.run_misuse, GPUD_MISUSE);
}

/* gpud_job_status keeps what the journal says for the caller, and prints nothing. */
Test(api, status_report_is_data, .timeout = 60)
{
	const char *dir = t_tmpdir();
	struct ending e = {.total = -2};
	cr_assert_eq(ending_run(dir, 0, &e), 1);
	char faulty[4096], j[4096], path[4096];
	snprintf(faulty, sizeof faulty, "%s/worker-faulty.so", t_env("FIXTURES"));
	snprintf(j, sizeof j, "job.journal=%s/end.journal", dir);
	gpud_job *job = gpud_job_new();
	cr_expect_null(gpud_job_status_report(job));
	cr_assert_eq(gpud_job_set(job, "job.gpus", "0"), 0);
	cr_assert_eq(gpud_job_set(job, "worker.plugin", faulty), 0);
	cr_assert_eq(gpud_job_set(job, "worker.fail_on", "3"), 0);
	cr_assert_eq(gpud_job_set(job, "generator.plugin", "range"), 0);
	cr_assert_eq(gpud_job_set(job, "generator.stop", "10"), 0);
	cr_assert_eq(gpud_job_set(job, j, NULL), 0);
	cr_assert_eq(gpud_job_set_sink(job, &ending_ops, &e), 0, "the same job: its sink too");
	snprintf(path, sizeof path, "%s/status-out.txt", dir);
	fflush(stdout);
	int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert(saved >= 0 && fd >= 0);
	dup2(fd, 1);
	close(fd);
	int rc = gpud_job_status(job, NULL);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_size, 0, "gpud_job_status printed %lld bytes", (long long)st.st_size);
	cr_expect_eq(rc, GPUD_EXIT_OK, "%s", gpud_job_error(job));
	const struct gpud_status_report *r = gpud_job_status_report(job);
	cr_assert_not_null(r);
	cr_expect_eq(r->ok, 1);
	cr_expect_eq(r->journal, 1);
	cr_expect_eq(r->done, 10);
	cr_expect_eq(r->failed, 1);
	cr_expect_eq(r->low, 10);
	cr_expect_eq(r->finished, 1);
	cr_expect_eq(r->changed, 0, "%s", r->text);
	cr_expect(strstr(r->text, "tasks with an outcome: 10 (1 of them failed)"), "%s", r->text);
	/* Without a journal: refused, the reason in the report. */
	cr_assert_eq(gpud_job_set(job, "job.journal", "off"), 0, "%s", gpud_job_error(job));
	cr_expect_eq(gpud_job_status(job, NULL), GPUD_EXIT_REFUSED);
	r = gpud_job_status_report(job);
	cr_assert_not_null(r);
	cr_expect_eq(r->ok, 0);
	cr_expect_str_empty(r->text);
	cr_expect(strstr(r->error, "journal is off"), "%s", r->error);
	gpud_job_free(job);
}

/* gpud_plugins_list, gpud_arrays_merge and gpud_stats_merge give data, print nothing,
 * and say every message through the log callback. */
struct lone_calls {
	struct captured cap;
	int rc_list, rc_run[2], rc_merge, rc_gap, rc_misuse, rc_stats, rc_twice, rc_one;
	struct gpud_stats_merged *stats, *twice, *one;
	struct gpud_plugin_list *list;
	char merged_error[4096], gap_error[4096], format[16];
	int merged_ok, gap_ok;
	size_t shards;
	uint64_t rows, failed;
	const char *dir;
};

static void lone_calls(void *arg)
{
	struct lone_calls *l = arg;
	struct gpud_run_options o = {.size = sizeof o, .log = capture_log, .log_data = &l->cap};
	l->rc_list = gpud_plugins_list(&o, &l->list);
	/* Two ranks' npy shards, task 70 (rank 1's) failing. */
	char rows[4096], path[4096];
	snprintf(rows, sizeof rows, "%s/worker-rows.so", t_env("FIXTURES"));
	for (int k = 0; k < 2; k++) {
		char rank[8];
		snprintf(rank, sizeof rank, "%d/2", k);
		snprintf(path, sizeof path, "%s/out-{rank}.npy", l->dir);
		char stats[4096];
		snprintf(stats, sizeof stats, "%s/s-{rank}.json", l->dir);
		struct gpud_run_options ro = o;
		ro.rank = rank;
		ro.stats_json = stats;
		gpud_job *job = gpud_job_new();
		gpud_job_set(job, "job.gpus", "0");
		gpud_job_set(job, "worker.plugin", rows);
		gpud_job_set(job, "worker.short_id", "70");
		gpud_job_set(job, "generator.plugin", "range");
		gpud_job_set(job, "generator.stop", "200");
		gpud_job_set(job, "sink.plugin", "npy");
		gpud_job_set(job, "sink.path", path);
		gpud_job_set(job, "sink.dtype", "float32");
		gpud_job_set(job, "sink.shape", "3");
		l->rc_run[k] = gpud_job_run(job, &ro);
		gpud_job_free(job);
	}
	char out[4096], gap[4096], s0[4096], s1[4096];
	snprintf(out, sizeof out, "%s/all.npy", l->dir);
	snprintf(gap, sizeof gap, "%s/gap.npy", l->dir);
	snprintf(s0, sizeof s0, "%s/out-0.npy", l->dir);
	snprintf(s1, sizeof s1, "%s/out-1.npy", l->dir);
	const char *const both[] = {s0, s1};
	struct gpud_arrays_merged *m = NULL;
	l->rc_merge = gpud_arrays_merge(out, both, 2, NULL, &o, &m);
	if (m) {
		l->merged_ok = m->ok;
		l->shards = m->shards;
		l->rows = m->rows;
		l->failed = m->failed;
		snprintf(l->format, sizeof l->format, "%s", m->format);
		snprintf(l->merged_error, sizeof l->merged_error, "%s", m->error);
	}
	gpud_arrays_merge_free(m);
	m = NULL;
	l->rc_gap = gpud_arrays_merge(gap, both, 1, NULL, &o, &m);
	if (m) {
		l->gap_ok = m->ok;
		snprintf(l->gap_error, sizeof l->gap_error, "%s", m->error);
	}
	gpud_arrays_merge_free(m);
	l->rc_misuse = gpud_arrays_merge(out, both, 2, NULL, &o, NULL);
	/* The ranks' stats: whole, a file twice, a rank missing. */
	snprintf(s0, sizeof s0, "%s/s-0.json", l->dir);
	snprintf(s1, sizeof s1, "%s/s-1.json", l->dir);
	const char *const stats[] = {s0, s1}, *const same[] = {s0, s0};
	l->rc_stats = gpud_stats_merge(stats, 2, &o, &l->stats);
	l->rc_twice = gpud_stats_merge(same, 2, &o, &l->twice);
	l->rc_one = gpud_stats_merge(stats, 1, &o, &l->one);
}

static const struct gpud_plugin_entry *entry(const struct gpud_plugin_list *list, const char *kind,
					     const char *name)
{
	for (size_t i = 0; i < list->n_plugins; i++)
		if (!strcmp(list->plugins[i].name, name) && !strcmp(list->plugins[i].kind, kind))
			return &list->plugins[i];
	return NULL;
}

Test(api, plugins_and_merged_arrays_are_data, .timeout = 120)
{
	static struct lone_calls l = {
		.cap = {.lock = PTHREAD_MUTEX_INITIALIZER}, .merged_ok = -1, .gap_ok = -1};
	l.dir = t_tmpdir();
	/* A folder of GPUD_PLUGIN_PATH with a file that is no plugin: listed as broken. */
	char plugdir[4096];
	snprintf(plugdir, sizeof plugdir, "%s/plugs", l.dir);
	cr_assert_eq(mkdir(plugdir, 0700), 0);
	t_write(plugdir, "worker-junk.so", "not an ELF file\n");
	setenv("GPUD_PLUGIN_PATH", plugdir, 1);
	char path[4096];
	snprintf(path, sizeof path, "%s/stdout.txt", l.dir);
	fflush(stdout);
	int saved = dup(1), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	cr_assert(saved >= 0 && fd >= 0);
	dup2(fd, 1);
	close(fd);
	long leaked = with_stderr_captured(lone_calls, &l);
	fflush(stdout);
	dup2(saved, 1);
	close(saved);
	struct stat st;
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_size, 0, "%lld bytes on standard output", (long long)st.st_size);
	cr_expect_eq(leaked, 0, "%ld bytes reached standard error", leaked);
	cr_expect_eq(l.cap.bad_level, 0);

	/* The list. */
	cr_expect_eq(l.rc_list, GPUD_EXIT_OK);
	const struct gpud_plugin_list *list = l.list;
	cr_assert_not_null(list);
	cr_expect_eq(list->ok, 1, "%s", list->error);
	cr_expect_eq(list->size, sizeof *list);
	cr_expect(strstr(list->text, "KIND"), "%s", list->text);
	cr_expect_geq(list->n_dirs, 2);
	cr_expect_str_eq(list->dirs[0].path, plugdir);
	cr_expect_str_eq(list->dirs[0].origin, "GPUD_PLUGIN_PATH");
	cr_expect_eq(list->dirs[0].count, 1);
	const struct gpud_plugin_entry *junk = entry(list, "?", "junk");
	cr_assert_not_null(junk, "%s", list->text);
	cr_expect_eq(junk->broken, 1);
	cr_expect_neq(junk->error[0], '\0');
	cr_expect(strstr(list->text, "BROKEN"), "%s", list->text);
	const struct gpud_plugin_entry *range = entry(list, "generator", "range");
	cr_assert_not_null(range, "%s", list->text);
	cr_expect_eq(range->broken, 0);
	cr_expect_str_eq(range->origin, "built-in");
	cr_expect_str_eq(range->file, "generator-range.so");
	cr_expect_neq(range->description[0], '\0');
	cr_expect(strstr(list->text, range->description), "%s", list->text);
	const struct gpud_plugin_entry *npy = entry(list, "sink", "npy");
	cr_expect_not_null(npy, "%s", list->text);
	gpud_plugins_free(l.list);

	/* The merge: figures, and its summary through the callback. */
	cr_expect_eq(l.rc_run[0], 0);
	cr_expect_eq(l.rc_run[1], 1, "task 70 fails");
	cr_expect_eq(l.rc_merge, GPUD_EXIT_FAILED, "%s", l.cap.text);
	cr_expect_eq(l.merged_ok, 1);
	cr_expect_str_empty(l.merged_error);
	cr_expect_str_eq(l.format, "npy");
	cr_expect_eq(l.shards, 2);
	cr_expect_eq(l.rows, 200);
	cr_expect_eq(l.failed, 1);
	cr_expect(strstr(l.cap.text, "2 gpud merge-arrays: "), "the summary at INFO: %s",
		  l.cap.text);
	cr_expect(strstr(l.cap.text, "200 rows from 2 shards"), "%s", l.cap.text);
	/* A refused merge: the reason as data and as an error line. */
	cr_expect_eq(l.rc_gap, GPUD_EXIT_REFUSED);
	cr_expect_eq(l.gap_ok, 0);
	cr_expect(strstr(l.gap_error, "task 64 is in none of"), "%s", l.gap_error);
	cr_expect(strstr(l.cap.text, "0 gpud merge-arrays: task 64 is in none of"), "%s",
		  l.cap.text);
	cr_expect(access(l.dir, F_OK) == 0);
	char gap[4096];
	snprintf(gap, sizeof gap, "%s/gap.npy", l.dir);
	cr_expect_neq(access(gap, F_OK), 0, "a refused merge writes nothing");
	cr_expect_eq(l.rc_misuse, GPUD_MISUSE);

	/* The stats merged: the figures and the JSON `gpud merge` prints. */
	cr_expect_eq(l.rc_stats, GPUD_EXIT_OK);
	const struct gpud_stats_merged *m = l.stats;
	cr_assert_not_null(m);
	cr_expect_eq(m->ok, 1, "%s", m->error);
	cr_expect_eq(m->files, 2);
	cr_expect_eq(m->missing_ranks, 0);
	cr_expect_eq(m->generated, 200);
	cr_expect_eq(m->succeeded, 199);
	cr_expect_eq(m->failed, 1);
	cr_expect_eq(m->not_run, 0);
	cr_expect_eq(m->exit_status, 1, "the worst rank's");
	cr_expect(strstr(m->json, "{\"ranks\": 2, \"generated\": 200, \"ok\": 199"), "%s", m->json);
	cr_expect(strstr(l.cap.text, "2 2 ranks: 200 tasks: 199 ok, 1 failed"), "%s", l.cap.text);
	gpud_stats_merge_free(l.stats);
	cr_expect_eq(l.rc_twice, GPUD_EXIT_REFUSED);
	cr_assert_not_null(l.twice);
	cr_expect_eq(l.twice->ok, 0);
	cr_expect_str_empty(l.twice->json);
	cr_expect(strstr(l.twice->error, "are the same file"), "%s", l.twice->error);
	cr_expect(strstr(l.cap.text, "0 merge: "), "%s", l.cap.text);
	gpud_stats_merge_free(l.twice);
	cr_expect_eq(l.rc_one, GPUD_EXIT_REFUSED, "a rank without its file");
	cr_assert_not_null(l.one);
	cr_expect_eq(l.one->ok, 1, "the summary of those given is still made");
	cr_expect_eq(l.one->missing_ranks, 1);
	cr_expect(strstr(l.one->json, "\"missing_ranks\": [1]"), "%s", l.one->json);
	gpud_stats_merge_free(l.one);
}

/* A pool's sink: each task's ok count, and the pids of the workers that ran them. */
struct pooled {
	struct tally t;
	int pids[8];
	unsigned n_pids;
	double setup_s; /* the workers' time in setup, from the stats */
};

static int pooled_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	struct pooled *p = ctx;
	if (ev->kind == GPUD_TASK_OK) {
		char text[512];
		size_t len = ev->result_size < sizeof text - 1 ? ev->result_size : sizeof text - 1;
		memcpy(text, ev->result, len);
		text[len] = '\0'; /* the result's bytes alone */
		const char *at = strstr(text, "pid=");
		int pid = at ? atoi(at + 4) : -1;
		bool seen = false;
		for (unsigned i = 0; i < p->n_pids; i++)
			seen |= p->pids[i] == pid;
		if (!seen && p->n_pids < 8)
			p->pids[p->n_pids++] = pid;
	}
	return tally_event(&p->t, ev, err);
}

static int pooled_close(void *ctx, const struct gpud_stats *stats, struct gpud_error *err)
{
	return tally_close(&((struct pooled *)ctx)->t, stats, err);
}

static const struct gpud_sink_ops pooled_ops = {
	.size = sizeof pooled_ops,
	.event = pooled_event,
	.close = pooled_close,
	.events = tally_events,
};

/* One run of n tasks on the pool, every one delivered once with its right result. */
static void pool_run_exact(gpud_pool *pool, unsigned n, struct pooled *p)
{
	struct feed f = {.n = n, .fail_at = -1};
	memset(p, 0, sizeof *p);
	p->t.fail_at = -1;
	gpud_job *job = keys_job(t_tmpdir(), 0, false);
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &pooled_ops, p), 0);
	struct gpud_run_options o = {.size = sizeof o, .ui = GPUD_UI_OFF};
	int rc = gpud_pool_run(pool, job, &o);
	cr_assert_eq(rc, 0, "status %d: %s", rc, gpud_job_error(job));
	for (unsigned i = 0; i < n; i++)
		cr_expect_eq(p->t.ok[i], 1, "task %u delivered %u times", i, p->t.ok[i]);
	cr_expect_eq(p->t.bad, 0);
	cr_expect(f.closed && p->t.closed, "this run's generator and sink closed");
	cr_expect_eq(p->t.closed_with.ok, n, "this run's stats: %llu ok",
		     (unsigned long long)p->t.closed_with.ok);
	cr_expect_eq(gpud_job_stats(job)->generated, n);
	/* Its workers' figures are this run's: their calls add up to its tasks. */
	const char *json = gpud_job_stats_json(job);
	double calls = 0;
	p->setup_s = 0;
	for (const char *at = json; (at = strstr(at, "\"calls\": ")); at++)
		calls += atof(at + 9);
	for (const char *at = json; (at = strstr(at, "\"time_setup\": ")); at++)
		p->setup_s += atof(at + 14);
	cr_expect_eq(calls, n, "the workers' calls add up to %g, not %u: %s", calls, n, json);
	gpud_job_free(job);
}

static bool pid_in(const struct pooled *p, int pid)
{
	for (unsigned i = 0; i < p->n_pids; i++)
		if (p->pids[i] == pid)
			return true;
	return false;
}

Test(api, a_pool_runs_two_inputs_on_the_same_workers, .timeout = 120)
{
	gpud_pool *pool = gpud_pool_open();
	cr_assert_not_null(pool);
	static struct pooled a, b, c, more;
	pool_run_exact(pool, 300, &a);
	/* On a loaded machine one worker can run a whole input while the other still sets
	 * up (it hands its first batch back): more inputs, each exact, until both ran one
	 * (their pids gathered in a), so that both are set up before the run timed below. */
	for (int k = 0; k < 10 && a.n_pids < 2; k++) {
		pool_run_exact(pool, 300, &more);
		for (unsigned i = 0; i < more.n_pids; i++) {
			bool seen = false;
			for (unsigned j = 0; j < a.n_pids; j++)
				seen |= a.pids[j] == more.pids[i];
			if (!seen && a.n_pids < 8)
				a.pids[a.n_pids++] = more.pids[i];
		}
	}
	cr_assert_eq(a.n_pids, 2, "two workers ran the first inputs (%u)", a.n_pids);
	pool_run_exact(pool, 200, &b);
	/* The same processes: nothing started, nothing set up again. */
	cr_expect_eq(b.setup_s, 0, "%g s in setup in the second run", b.setup_s);
	for (unsigned i = 0; i < b.n_pids; i++)
		cr_expect(pid_in(&a, b.pids[i]), "worker pid %d of the second run is new",
			  b.pids[i]);

	/* A worker that dies between runs is started again at the next one's start. */
	int dead = a.pids[0];
	cr_assert_eq(kill(dead, SIGKILL), 0);
	pool_run_exact(pool, 250, &c);
	cr_expect(!pid_in(&c, dead), "the dead worker ran tasks");
	/* The other one is the same process; at most one new one (the dead one's). */
	unsigned fresh = 0;
	for (unsigned i = 0; i < c.n_pids; i++)
		fresh += !pid_in(&a, c.pids[i]);
	cr_expect_leq(fresh, 1, "%u new workers", fresh);
	cr_expect_eq(kill(a.pids[1], 0), 0, "the live worker was ended");

	/* Keys the workers were started with are the pool's. */
	gpud_job *job = keys_job(t_tmpdir(), 5, false);
	struct feed f = {.n = 10, .fail_at = -1};
	static struct pooled d;
	d.t.fail_at = -1;
	cr_assert_eq(gpud_job_set_generator(job, &feed_ops, &f), 0);
	cr_assert_eq(gpud_job_set_sink(job, &pooled_ops, &d), 0);
	struct gpud_run_options o = {.size = sizeof o, .ui = GPUD_UI_OFF};
	cr_expect_eq(gpud_pool_run(pool, job, &o), 2);
	cr_expect(strstr(gpud_job_error(job), "worker.sleep_us=5 (the pool's: worker.sleep_us=0)"),
		  "%s", gpud_job_error(job));
	gpud_job_free(job);

	/* Closed: its workers cleaned up and gone. */
	gpud_pool_close(pool);
	for (unsigned i = 0; i < c.n_pids; i++)
		cr_expect(kill(c.pids[i], 0) < 0, "worker %d still alive after the close",
			  c.pids[i]);
}
