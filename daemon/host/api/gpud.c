/* SPDX-License-Identifier: MIT */
/* libgpud's API (gpud/gpud.h): a job's keys and callbacks gathered, then one run of it
 * through run_job, as `gpud run` did from its main. */
#define _GNU_SOURCE
#include <gpud/gpud.h>

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/arrays.h"
#include "cluster/merge.h"
#include "util/log.h"
#include "cluster/ranks.h"
#include "job/catalog.h"
#include "job/checks.h"
#include "job/config.h"
#include "loader.h"
#include "record/outputs.h"
#include "record/resume.h"
#include "record/runlock.h"
#include "run/run.h"
#include "util/say.h"
#include "workers/capacity.h"
#include "workers/lifecycle.h"

#ifndef GPUD_VERSION
#define GPUD_VERSION "0.0.0"
#endif

/* The longest key and value gpud_job_set takes: a key is SECTION.KEY, a value fits on
 * a job file's line. */
#define GPUD_SET_KEY_MAX 256
#define GPUD_SET_VALUE_MAX (1 << 20)

/* What c->generator.plugin / c->sink.plugin say for callbacks: messages name them so. */
#define CALLBACKS "(callbacks)"

enum job_state { JOB_NEW, JOB_RUNNING, JOB_DONE };

struct gpud_job {
	char *path;  /* the job file, or NULL */
	char **sets; /* "SECTION.KEY=VALUE", in order */
	size_t n_sets, cap_sets;
	bool gen_cb, sink_cb;
	struct gpud_generator_ops gen;
	void *gen_ctx;
	struct gpud_sink_ops sink;
	void *sink_ctx;
	/* The tables the host calls, filled from gen and sink (run.h). */
	struct gen_ops gen_table;
	struct sink_ops sink_table;
	_Atomic int state;
	_Atomic unsigned stops; /* gpud_job_stop before the run began */
	struct run_result result;
	char err[4096];
	/* The last gpud_job_check's report; check_text is the report's text. */
	bool checked;
	char *check_text;
	struct gpud_check_report check;
	/* The last gpud_job_status's report, the same way. */
	bool told;
	char *status_text;
	struct gpud_status_report status;
};

/* One run at a time in a process: the signal state and the exit watch are the
 * process's. */
static atomic_bool run_in_progress;

unsigned gpud_api_version(void)
{
	return (GPUD_API_MAJOR << 16) | GPUD_API_MINOR;
}

const char *gpud_version(void)
{
	return GPUD_VERSION;
}

__attribute__((format(printf, 2, 3))) static int job_fail(struct gpud_job *job, const char *fmt,
							  ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(job->err, sizeof job->err, fmt, ap);
	va_end(ap);
	return -1;
}

gpud_job *gpud_job_new(void)
{
	return calloc(1, sizeof(struct gpud_job));
}

void gpud_job_free(gpud_job *job)
{
	if (!job)
		return;
	for (size_t i = 0; i < job->n_sets; i++)
		free(job->sets[i]);
	free(job->sets);
	free(job->path);
	free(job->result.stats_json);
	free(job->check_text);
	free(job->status_text);
	free(job);
}

const char *gpud_job_error(const gpud_job *job)
{
	return job ? job->err : "gpud: the job is NULL";
}

/* The job's configuration: its file and keys, the callbacks in place of the plugins
 * they replace. 0, or -1 with the error in job->err and what is at fault in *at
 * (cfg_load_at; may be NULL). */
static int job_config(struct gpud_job *job, struct cfg *c, long *at)
{
	char **sets = calloc(job->n_sets + 2, sizeof *sets);
	if (!sets)
		return job_fail(job, "out of memory");
	size_t n = 0;
	for (size_t i = 0; i < job->n_sets; i++)
		sets[n++] = job->sets[i];
	if (job->gen_cb)
		sets[n++] = (char *)"generator.plugin=" CALLBACKS;
	if (job->sink_cb)
		sets[n++] = (char *)"sink.plugin=" CALLBACKS;
	int rc = cfg_load_at(c, job->path, sets, n, job->err, sizeof job->err, at);
	free(sets);
	if (rc < 0)
		return -1;
	/* A job of keys alone has no file to put a journal beside: none unless asked. */
	if (!job->path && !c->journal_set) {
		free(c->journal);
		c->journal = NULL;
		c->journal_off = true;
	}
	return 0;
}

/* A trial load, for what gpud_job_load and gpud_job_set can tell on their own: -1 with
 * the error when the load puts the fault on `culprit` (CFG_AT_FILE: the file and its
 * lines; a set's index), else 0 (a missing required key is the whole job's, said when
 * it is checked or run; a fault of an earlier set is that set's). */
static int trial(struct gpud_job *job, long culprit)
{
	struct cfg c;
	long at = CFG_AT_JOB;
	if (job_config(job, &c, &at) == 0) {
		cfg_free(&c);
		job->err[0] = '\0';
		return 0;
	}
	if (at == culprit)
		return -1;
	job->err[0] = '\0';
	return 0;
}

/* Every call on a job starts so: the error text is the last call's (none: ""). */
static bool job_usable(struct gpud_job *job)
{
	job->err[0] = '\0';
	if (atomic_load(&job->state) != JOB_NEW) {
		job_fail(job, "this job has run already: one run per job (a resume is a new "
			      "job with GPUD_RUN_RESUME)");
		return false;
	}
	return true;
}

int gpud_job_load(gpud_job *job, const char *path)
{
	if (!job)
		return -1;
	if (!job_usable(job))
		return -1;
	if (!path || !*path)
		return job_fail(job, "gpud_job_load: no path given");
	char *old = job->path;
	job->path = strdup(path);
	if (!job->path) {
		job->path = old;
		return job_fail(job, "out of memory");
	}
	if (trial(job, CFG_AT_FILE) < 0) {
		free(job->path);
		job->path = old;
		return -1;
	}
	free(old);
	return 0;
}

/* Where the first control byte of s is, or NULL. */
static const char *control_byte(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return s;
	return NULL;
}

/* What gpud_job_set refuses before parsing: a key that is not SECTION.KEY of a sane
 * length, control bytes (a newline would be a line of its own in any file the job is
 * written to, and hides in messages), a value longer than a job file's line. */
static int set_refused(struct gpud_job *job, const char *section_key, const char *value)
{
	size_t key_len = value ? strlen(section_key) : strcspn(section_key, "=");
	const char *val = value ? value : section_key[key_len] ? section_key + key_len + 1 : NULL;
	const char *dot = memchr(section_key, '.', key_len);
	if (key_len > GPUD_SET_KEY_MAX)
		return job_fail(job,
				"gpud_job_set: the key is %zu bytes long: at most %d (SECTION.KEY)",
				key_len, GPUD_SET_KEY_MAX);
	const char *bad = control_byte(section_key);
	if (bad && (size_t)(bad - section_key) < key_len)
		return job_fail(job,
				"gpud_job_set: the key has a control byte (0x%02x) at offset %zu: "
				"keys are SECTION.KEY, one line",
				(unsigned char)*bad, (size_t)(bad - section_key));
	if (value && strchr(section_key, '='))
		return job_fail(job,
				"gpud_job_set: key '%s' holds '=': with a value, the key is "
				"SECTION.KEY alone",
				section_key);
	if (!dot || dot == section_key || dot + 1 == section_key + key_len)
		return job_fail(
			job,
			"--set %.*s: expected SECTION.KEY=VALUE (job.gpus=0, worker.plugin=...)",
			(int)key_len, section_key);
	if (!val)
		return job_fail(job,
				"gpud_job_set: '%.*s' has no value (value is NULL, and no "
				"'=VALUE' follows the key)",
				(int)key_len, section_key);
	size_t val_len = strlen(val);
	if (val_len > GPUD_SET_VALUE_MAX)
		return job_fail(job, "--set %.*s: the value is %zu bytes long: at most %d",
				(int)key_len, section_key, val_len, GPUD_SET_VALUE_MAX);
	if ((bad = control_byte(val)))
		return job_fail(job,
				"--set %.*s: the value has a control byte (0x%02x) at offset %zu: "
				"a value is one line, without newlines or other control bytes",
				(int)key_len, section_key, (unsigned char)*bad,
				(size_t)(bad - val));
	return 0;
}

int gpud_job_set(gpud_job *job, const char *section_key, const char *value)
{
	if (!job)
		return -1;
	if (!job_usable(job))
		return -1;
	if (!section_key)
		return job_fail(job, "gpud_job_set: no key given");
	if (set_refused(job, section_key, value) < 0)
		return -1;
	char *set;
	if (value ? asprintf(&set, "%s=%s", section_key, value) < 0 : !(set = strdup(section_key)))
		return job_fail(job, "out of memory");
	if (job->n_sets == job->cap_sets) {
		size_t cap = job->cap_sets ? 2 * job->cap_sets : 8;
		char **s = realloc(job->sets, cap * sizeof *s);
		if (!s) {
			free(set);
			return job_fail(job, "out of memory");
		}
		job->sets = s;
		job->cap_sets = cap;
	}
	/* The key is tried on its own, not with the file and every key before it: a job
	 * of N keys is built in time linear in N. What shows only with the whole job is
	 * said by gpud_job_check or gpud_job_run (gpud.h). */
	struct cfg c;
	long at = CFG_AT_JOB;
	if (cfg_load_at(&c, NULL, &set, 1, job->err, sizeof job->err, &at) == 0)
		cfg_free(&c);
	else if (at == 0) {
		free(set);
		return -1;
	}
	job->err[0] = '\0';
	job->sets[job->n_sets++] = set;
	return 0;
}

/* The callbacks behind the host's tables. The host hands open (and the sink's resume)
 * the state it holds: for callbacks, the job; open replaces it with the caller's ctx,
 * so that every later call goes straight to the caller's function with its ctx, as a
 * plugin's does with its state. */
static int cb_gen_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	(void)args;
	(void)err;
	struct gpud_job *job = *state;
	*state = job->gen_ctx;
	return 0;
}

static int cb_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	(void)args;
	(void)err;
	struct gpud_job *job = *state;
	*state = job->sink_ctx;
	return 0;
}

static int cb_sink_resume(const struct gpud_args *args, void **state,
			  void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
			  struct gpud_error *err)
{
	(void)args;
	struct gpud_job *job = *state;
	*state = job->sink_ctx;
	return job->sink.resume(job->sink_ctx, done, ctx, err);
}

/* The caller's struct, of the caller's size: what it lacks stays NULL. */
static void copy_ops(void *dst, size_t dst_size, const void *src, size_t src_size)
{
	memset(dst, 0, dst_size);
	memcpy(dst, src, src_size < dst_size ? src_size : dst_size);
	*(size_t *)dst = dst_size;
}

int gpud_job_set_generator(gpud_job *job, const struct gpud_generator_ops *ops, void *ctx)
{
	if (!job)
		return -1;
	if (!job_usable(job))
		return -1;
	if (!ops) {
		job->gen_cb = false;
		return 0;
	}
	if (ops->size < offsetof(struct gpud_generator_ops, next) + sizeof ops->next)
		return job_fail(job,
				"gpud_job_set_generator: ops->size %zu is too small (set it "
				"to sizeof(struct gpud_generator_ops))",
				ops->size);
	if (!ops->next)
		return job_fail(job, "gpud_job_set_generator: ops->next is required");
	copy_ops(&job->gen, sizeof job->gen, ops, ops->size);
	job->gen_ctx = ctx;
	job->gen_table = (struct gen_ops){
		.open = cb_gen_open,
		.next = job->gen.next,
		.close = job->gen.close,
		.total = job->gen.total,
		.skip = job->gen.skip,
		.interrupt = job->gen.interrupt,
	};
	job->gen_cb = true;
	return 0;
}

int gpud_job_set_sink(gpud_job *job, const struct gpud_sink_ops *ops, void *ctx)
{
	if (!job)
		return -1;
	if (!job_usable(job))
		return -1;
	if (!ops) {
		job->sink_cb = false;
		return 0;
	}
	if (ops->size < offsetof(struct gpud_sink_ops, event) + sizeof ops->event)
		return job_fail(job,
				"gpud_job_set_sink: ops->size %zu is too small (set it to "
				"sizeof(struct gpud_sink_ops))",
				ops->size);
	if (!ops->event)
		return job_fail(job, "gpud_job_set_sink: ops->event is required");
	copy_ops(&job->sink, sizeof job->sink, ops, ops->size);
	job->sink_ctx = ctx;
	job->sink_table = (struct sink_ops){
		.open = cb_sink_open,
		.event = job->sink.event,
		.close = job->sink.close,
		.events = job->sink.events,
		.resume = job->sink.resume ? cb_sink_resume : NULL,
		.finish = job->sink.finish,
		.resumed = job->sink.resumed,
		.tasks = job->sink.tasks,
		.calling_thread = job->sink.flags & GPUD_SINK_CALLING_THREAD,
		.no_input = job->sink.flags & GPUD_SINK_NO_INPUT,
		.names = job->sink.flags & GPUD_SINK_NAMES,
	};
	job->sink_cb = true;
	return 0;
}

/* The caller's options, of the caller's size, as the host's. */
static int take_options(struct gpud_job *job, const struct gpud_run_options *in,
			struct gpud_run_options *o)
{
	memset(o, 0, sizeof *o);
	if (!in)
		return 0;
	if (in->size < sizeof in->size)
		return job_fail(job,
				"gpud_run_options.size is %zu: set it to sizeof(struct "
				"gpud_run_options)",
				in->size);
	memcpy(o, in, in->size < sizeof *o ? in->size : sizeof *o);
	if (o->ui != GPUD_UI_OFF && o->ui != GPUD_UI_PLAIN && o->ui != GPUD_UI_DASHBOARD)
		return job_fail(job,
				"gpud_run_options.ui is %d: expected GPUD_UI_OFF, "
				"GPUD_UI_PLAIN or GPUD_UI_DASHBOARD",
				(int)o->ui);
	return 0;
}

/* What the command did before running, checking or telling: the job loaded, its rank
 * and paths, its outputs apart, --stats-json writable. 0, or 2 with job->err. */
static int job_ready(struct gpud_job *job, struct cfg *c, const char *rank, const char **stats_json,
		     char **stats_owned, bool outputs)
{
	if (job_config(job, c, NULL) < 0)
		return 2;
	if (ranks_detect(c, rank, job->err, sizeof job->err) < 0 ||
	    ranks_gpus_auto(c, job->err, sizeof job->err) < 0 ||
	    ranks_apply(c, stats_json, stats_owned, job->err, sizeof job->err) < 0)
		goto fail;
	if (c->ranks > 1 && c->ordered) {
		job_fail(job,
			 "%s: ordered = true and %u ranks (%s): each rank holds a share of the "
			 "ids, so no rank can deliver them in order; drop ordered, or sort the "
			 "merged output",
			 c->path, c->ranks, c->rank_source);
		goto fail;
	}
	if (c->shares == CFG_SHARES_DYNAMIC && c->ordered) {
		job_fail(job,
			 "%s: ordered = true and shares = dynamic: each rank holds the chunks it "
			 "claimed, so no rank can deliver the ids in order; drop ordered, or sort "
			 "the merged output",
			 c->path);
		goto fail;
	}
	/* Two keys naming one file would have the run destroy one output (or an input)
	 * with another: refused before anything is touched. */
	if (outputs && outputs_distinct(c, *stats_json, job->err, sizeof job->err) < 0)
		goto fail;
	/* Found out now, not after a long run. */
	char why[1024];
	if (*stats_json && check_file_writable(*stats_json, why, sizeof why) < 0) {
		job_fail(job, "--stats-json %s: %s", *stats_json, why);
		goto fail;
	}
	return 0;
fail:
	cfg_free(c);
	return 2;
}

enum job_cmd { CMD_RUN, CMD_CHECK, CMD_STATUS };

/* A status that stopped before the journal was read: a report that says why. */
static void status_refused(struct gpud_job *job)
{
	free(job->status_text);
	job->status_text = NULL;
	job->status = (struct gpud_status_report){
		.size = sizeof job->status, .ok = 0, .text = "", .error = job->err};
	job->told = true;
}

/* A check that stopped before the plugins were looked at: a report that says why. */
static void check_refused(struct gpud_job *job)
{
	free(job->check_text);
	job->check_text = NULL;
	job->check = (struct gpud_check_report){
		.size = sizeof job->check, .ok = 0, .text = "", .error = job->err, .ranks = 1};
	job->checked = true;
}

/* check, status and run: the job made ready, its lock taken (run) or looked at. */
static int job_command(struct gpud_job *job, const struct gpud_run_options *o, enum job_cmd cmd,
		       struct run_pool *pool)
{
	struct cfg c;
	const char *stats_json = o->stats_json;
	char *stats_owned = NULL;
	int rc = job_ready(job, &c, o->rank, &stats_json, &stats_owned, cmd != CMD_STATUS);
	if (rc != 0) {
		say("%s", job->err);
		if (cmd == CMD_CHECK)
			check_refused(job);
		else if (cmd == CMD_STATUS)
			status_refused(job);
		free(stats_owned);
		return rc;
	}
	/* One run of a job at a time: a second one, or a resume racing the first, is
	 * refused; check says so too, status says it runs (runlock.h). */
	struct runlock lock = {.n = 0};
	char why[2048];
	int held = cmd == CMD_RUN ? runlock_take(&lock, &c, why, sizeof why)
				  : runlock_probe(&c, why, sizeof why);
	if (held < 0 && cmd == CMD_STATUS) {
		fprintf(LOG_INFO, "gpud: note: %s\n", why);
	} else if (held < 0) {
		job_fail(job, "%s: %s", c.path, why);
		say("%s", job->err);
		if (cmd == CMD_CHECK)
			check_refused(job);
		else if (cmd == CMD_STATUS)
			status_refused(job);
		cfg_free(&c);
		free(stats_owned);
		return 2;
	}
	struct run_opts opts = {
		.stats_json = stats_json,
		.ui = o->ui == GPUD_UI_DASHBOARD ? UI_DASHBOARD
		      : o->ui == GPUD_UI_PLAIN   ? UI_PLAIN
						 : UI_OFF,
		.ui_tty = o->tty,
		.resume = o->flags & (GPUD_RUN_RESUME | GPUD_RUN_RETRY_FAILED),
		.retry_failed = o->flags & GPUD_RUN_RETRY_FAILED,
		.force = o->flags & GPUD_RUN_FORCE,
		.keep_signals = o->flags & GPUD_RUN_KEEP_SIGNALS,
		.import_code = o->flags & GPUD_CHECK_IMPORT,
		.gen_ops = job->gen_cb ? &job->gen_table : NULL,
		.gen_state = job,
		.sink_ops = job->sink_cb ? &job->sink_table : NULL,
		.sink_state = job,
		.result = &job->result,
		.pool = pool,
	};
	if (cmd == CMD_CHECK) {
		char *text = NULL;
		size_t text_len = 0;
		struct capacity_memory mem = {.total = 0};
		opts.memory = &mem;
		opts.check_out = open_memstream(&text, &text_len);
		rc = opts.check_out ? run_check(&c, &opts) : 2;
		if (opts.check_out)
			fclose(opts.check_out);
		free(job->check_text);
		job->check_text = text;
		job->check = (struct gpud_check_report){
			.size = sizeof job->check,
			.ok = rc == 0,
			.n_gpus = c.n_gpus,
			.workers_per_gpu = c.workers_per_gpu,
			.rank = c.rank,
			.ranks = c.ranks,
			.shm_total = rc == 0 ? mem.total : 0,
			.shm_run_memfd = rc == 0 ? mem.run_memfd : 0,
			.shm_result_memfd = rc == 0 ? mem.result_memfd : 0,
			.shm_task_ring = rc == 0 ? mem.task_ring : 0,
			.shm_result_ring = rc == 0 ? mem.result_ring : 0,
			.shm_workers = rc == 0 ? mem.workers : 0,
		};
		job->checked = true;
	} else if (cmd == CMD_STATUS) {
		char *text = NULL;
		size_t text_len = 0;
		struct resume_figures fig = {.journal = false};
		FILE *out = open_memstream(&text, &text_len);
		rc = out ? resume_status(&c, out, &fig) : 2;
		if (out)
			fclose(out);
		free(job->status_text);
		job->status_text = text;
		job->status = (struct gpud_status_report){
			.size = sizeof job->status,
			.ok = rc == 0,
			.journal = fig.journal,
			.done = fig.done,
			.failed = fig.failed,
			.low = fig.low,
			.finished = fig.finished,
			.changed = fig.changed,
		};
		job->told = true;
	} else {
		rc = run_job(&c, &opts);
		if (job->result.abort_msg[0] && rc == 3)
			job_fail(job, "aborted: %s", job->result.abort_msg);
	}
	/* Found by the checks before the run (a plugin, its keys, the journal...): the line
	 * said on standard error. */
	if (rc == 2 && !job->err[0])
		say_last(job->err, sizeof job->err);
	if (cmd == CMD_CHECK) {
		job->check.text = job->check_text && rc == 0 ? job->check_text : "";
		job->check.error = rc == 0 ? "" : job->err;
	}
	if (cmd == CMD_STATUS) {
		job->status.text = job->status_text && rc == 0 ? job->status_text : "";
		job->status.error = rc == 0 ? "" : job->err;
	}
	runlock_release(&lock);
	cfg_free(&c);
	free(stats_owned);
	return rc;
}

/* Takes the process's one run, or says why not. */
static int claim_process(struct gpud_job *job)
{
	bool free_ = false;
	if (!atomic_compare_exchange_strong(&run_in_progress, &free_, true))
		return job_fail(job, "another gpud run is in progress in this process (one at a "
				     "time)");
	return 0;
}

struct gpud_pool {
	struct run_pool *run;
};

gpud_pool *gpud_pool_open(void)
{
	struct gpud_pool *p = calloc(1, sizeof *p);
	if (p && !(p->run = run_pool_new())) {
		free(p);
		p = NULL;
	}
	return p;
}

void gpud_pool_close(gpud_pool *pool)
{
	if (!pool)
		return;
	run_pool_free(pool->run);
	free(pool);
}

static int job_run(gpud_job *job, const struct gpud_run_options *options, struct run_pool *pool);

int gpud_pool_run(gpud_pool *pool, gpud_job *job, const struct gpud_run_options *options)
{
	if (!job)
		return -1;
	if (!pool)
		return job_fail(job, "gpud_pool_run: the pool is NULL");
	return job_run(job, options, pool->run);
}

int gpud_job_run(gpud_job *job, const struct gpud_run_options *options)
{
	return job_run(job, options, NULL);
}

static int job_run(gpud_job *job, const struct gpud_run_options *options, struct run_pool *pool)
{
	struct gpud_run_options o;
	if (!job)
		return -1;
	if (!job_usable(job) || take_options(job, options, &o) < 0)
		return -1;
	if (claim_process(job) < 0)
		return -1;
	job->err[0] = '\0';
	/* From here gpud_job_stop interrupts the run: those that came before count now. */
	lifecycle_interrupts_reset();
	atomic_store(&job->state, JOB_RUNNING);
	for (unsigned n = atomic_exchange(&job->stops, 0); n > 0; n--)
		lifecycle_interrupt();
	say_forget();
	log_set(o.log, o.log_data);
	int rc = job_command(job, &o, CMD_RUN, pool);
	log_set(NULL, NULL);
	atomic_store(&job->state, JOB_DONE);
	atomic_store(&run_in_progress, false);
	return rc;
}

void gpud_job_stop(gpud_job *job)
{
	if (!job)
		return;
	/* Lock-free atomics and lifecycle_interrupt (a counter and a futex wake): safe in a
	 * signal handler. */
	if (atomic_load(&job->state) == JOB_RUNNING)
		lifecycle_interrupt();
	else if (atomic_load(&job->state) == JOB_NEW)
		atomic_fetch_add(&job->stops, 1);
}

const struct gpud_stats *gpud_job_stats(const gpud_job *job)
{
	return job && job->result.ran ? &job->result.stats : NULL;
}

const char *gpud_job_stats_json(const gpud_job *job)
{
	return job && job->result.ran ? job->result.stats_json : NULL;
}

static int job_look(struct gpud_job *job, const struct gpud_run_options *options, enum job_cmd cmd)
{
	struct gpud_run_options o;
	if (!job)
		return -1;
	job->err[0] = '\0';
	if (take_options(job, options, &o) < 0 || claim_process(job) < 0)
		return -1;
	say_forget();
	log_set(o.log, o.log_data);
	int rc = job_command(job, &o, cmd, NULL);
	log_set(NULL, NULL);
	atomic_store(&run_in_progress, false);
	return rc;
}

int gpud_job_check(gpud_job *job, const struct gpud_run_options *options)
{
	return job_look(job, options, CMD_CHECK);
}

const struct gpud_check_report *gpud_job_check_report(const gpud_job *job)
{
	return job && job->checked ? &job->check : NULL;
}

const struct gpud_status_report *gpud_job_status_report(const gpud_job *job)
{
	return job && job->told ? &job->status : NULL;
}

int gpud_job_status(gpud_job *job, const struct gpud_run_options *options)
{
	return job_look(job, options, CMD_STATUS);
}

/* The calls without a job (plugins, merge-arrays): the process's one call at a time,
 * with the caller's log callback for their messages. false: another call runs. */
static bool lone_call_begin(const struct gpud_run_options *options)
{
	bool free_ = false;
	if (!atomic_compare_exchange_strong(&run_in_progress, &free_, true))
		return false;
	say_forget();
	if (options &&
	    options->size >= offsetof(struct gpud_run_options, log_data) + sizeof options->log_data)
		log_set(options->log, options->log_data);
	return true;
}

static void lone_call_end(void)
{
	log_set(NULL, NULL);
	atomic_store(&run_in_progress, false);
}

int gpud_plugins_list(const struct gpud_run_options *options, struct gpud_plugin_list **list)
{
	if (!list)
		return GPUD_MISUSE;
	*list = NULL;
	if (!lone_call_begin(options))
		return GPUD_MISUSE;
	int rc = GPUD_EXIT_REFUSED;
	*list = catalog_list(&rc);
	lone_call_end();
	return rc;
}

void gpud_plugins_free(struct gpud_plugin_list *list)
{
	catalog_free(list);
}

int gpud_plugins(void)
{
	struct gpud_plugin_list *list = NULL;
	int rc = gpud_plugins_list(NULL, &list);
	if (list)
		fputs(list->text, stdout);
	gpud_plugins_free(list);
	return rc < 0 ? GPUD_EXIT_REFUSED : rc;
}

/* What gpud_arrays_merge hands the caller, and the strings it points into. */
struct arrays_merged {
	struct gpud_arrays_merged pub;
	struct arrays_result res;
};

int gpud_arrays_merge(const char *out, const char *const *shards, size_t n_shards,
		      const char *dataset, const struct gpud_run_options *options,
		      struct gpud_arrays_merged **result)
{
	if (!result)
		return GPUD_MISUSE;
	*result = NULL;
	struct arrays_merged *m = calloc(1, sizeof *m);
	if (!lone_call_begin(options)) {
		free(m);
		return GPUD_MISUSE;
	}
	int rc;
	if (!m) {
		fprintf(LOG_ERR, "gpud merge-arrays: out of memory\n");
		rc = GPUD_EXIT_REFUSED;
	} else {
		rc = arrays_merge(out, shards, n_shards, dataset, &m->res);
		m->pub = (struct gpud_arrays_merged){
			.size = sizeof m->pub,
			.ok = rc == GPUD_EXIT_OK || rc == GPUD_EXIT_FAILED,
			.error = m->res.error,
			.format = m->res.format,
			.shards = rc == GPUD_EXIT_REFUSED ? 0 : n_shards,
			.rows = m->res.rows,
			.failed = m->res.failed,
		};
		*result = &m->pub;
	}
	lone_call_end();
	return rc;
}

void gpud_arrays_merge_free(struct gpud_arrays_merged *result)
{
	free(result); /* pub is the first member of its struct arrays_merged */
}

int gpud_merge_arrays(int argc, char *const *argv)
{
	struct arrays_args a;
	int rc = arrays_parse(argc < 0 ? 0 : argc, argv, &a);
	if (rc < 0) {
		struct gpud_arrays_merged *m = NULL;
		rc = gpud_arrays_merge(a.out, a.shards, a.n_shards, a.dataset, NULL, &m);
		gpud_arrays_merge_free(m);
		if (rc < 0)
			rc = GPUD_EXIT_REFUSED;
	}
	free(a.shards);
	return rc;
}

/* What gpud_stats_merge hands the caller, and what it points into. */
struct stats_merged {
	struct gpud_stats_merged pub;
	char *json;
	char error[4096];
};

int gpud_stats_merge(const char *const *files, size_t n_files,
		     const struct gpud_run_options *options, struct gpud_stats_merged **result)
{
	if (!result)
		return GPUD_MISUSE;
	*result = NULL;
	struct stats_merged *m = calloc(1, sizeof *m);
	if (!lone_call_begin(options)) {
		free(m);
		return GPUD_MISUSE;
	}
	int rc = GPUD_EXIT_REFUSED;
	size_t json_len = 0;
	FILE *out = m ? open_memstream(&m->json, &json_len) : NULL;
	struct merge_figures fig = {.made = false};
	if (!out) {
		fprintf(LOG_ERR, "gpud: merge: out of memory\n");
	} else if ((n_files > 0 && !files) || n_files > INT_MAX) {
		fprintf(LOG_ERR, "gpud: merge: no files given\n");
	} else {
		say_forget();
		rc = merge_run((int)n_files, (char **)files, out, &fig);
	}
	if (out)
		fclose(out);
	if (m) {
		if (rc != GPUD_EXIT_OK && !fig.made)
			say_last(m->error, sizeof m->error);
		if (rc != GPUD_EXIT_OK && !fig.made && !m->error[0])
			snprintf(m->error, sizeof m->error, "merge: %s",
				 n_files ? "out of memory" : "no stats files given");
		m->pub = (struct gpud_stats_merged){
			.size = sizeof m->pub,
			.ok = fig.made,
			.json = fig.made && m->json ? m->json : "",
			.error = fig.made ? "" : m->error,
			.files = fig.made ? (unsigned)n_files : 0,
			.missing_ranks = fig.missing_ranks,
			.exit_status = fig.exit_status,
			.generated = fig.generated,
			.succeeded = fig.ok,
			.failed = fig.failed,
			.timed_out = fig.timed_out,
			.not_run = fig.not_run,
		};
		*result = &m->pub;
	}
	lone_call_end();
	return rc;
}

void gpud_stats_merge_free(struct gpud_stats_merged *result)
{
	if (!result)
		return;
	struct stats_merged *m = (struct stats_merged *)result; /* pub is its first member */
	free(m->json);
	free(m);
}

int gpud_merge(int n_files, char *const *files)
{
	if (n_files < 0 || (n_files > 0 && !files)) {
		fprintf(LOG_ERR, "gpud: merge: no files given\n");
		return 2;
	}
	struct gpud_stats_merged *m = NULL;
	int rc = gpud_stats_merge((const char *const *)files, (size_t)n_files, NULL, &m);
	if (m)
		fputs(m->json, stdout);
	gpud_stats_merge_free(m);
	return rc < 0 ? GPUD_EXIT_REFUSED : rc;
}
