/* SPDX-License-Identifier: MIT */
/* One run, start to end: plugins found and checked, shared memory made, workers
 * started, the dispatcher run, everything closed in reverse order, stats reported. */
#define _GNU_SOURCE
#include "run/run.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "workers/capacity.h"
#include "job/checks.h"
#include "job/groups.h"
#include "job/python.h"
#include "run/dispatcher.h"
#include "run/stages.h"
#include "run/events.h"
#include "util/abort.h"
#include "record/failures.h"
#include "record/files.h"
#include "host.h"
#include "workers/lifecycle.h"
#include "workers/memory.h"
#include "workers/fit.h"
#include "workers/times.h"
#include "workers/spawner.h"
#include "paths.h"
#include "record/resume.h"
#include "cluster/ranks.h"
#include "run/stats.h"
#include "util/textio.h"
#include "view/ui.h"
#include "wait.h"
#include "util/say.h"

#define ERRLEN 2048

/* A warm pool (run.h): what its first run made and the next ones reuse. */
struct run_pool {
	bool made;         /* the shared memory and the workers' slots exist */
	char *sig;         /* what each run must match (pool_signature) */
	char *worker_keys; /* the worker plugin's check (its name and keys) */
	int *gpus;         /* the GPUs resolved by the first run */
	size_t n_gpus;
	double cleanup_s;             /* its last run's cleanup_timeout, for the close */
	struct spawn_thread *spawner; /* its workers' parent thread (spawner.h) */
	struct host_shm shm;
	struct host_pool pool;
};

/* How a stopped run with a journal is finished: a job file's by the command, a job of
 * keys (libgpud) by a new job with the same keys. */
static void resume_hint(const struct cfg *c)
{
	if (strcmp(c->path, CFG_NO_FILE) == 0)
		fprintf(LOG_INFO,
			"gpud: a new job of the same keys with GPUD_RUN_RESUME finishes it\n");
	else
		fprintf(LOG_INFO, "gpud: `gpud run %s --resume` finishes it (or GPUD_RUN_RESUME)\n",
			c->path);
}

/* gpus = all: counted through CUDA by a helper process (the host never touches CUDA).
 * Listed ids: checked against the devices where CUDA works; where it does not, they
 * stay as given (simulated GPUs: the plugin decides what an id means). */
static int count_gpus(struct host *h, struct cfg *c, const char *worker_exe)
{
	char err[ERRLEN];
	int n = spawn_count_gpus(worker_exe, h->pool.bus_ids, CFG_MAX_GPUS, err, sizeof err);
	if (c->gpus_auto)
		return 0; /* the launcher's tokens, taken as they are */
	if (!c->gpus_all) {
		for (size_t i = 0; n > 0 && i < c->n_gpus; i++) {
			if (c->gpus[i] >= n) {
				say("%s: [job] gpus lists GPU %d, but this machine has "
				    "%d CUDA device%s (0 to %d)",
				    c->path, c->gpus[i], n, n == 1 ? "" : "s", n - 1);
				return -1;
			}
		}
		return 0;
	}
	if (n < 0) {
		say("%s: %s", c->path, err);
		return -1;
	}
	for (int i = 0; i < n && i < CFG_MAX_GPUS; i++)
		c->gpus[i] = i;
	c->n_gpus = (size_t)n;
	return 0;
}

/* The GPUs counted, then cut into groups of gpus_per_worker (job/groups.h): a count it
 * does not divide is refused here for `all` and `auto`, now that it is known. */
static int resolve_gpus(struct host *h, struct cfg *c, const char *worker_exe)
{
	char err[ERRLEN];
	if (count_gpus(h, c, worker_exe) < 0)
		return -1;
	if (c->n_gpus && groups_check(c, err, sizeof err) < 0) {
		say("%s", err);
		return -1;
	}
	return 0;
}

static int load_host_plugin(struct plugin *pl, const struct cfg_section *s, enum loader_kind k)
{
	char err[ERRLEN];
	char *path = loader_find(s->plugin, k, err, sizeof err);
	if (!path || loader_open(pl, path, k, err, sizeof err) < 0) {
		say("%s", err);
		free(path);
		return -1;
	}
	free(path);
	return 0;
}

/* The generator and the sink: the caller's in-process tables (libgpud's callbacks), or
 * the plugins the job names, loaded. */
static int host_plugins(struct host *h, struct cfg *c, const struct run_opts *opts)
{
	if (opts && opts->gen_ops) {
		h->gen_ops = opts->gen_ops;
		h->gen = opts->gen_state; /* for its open, which puts the caller's there */
	} else if (load_host_plugin(&h->gen_pl, &c->generator, LOADER_GENERATOR) < 0) {
		return -1;
	} else {
		h->gen_ops = &h->gen_pl.gen;
	}
	if (opts && opts->sink_ops) {
		h->sink_ops = opts->sink_ops;
		h->sink = opts->sink_state;
	} else if (load_host_plugin(&h->sink_pl, &c->sink, LOADER_SINK) < 0) {
		return -1;
	} else {
		h->sink_ops = &h->sink_pl.sink;
	}
	return 0;
}

/* Everything `gpud check` checks; fills the host's plugin fields. */
static int prepare(struct host *h, struct cfg *c, const struct run_opts *opts)
{
	char err[ERRLEN];
	h->pool.exe = paths_worker_exe();
	if (!h->pool.exe) {
		const char *env = getenv("GPUD_WORKER_EXE");
		if (env && *env)
			say("GPUD_WORKER_EXE=%s: not an executable file", env);
		else
			say("cannot find gpud-worker next to %s",
			    paths_exe_dir() ? paths_exe_dir() : "gpud");
		return -1;
	}
	h->pool.plugin = loader_find(c->worker.plugin, LOADER_WORKER, err, sizeof err);
	if (!h->pool.plugin) {
		say("%s", err);
		return -1;
	}
	/* The Python the python plugins run on, in the host and every worker: chosen and
	 * checked before any of them is loaded (job/python.h). */
	if (python_needed(c) &&
	    (python_check_sources(c, err, sizeof err) < 0 || !python_choose(c, err, sizeof err))) {
		say("%s", err);
		return -1;
	}
	static char out[64 << 10]; /* the worker plugin's name and keys */
	out[0] = '\0';
	struct run_pool *p = opts ? opts->pool : NULL;
	if (p && p->made) {
		/* A warm pool's workers were checked and started by its first run. */
		snprintf(out, sizeof out, "%s", p->worker_keys);
	} else if (spawn_check_worker_plugin(h->pool.exe, h->pool.plugin, out, sizeof out, err,
					     sizeof err) < 0) {
		say("%s", err);
		return -1;
	} else if (p) {
		free(p->worker_keys); /* an earlier first run's, refused after its check */
		if (!(p->worker_keys = strdup(out))) {
			say("out of memory");
			return -1;
		}
	}
	if (host_plugins(h, c, opts) < 0)
		return -1;
	if (checks_keys(&h->gen_pl, &h->sink_pl, c, out) < 0 || stages_prepare(h) < 0)
		return -1;
	h->pool.bus_ids = calloc(CFG_MAX_GPUS, sizeof *h->pool.bus_ids);
	if (!h->pool.bus_ids) {
		say("out of memory");
		return -1;
	}
	if (p && p->made && c->gpus_all) {
		int *g = realloc(c->gpus, p->n_gpus * sizeof *g);
		if (!g) {
			say("out of memory");
			return -1;
		}
		memcpy(g, p->gpus, p->n_gpus * sizeof *g);
		c->gpus = g;
		c->n_gpus = p->n_gpus;
		memcpy(h->pool.bus_ids, p->pool.bus_ids, CFG_MAX_GPUS * sizeof *h->pool.bus_ids);
	} else if (resolve_gpus(h, c, h->pool.exe) < 0) {
		return -1;
	}
	return 0;
}

/* What the workers of a pool were started with: their plugin and keys, the GPUs, and the
 * job's keys a worker reads at its start or that size its rings. Another run of the pool
 * must have the same. NULL out of memory. */
static char *pool_signature(const struct host *h, const struct cfg *c)
{
	char *sig = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&sig, &len);
	if (!f)
		return NULL;
	fprintf(f, "worker.plugin=%s", h->pool.plugin);
	for (size_t i = 0; i < c->worker.count; i++)
		fprintf(f, ", worker.%s=%s", c->worker.kv[i].key, c->worker.kv[i].value);
	fputs(", job.gpus=", f);
	for (size_t i = 0; i < c->n_gpus; i++)
		fprintf(f, "%s%d", i ? "," : "", c->gpus[i]);
	fprintf(f,
		", job.workers_per_gpu=%u, job.gpus_per_worker=%u, job.queue_size=%u, "
		"job.max_task_bytes=%llu, job.max_result_bytes=%llu, job.batch_size=%u, "
		"job.batch_wait_ms=%g, job.max_in_flight=%u, job.task_timeout=%g, "
		"job.base_seed=%llu, job.python=%s",
		c->workers_per_gpu, c->gpus_per_worker, (unsigned)c->queue_size,
		(unsigned long long)c->max_task_bytes, (unsigned long long)c->max_result_bytes,
		c->batch_size, c->batch_wait_ms, c->max_in_flight, c->task_timeout,
		(unsigned long long)c->base_seed, c->python ? c->python : "");
	fclose(f);
	return sig;
}

/* The first difference between two signatures, for the refusal: "KEY=A (the pool's: B)". */
static void pool_difference(const char *run, const char *pool, char *out, size_t len)
{
	const char *a = run, *b = pool;
	while (*a && *a == *b)
		a++, b++;
	while (a > run && strncmp(a - 1, ", ", 2) != 0 && a[-1] != ',')
		a--, b--;
	if (a > run && *a == ' ')
		a++, b++;
	int na = (int)strcspn(a, ","), nb = (int)strcspn(b, ",");
	snprintf(out, len, "%.*s (the pool's: %.*s)", na > 300 ? 300 : na, a, nb > 300 ? 300 : nb,
		 b);
}

/* A pool's run: the same workers as its first, or refused (said why). 0 or -1. */
static int pool_admit(struct host *h, struct cfg *c, struct run_pool *p)
{
	if (c->n_stages) {
		say("%s: a pool of workers kept between runs takes no [stage.*] sections", c->path);
		return -1;
	}
	char *sig = pool_signature(h, c);
	if (!sig) {
		say("out of memory");
		return -1;
	}
	if (!p->made) {
		free(p->sig);
		p->sig = sig;
		free(p->gpus);
		p->gpus = malloc((c->n_gpus ? c->n_gpus : 1) * sizeof *p->gpus);
		if (!p->gpus) {
			say("out of memory");
			return -1;
		}
		memcpy(p->gpus, c->gpus, c->n_gpus * sizeof *p->gpus);
		p->n_gpus = c->n_gpus;
		return 0;
	}
	int same = strcmp(sig, p->sig) == 0;
	if (!same) {
		char d[700];
		pool_difference(sig, p->sig, d, sizeof d);
		say("%s: this pool's workers were started for other keys: %s; a pool runs one "
		    "worker, GPUs and worker keys (close it and open another)",
		    c->path, d);
	}
	free(sig);
	return same ? 0 : -1;
}

static void release(struct host *h)
{
	if (h->view.fd > 2)
		close(h->view.fd);
	metrics_stop(h, -1);
	journal_close(&h->journal);
	if (h->claims) {
		claims_close(h->claims);
		free(h->claims);
		h->claims = NULL;
	}
	files_close_logs(h);
	if (h->files.failures)
		fclose(h->files.failures);
	tasks_free(h);
	struct run_pool *p = h->opts ? h->opts->pool : NULL;
	if (p && h->shm.hdr) {
		/* The pool keeps the memory and the slots (their workers, live or not). */
		p->made = true;
		p->shm = h->shm;
		p->pool = h->pool;
		p->cleanup_s = h->cfg->cleanup_timeout;
		h->pool = (struct host_pool){.w = NULL};
	} else {
		shm_destroy(h);
		free(h->pool.w);
		free(h->pool.restarts);
		free(h->pool.retired);
		free(h->pool.bus_ids);
		free(h->pool.exe);
		free(h->pool.plugin);
	}
	loader_close(&h->gen_pl);
	loader_close(&h->sink_pl);
	free(h->out.held);
	names_free(&h->out.task_names);
	free(h->files.log_dir);
	stages_free(h);
}

/* `gpud check` with gpus_per_worker: each group, its workers and what they see. */
static void run_check_groups(const struct cfg *c, FILE *out)
{
	fprintf(out, "  %zu GPU groups of %zu (gpus_per_worker), %u worker%s each:\n",
		groups_count(c), groups_width(c), c->workers_per_gpu,
		c->workers_per_gpu == 1 ? "" : "s");
	for (size_t g = 0; g < groups_count(c); g++) {
		char ids[GROUPS_LABEL], *cvd = groups_visible(c, g);
		unsigned k0 = (unsigned)g * c->workers_per_gpu;
		fprintf(out, "  GPU %s: workers %u to %u, CUDA_VISIBLE_DEVICES=%s\n",
			groups_ids(c, g, ids, sizeof ids), k0, k0 + c->workers_per_gpu - 1,
			cvd ? cvd : "?");
		free(cvd);
	}
}

/* The run's side of a worker's life, for workers/lifecycle.c (lifecycle.h). */
static const struct lifecycle_up run_up = {
	.outcome = events_outcome,
	.worker_event = events_worker,
	.requeue = tasks_requeue,
	.ready = dispatch_first_window,
};

int run_check(struct cfg *c, const struct run_opts *opts)
{
	struct host h = HOST_INIT(c);
	h.pool.up = &run_up;
	FILE *out = opts && opts->check_out ? opts->check_out : stdout;
	char *notes = NULL;
	size_t notes_len = 0;
	FILE *nf = open_memstream(&notes, &notes_len);
	int rc = !nf || prepare(&h, c, opts) < 0 || capacity_check(&h, c, false, nf) < 0 ||
				 checks_dry(h.gen_ops, h.sink_ops, c, nf) < 0 ||
				 (opts && opts->import_code && python_check_import(c, nf) < 0)
			 ? 2
			 : 0;
	if (nf)
		fclose(nf);
	if (rc == 0) {
		char groups[96] = "";
		if (groups_width(c) > 1) /* workers_per_gpu counts per group */
			snprintf(groups, sizeof groups, " in %zu groups of %zu", groups_count(c),
				 groups_width(c));
		fprintf(out,
			"%s: OK: %zu GPU%s%s x %u worker%s; worker %s; generator %s; sink %s\n",
			c->path, c->n_gpus, c->n_gpus == 1 ? "" : "s", groups, c->workers_per_gpu,
			c->workers_per_gpu == 1 ? "" : "s", h.pool.plugin,
			h.gen_pl.path ? h.gen_pl.path : c->generator.plugin,
			h.sink_pl.path ? h.sink_pl.path : c->sink.plugin);
		unsigned per[CFG_MAX_STAGES];
		stagecfg_workers(c, per);
		for (unsigned i = 0; i < h.pool.n_stages; i++) {
			char why[400];
			fprintf(out, "  stage %s: %u worker%s (%s); %s\n", h.pool.stages[i].name,
				per[i], per[i] == 1 ? "" : "s",
				stagecfg_workers_why(c, i, why, sizeof why),
				h.pool.stages[i].plugin);
		}
		if (c->ranks > 1 || strcmp(c->rank_source, "none (one rank)") != 0)
			fprintf(out, "  rank %u of %u (from %s)\n", c->rank, c->ranks,
				c->rank_source);
		if (c->shares == CFG_SHARES_DYNAMIC)
			fprintf(out, "  shares: dynamic, claimed in %s\n", c->claims);
		if (groups_width(c) > 1)
			run_check_groups(c, out);
		else
			for (size_t i = 0; c->gpu_tokens && i < c->n_gpus; i++)
				fprintf(out, "  GPU %zu: CUDA_VISIBLE_DEVICES=%s (gpus = auto)\n",
					i, c->gpu_tokens[i]);
		if (python_chosen()) {
			char py[2048];
			python_describe(python_chosen(), py, sizeof py);
			fprintf(out, "  python: %s\n", py);
		}
		capacity_describe(&h, c, out, opts ? opts->memory : NULL);
		fputs(notes ? notes : "", out);
	}
	free(notes);
	release(&h);
	return rc;
}

/* Whether standard output is a pipe or socket whose reader has gone. */
static bool stdout_reader_gone(void)
{
	struct stat st;
	if (fstat(1, &st) < 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
		return false;
	struct pollfd pf = {1, POLLOUT, 0};
	return poll(&pf, 1, 0) == 1 && (pf.revents & POLLERR);
}

static void count_not_run(struct host *h)
{
	/* Whatever was generated and has no outcome did not run. */
	uint64_t done = h->stats.ok + h->stats.failed + h->stats.timed_out + h->stats.not_run;
	if (done < h->stats.generated)
		UI_ADD(h->stats.not_run, h->stats.generated - done);
}

static void say_sink_not_closed(const char *what)
{
	fprintf(LOG_ERR,
		"gpud: the sink's %s had not returned when the run ended; it was not "
		"closed\n",
		what);
}

/* The caller's copy of the end (libgpud): the stats, their JSON, why it aborted. */
static void fill_result(struct host *h, int status)
{
	struct run_result *r = h->opts->result;
	if (!r)
		return;
	r->ran = true;
	r->stats = h->stats;
	free(r->stats_json);
	r->stats_json = NULL;
	size_t len;
	FILE *f = open_memstream(&r->stats_json, &len);
	if (f) {
		stats_json(h, f, status);
		fclose(f);
	}
	snprintf(r->abort_msg, sizeof r->abort_msg, "%s", h->ctl.abort ? h->ctl.abort_msg : "");
}

/* The exit status of a run whose outcomes are all counted, as things stand. */
static int exit_status(const struct host *h)
{
	/* Stopped by a signal with a journal: resumable, which a batch script can tell. */
	int stopped = h->ctl.interrupted && h->journal.fd >= 0 ? RUN_EXIT_RESUMABLE : 3;
	/* A resumed run answers for the whole job: failures of earlier runs still stand. */
	bool failed = h->stats.failed || h->stats.timed_out || (h->resume.on && h->journal.failed);
	/* An input found changed before anything new ran: refused, as a changed file is. */
	if (h->resume.input_changed && !h->stats.generated)
		stopped = 2;
	return h->ctl.abort ? stopped : failed ? 1 : 0;
}

/* The stand-in ends a run whose end is stuck in a sink call (the last outcomes held for
 * ordered delivery, or the sink's close) after an interrupt or sink_timeout: what the
 * sink never took counts as not run, the summary is said, and the journal is left as
 * last flushed (what the sink took since may come again on --resume: at least once). */
static int finish_stuck(struct host *h)
{
	bool closing = h->gate.sink_kind == GATE_SINK_CLOSE;
	if (!closing) {
		events_undelivered(h);
		count_not_run(h);
	}
	say_sink_not_closed(closing ? "close" : "last call");
	int status = h->ctl.interrupted && h->journal.fd >= 0 ? RUN_EXIT_RESUMABLE : 3;
	stats_print(h, LOG_INFO);
	failures_close(h, LOG_INFO);
	fill_result(h, status);
	if (h->opts->stats_json && stats_write_json(h, h->opts->stats_json, status) < 0)
		fprintf(LOG_ERR, "gpud: cannot write --stats-json %s: %s\n", h->opts->stats_json,
			strerror(errno));
	fprintf(LOG_ERR, "gpud: aborted: %s\n", h->ctl.abort_msg);
	if (status == RUN_EXIT_RESUMABLE)
		resume_hint(h->cfg);
	return status;
}

/* The rest of a run after the loop: children reaped, held outcomes flushed, the sink
 * closed, the stats reported; returns the exit status. The loop's stand-in calls it
 * when the run ends while a generator or sink call is stuck, and then exits; the
 * stand-in still watches the sink's calls here (a close that blocks). */
static int finish_run(struct host *h)
{
	if (h->ctl.finishing)
		return finish_stuck(h); /* the stand-in, while we are stuck in the sink */
	h->ctl.finishing = true;
	bool on_standin = h->standin_running && pthread_equal(pthread_self(), h->standin);
	/* Every child is waited for, and whatever the workers left behind is killed:
	 * nothing outlives the run or holds its output open. */
	for (unsigned k = 0; k < h->pool.n; k++) {
		/* One reaped already (exited) is not: its pid may be another's by now. */
		if (h->ctl.parked && h->pool.w[k].pid > 0 && !h->pool.w[k].exited &&
		    (h->pool.w[k].state == HW_READY || h->pool.w[k].state == HW_STARTING)) {
			lifecycle_children_keep(
				h->pool.w[k].pid); /* the pool's, for the next run */
			continue;
		}
		if (h->pool.w[k].pid > 0 && !h->pool.w[k].exited) {
			int st;
			spawn_kill(h->pool.w[k].pid, SIGKILL);
			while (waitpid(h->pool.w[k].pid, &st, 0) < 0 && errno == EINTR)
				;
			/* Reaped: its pid may be another process's from now on, and the
			 * stand-in, still watching the sink, must not signal it. */
			h->pool.w[k].pid = -1;
		}
	}
	lifecycle_sweep();
	h->stats.elapsed = (double)(wait_now_ns() - h->t_start_ns) * 1e-9;
	ui_stop(h->view.ui);
	h->view.ui = NULL;
	failures_not_run_held(h);
	if (h->out.stuck)
		events_undelivered(h);
	else
		events_flush_held(h);
	/* A calling-thread sink: what waited for that thread reaches it now, or, when the
	 * run ends on the stand-in, never (not journaled: it runs again). */
	if (on_standin)
		events_drop_waiting(h);
	else
		events_deliver_waiting(h);
	count_not_run(h);

	struct gpud_error err = {{0}};
	/* What the run will exit with if the close succeeds, for a sink that asks. */
	struct gpud_run_end end = {.exit_status = exit_status(h),
				   .abort_reason = h->ctl.abort ? h->ctl.abort_msg : NULL};
	if (h->out.stuck)
		say_sink_not_closed("last call");
	else if (on_standin && h->out.calling_thread)
		fprintf(LOG_ERR, "gpud: the sink was not closed: it is called on the thread that "
				 "is still in the generator's last call\n");
	else if ((h->sink_ops->close || h->sink_ops->finish) &&
		 events_close_sink(h, &end, &err) != 0)
		host_abort(h, "the sink failed to close: %s",
			   err.message[0] ? err.message : "gpud_sink_close returned an error");
	if (!on_standin)
		standin_stop(h);
	if (h->flow.stuck)
		fprintf(LOG_ERR, "gpud: the generator's last call had not returned when the run "
				 "ended; it was not closed\n");
	else if (h->gen_ops->close)
		h->gen_ops->close(h->gen);

	/* Every task generated has its outcome and the generator is done: the journal says
	 * the run finished, so a --resume has nothing left to do. */
	bool complete = !h->ctl.abort && h->flow.done && !h->stats.not_run;
	resume_finish(h, complete);
	if (complete && h->claims)
		claims_finished(h->claims);
	stats_print(h, LOG_INFO);
	stages_note_results(h, LOG_INFO);
	capacity_note_oversized(h, LOG_INFO);
	if (h->resume.skipped)
		fprintf(LOG_INFO, "gpud: resumed: %llu tasks were already done\n",
			(unsigned long long)h->resume.skipped);
	resume_note_nothing_left(h, LOG_INFO);
	failures_close(h, LOG_INFO);
	int status = exit_status(h);
	metrics_stop(h, status);
	fill_result(h, status);
	if (h->opts->stats_json && stats_write_json(h, h->opts->stats_json, status) < 0)
		host_abort(h, "cannot write --stats-json %s: %s", h->opts->stats_json,
			   strerror(errno));
	if (h->ctl.abort && !h->out.open && h->out.open_ever && stdout_reader_gone()) {
		/* `gpud run ... | head`: like any filter whose reader left, we stop, and say
		 * in one line what that left undone. */
		fprintf(LOG_ERR,
			"gpud: stopped: the reader of standard output went away; %llu "
			"results were not written",
			(unsigned long long)h->out.lost);
		if (!h->flow.done)
			fprintf(LOG_ERR, ", tasks from %llu on were not generated",
				(unsigned long long)h->flow.next_id);
		fputc('\n', LOG_ERR);
		return status;
	}
	if (h->ctl.abort) {
		if (h->out.lost)
			fprintf(LOG_ERR, "gpud: aborted: %s; %llu results could not be written\n",
				h->ctl.abort_msg, (unsigned long long)h->out.lost);
		else
			fprintf(LOG_ERR, "gpud: aborted: %s\n", h->ctl.abort_msg);
		if (!h->flow.done && h->flow.total > (int64_t)h->flow.next_id)
			fprintf(LOG_ERR, "gpud: tasks %llu to %lld were not generated\n",
				(unsigned long long)h->flow.next_id, (long long)h->flow.total - 1);
		else if (!h->flow.done)
			fprintf(LOG_ERR, "gpud: tasks from %llu on were not generated\n",
				(unsigned long long)h->flow.next_id);
		if (status == RUN_EXIT_RESUMABLE)
			resume_hint(h->cfg);
		return status;
	}
	return status;
}

/* Set while the generator's and the sink's code may run in this process (the run's host,
 * alive in run_job's frame meanwhile). gpud itself never calls exit() then (it returns
 * from main; the stand-in uses _exit), so an exit() seen now is a plugin's: a C
 * generator or sink, or code they loaded (ctypes). It would end the run with the
 * plugin's status, 0 included, as if the run had succeeded. */
static struct host *volatile plugins_running;

static void exit_during_run(int status, void *arg)
{
	struct host *h = plugins_running;
	(void)arg;
	if (!h)
		return;
	plugins_running = NULL;
	fflush(NULL); /* what a sink wrote through stdio so far, as a normal exit would */
	fprintf(LOG_ERR,
		"gpud: aborted: a plugin called exit(%d) inside the gpud process (the "
		"generator, the sink or code they loaded): the run ended at once, its "
		"running tasks without an outcome and the sink not closed\n",
		status);
	if (h->journal.fd >= 0)
		resume_hint(h->cfg);
	_exit(3);
}

/* Arms (h) or disarms (NULL) exit_during_run. */
static void watch_plugin_exits(struct host *h)
{
	static bool registered;
	if (h && !registered)
		registered = on_exit(exit_during_run, NULL) == 0;
	plugins_running = h;
}

/* The generator and the sink opened (the sink resumed when it can tell what its output
 * holds), and a resumed run's done prefix skipped. 0; -1 when nothing was opened, 1 when
 * they were and must be closed (each said why). */
static int open_plugins(struct host *h, struct cfg *c)
{
	const struct gen_ops *gen = h->gen_ops;
	const struct sink_ops *sink = h->sink_ops;
	struct gpud_error err = {{0}};
	/* A failure to open is a job error: nothing ran. */
	if (gen->open(&c->generator.args, &h->gen, &err) != 0) {
		text_clean(err.message);
		say("generator %s: %s", c->generator.plugin,
		    err.message[0] ? err.message : "open failed");
		return -1;
	}
	if (gen->total)
		h->flow.total = gen->total(h->gen);
	int64_t job_total = h->flow.total; /* all ranks together: the ids' span */
	if (h->claims) {
		/* Dynamic shares: the count sizes the claims near the end; this rank's
		 * share is known only when the run ends. */
		if (h->flow.total >= 0)
			claims_set_total(h->claims, (uint64_t)h->flow.total);
		h->flow.total = -1;
	} else if (h->flow.total >= 0) { /* this rank's share of them */
		h->flow.total = (int64_t)ranks_share((uint64_t)h->flow.total, c->rank, c->ranks);
	}

	err.message[0] = '\0';
	int so = resume_sink_open(h, &c->sink.args, &err);
	if (so == 1)
		so = sink->open(&c->sink.args, &h->sink, &err);
	if (so != 0) {
		text_clean(err.message);
		say("sink %s: %s", c->sink.plugin, err.message[0] ? err.message : "open failed");
		if (gen->close)
			gen->close(h->gen);
		return -1;
	}
	h->out.open = true;
	h->out.open_ever = true;
	h->out.mask = sink->events ? sink->events(h->sink) : GPUD_EVENTS_ALL;
	h->out.calling_thread = sink->calling_thread;
	h->out.no_input = sink->no_input;
	/* Names are kept only when the generator gives them and the sink takes them. */
	h->out.names = sink->names && h->gen_ops && h->gen_ops->name;
	err.message[0] = '\0';
	struct gpud_job_info job = {.job_id = c->job_id, .rank = c->rank, .ranks = c->ranks};
	if (sink->job && sink->job(h->sink, &job, &err) != 0) {
		text_clean(err.message);
		say("sink %s: %s", c->sink.plugin,
		    err.message[0] ? err.message : "gpud_sink_job failed");
		return 1;
	}
	if (sink->tasks && sink->tasks(h->sink, job_total, &err) != 0) {
		text_clean(err.message);
		say("sink %s: %s", c->sink.plugin,
		    err.message[0] ? err.message : "gpud_sink_tasks failed");
		return 1;
	}
	if (resume_tell_sink(h, &err) < 0) {
		text_clean(err.message);
		say("sink %s: %s", c->sink.plugin,
		    err.message[0] ? err.message : "gpud_sink_resumed failed");
		return 1;
	}
	if (resume_skip_prefix(h, &err) < 0) {
		text_clean(err.message);
		say("generator %s: cannot skip the %llu tasks already done: %s",
		    c->generator.plugin, (unsigned long long)h->journal.low,
		    err.message[0] ? err.message : "gpud_generator_skip failed");
		return 1;
	}
	return 0;
}

/* A kept worker's figures count from this run's start: what its process did before
 * is taken off through its earlier processes' part (times_past, oom_splits_past), in
 * unsigned arithmetic: past + now = now - then. Its call_min and call_max stay its
 * process's. */
static void run_counts_from_now(struct host_worker *w)
{
	struct worker_times then, *p = &w->times_past;
	times_of_report(w->rep, &then);
	for (unsigned k = 0; k < PH_COUNT; k++)
		p->phase_ns[k] = 0 - then.phase_ns[k];
	p->wall_ns = 0 - then.wall_ns;
	for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++)
		p->calls[k] = 0 - then.calls[k];
	p->call_min = p->call_max = 0;
	p->items = 0 - then.items;
	p->cpu_ns = 0 - then.cpu_ns;
	p->main_cpu_ns = 0 - then.main_cpu_ns;
	p->user_cpu_ns = 0 - then.user_cpu_ns;
	w->oom_splits_past = 0 - (uint64_t)(w->rep ? atomic_load_explicit(&w->rep->oom_splits,
									  memory_order_relaxed)
						   : 0);
}

/* A warm pool's run takes its memory and its workers' slots: the workers still alive
 * keep their setup and their rings' positions; what a run counts starts again. */
static void pool_adopt(struct host *h, struct run_pool *p)
{
	free(h->pool.exe);
	free(h->pool.plugin);
	free(h->pool.bus_ids);
	h->pool = p->pool;
	h->pool.up = &run_up;
	h->pool.ever_ready = false;
	h->pool.corruptions = 0;
	p->pool = (struct host_pool){.w = NULL};
	h->shm = p->shm;
	unsigned slots = (unsigned)groups_count(h->cfg);
	memset(h->pool.restarts, 0, slots * sizeof *h->pool.restarts);
	memset(h->pool.retired, 0, slots * sizeof *h->pool.retired);
	for (unsigned k = 0; k < h->pool.n; k++) {
		struct host_worker *w = &h->pool.w[k];
		w->ok = w->failed = w->timeouts = 0;
		w->restarts = 0;
		w->end = END_NONE;
		w->busy_s = w->last_seconds = 0;
		w->log_fd = -1;
		w->held_still = w->free_restart = w->setup_timed_out = false;
		run_counts_from_now(w);
		w->ready_ns = 0;
		/* The next run's feed is open again (tell_drained closed it). */
		atomic_store_explicit(&w->feed->drained, 0, memory_order_relaxed);
	}
}

/* The workers' slots (one per GPU and slot; worker k gets seed base_seed + k), the task
 * table, the run's files, the held outcomes and the metrics. 0, or -1 (said why). */
static int setup_run(struct host *h, struct cfg *c)
{
	/* Restarts and retirement are counted per group of gpus_per_worker GPUs, then per
	 * CPU stage worker. */
	unsigned per[CFG_MAX_STAGES];
	struct run_pool *p = h->opts->pool;
	if (p && p->made) {
		pool_adopt(h, p);
		goto tasks;
	}
	h->pool.n_gpu_workers = (unsigned)(groups_count(c) * c->workers_per_gpu);
	unsigned staged = stagecfg_workers(c, per);
	h->pool.n = h->pool.n_gpu_workers + staged;
	h->pool.w = calloc(h->pool.n, sizeof *h->pool.w);
	h->pool.restarts = calloc(groups_count(c) + staged, sizeof *h->pool.restarts);
	h->pool.retired = calloc(groups_count(c) + staged, sizeof *h->pool.retired);
	if (!h->pool.w || !h->pool.restarts || !h->pool.retired) {
		say("out of memory for %u workers", h->pool.n);
		return -1;
	}
	for (unsigned k = 0; k < h->pool.n; k++) {
		h->pool.w[k].index = (int)k;
		h->pool.w[k].gpu_id = k < h->pool.n_gpu_workers
					      ? c->gpus[groups_first(c, k / c->workers_per_gpu)]
					      : -1;
		h->pool.w[k].log_fd = -1;
		h->pool.w[k].out_fd = -1;
		h->pool.w[k].pid = -1;
	}
	stages_assign(h);
	/* A stage's count the cores chose, when it is not every core gpud may use: said,
	 * with why, so that a count lower than the user expects is never silent. */
	for (unsigned s = 0; s < c->n_stages; s++) {
		char why[400];
		if (!c->stages[s].workers && per[s] != stagecfg_cores())
			fprintf(LOG_INFO, "gpud: stage %s: %u worker%s (%s)\n", c->stages[s].name,
				per[s], per[s] == 1 ? "" : "s",
				stagecfg_workers_why(c, s, why, sizeof why));
	}
	h->pool.spawner = p ? p->spawner : NULL;
tasks:
	if (tasks_init(h, stages_per_worker(h)) < 0) {
		say("out of memory for the task table");
		return -1;
	}
	files_open_run(h); /* said why if not; the run goes on */
	if (h->view.mode == UI_DASHBOARD && files_open_logs(h) < 0)
		h->view.mode = UI_PLAIN; /* said why; worker output then goes to standard error */
	/* Ordering only matters to a sink that receives outcomes. */
	if (c->ordered &&
	    (h->out.mask & (GPUD_EVENT_BIT(GPUD_TASK_OK) | GPUD_EVENT_BIT(GPUD_TASK_ERROR) |
			    GPUD_EVENT_BIT(GPUD_TASK_TIMEOUT))))
		h->out.held = calloc(c->queue_size, sizeof *h->out.held);
	h->t_start_ns = wait_now_ns();
	h->t_start_wall = stats_wall_now();
	h->cpu_start = stats_cpu_now();
	if (metrics_start(h) < 0) /* said why: a port asked for and not had */
		return -1;
	return 0;
}

/* The dashboard's terminal, when the caller names one. 0, or -1 (said why). */
static int open_tty(struct host *h, const struct run_opts *opts)
{
	if (h->view.mode != UI_DASHBOARD || !opts->ui_tty)
		return 0;
	h->view.fd = open(opts->ui_tty, O_WRONLY | O_NOCTTY | O_CLOEXEC);
	if (h->view.fd < 0) {
		say("cannot open %s for the dashboard: %s", opts->ui_tty, strerror(errno));
		return -1;
	}
	return 0;
}

/* A warm pool's worker at its run's start: true when its process lives on from the last
 * run (it keeps its setup); one that died meanwhile is reaped and its slot renewed, for a
 * new process (set up again). */
static bool pool_worker_alive(struct host *h, struct host_worker *w)
{
	if (w->pid > 0 && !w->exited) {
		int st;
		pid_t r = waitpid(w->pid, &st, WNOHANG);
		if (r == 0 && (w->state == HW_READY || w->state == HW_STARTING)) {
			if (w->state == HW_READY) {
				UI_SET(w->ready_ns,
				       wait_now_ns()); /* its busy fraction: this run's */
				run_up.ready(h, w);    /* its first window, as a fresh one's */
			}
			return true;
		}
		if (r == 0) { /* neither set up nor setting up: not kept */
			spawn_kill(w->pid, SIGKILL);
			while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
				;
		}
		fprintf(LOG_WARN, "gpud: worker %d had ended since the last run: started again\n",
			w->index);
		w->pid = -1;
	}
	if (w->rep && shm_renew_worker(h, w) < 0)
		return false; /* spawn_worker says it cannot start */
	return false;
}

/* The run proper: shared memory, the process-wide settings it needs (signals, the
 * child subreaper; put back after), the UI, every worker started, the loop; then the
 * rest of the run. Returns the exit status. */
static int run_loop(struct host *h)
{
	int subreaper = 0;
	prctl(PR_GET_CHILD_SUBREAPER, &subreaper);
	/* The caller's children (libgpud) are its own: the run neither reaps nor kills
	 * them. */
	lifecycle_children_note();
	if (!h->shm.hdr && shm_create(h) < 0) {
		host_abort(h, "cannot create the shared memory");
	} else {
		host_install_signals(h, h->opts->keep_signals);
		/* Whatever a worker starts and leaves behind becomes our child, so it can
		 * be found and ended with the run. */
		prctl(PR_SET_CHILD_SUBREAPER, 1);
		h->view.ui = ui_start(h);
		h->startup.spawn_from_ns = wait_now_ns();
		for (unsigned k = 0; k < h->pool.n; k++) {
			if (h->opts->pool && pool_worker_alive(h, &h->pool.w[k]))
				continue;
			int e = spawn_worker(h, &h->pool.w[k]);
			if (e < 0) {
				fprintf(LOG_ERR, "gpud: cannot start worker %u (%s): %s\n", k,
					h->pool.exe, strerror(-e));
				UI_SET(h->pool.w[k].state, HW_GONE);
			}
		}
		h->startup.spawn_to_ns = wait_now_ns();
		dispatch(h, finish_run);
	}
	int rc = finish_run(h);
	host_restore_signals();
	prctl(PR_SET_CHILD_SUBREAPER, subreaper);
	lifecycle_children_forget();
	return rc;
}

struct run_pool *run_pool_new(void)
{
	struct run_pool *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->shm = (struct host_shm){.fd = -1, .ro_fd = -1, .bell_fd = -1, .pipe = {-1, -1}};
	if (!(p->spawner = spawn_thread_start())) {
		free(p);
		return NULL;
	}
	return p;
}

void run_pool_free(struct run_pool *p)
{
	if (!p)
		return;
	struct host h = HOST_INIT(NULL);
	h.shm = p->shm;
	h.pool = p->pool;
	/* Each worker told to stop: it runs its cleanup and exits; the cleanup's bound, then
	 * killed with whatever it left in its process group. */
	for (unsigned k = 0; k < h.pool.n; k++) {
		struct host_worker *w = &h.pool.w[k];
		if (w->pid > 0 && !w->exited) {
			atomic_store_explicit(&w->feed->stop, 1, memory_order_release);
			wait_ring(shm_worker_bell(w));
		}
	}
	uint64_t until = wait_now_ns() + (uint64_t)(p->cleanup_s > 0 ? p->cleanup_s * 1e9 : 30e9);
	for (unsigned k = 0; k < h.pool.n; k++) {
		struct host_worker *w = &h.pool.w[k];
		if (w->pid <= 0 || w->exited)
			continue;
		int st;
		pid_t r;
		while ((r = waitpid(w->pid, &st, WNOHANG)) == 0 && wait_now_ns() < until)
			nanosleep(&(struct timespec){0, 5000000}, NULL);
		if (r == w->pid) {
			spawn_kill(w->pid, SIGKILL); /* what it left behind in its group */
			continue;
		}
		if (r == 0)
			fprintf(LOG_WARN,
				"gpud: worker %d's cleanup took longer than cleanup_timeout: killed\n",
				w->index);
		spawn_kill(w->pid, SIGKILL);
		while (waitpid(w->pid, &st, 0) < 0 && errno == EINTR)
			;
	}
	spawn_thread_stop(p->spawner); /* every worker reaped: nothing it would end */
	shm_destroy(&h);               /* and each worker's out memfd */
	free(h.pool.w);
	free(h.pool.restarts);
	free(h.pool.retired);
	free(h.pool.bus_ids);
	free(h.pool.exe);
	free(h.pool.plugin);
	free(p->sig);
	free(p->worker_keys);
	free(p->gpus);
	free(p);
}

int run_job(struct cfg *c, const struct run_opts *opts)
{
	struct host h = HOST_INIT(c);
	h.pool.up = &run_up;
	h.startup.enter_ns = wait_now_ns();
	int rc = 2;

	h.opts = opts;
	h.ctl.keep = opts->pool != NULL;
	if (prepare(&h, c, opts) < 0)
		goto out;
	if (c->n_gpus == 0) {
		say("%s: no GPU to run on", c->path);
		goto out;
	}
	if (opts->pool && pool_admit(&h, c, opts->pool) < 0)
		goto out;
	if (capacity_check(&h, c, true, LOG_ERR) < 0)
		goto out; /* before the journal, the sink or any worker */
	/* Dynamic shares, with one rank too: a resume of a run of several may have fewer
	 * (claims.h). */
	if (c->shares == CFG_SHARES_DYNAMIC) {
		char why[1200];
		struct claims_job cj = {.dir = c->claims,
					.journal = c->journal_off ? NULL : c->journal,
					.stream_id = c->stream_id};
		h.claims = calloc(1, sizeof *h.claims);
		if (!h.claims ||
		    claims_open(h.claims, &cj, c->rank, c->ranks,
				opts->resume ? CLAIMS_RESUME : CLAIMS_FRESH, why, sizeof why) < 0) {
			say("%s: %s", c->path, h.claims ? why : "out of memory");
			free(h.claims);
			h.claims = NULL;
			goto out;
		}
		/* Under mpirun (its environment gave the rank), claims start where a counter
		 * in rank 0's MPI window says, when libmpi loads (cluster/mpi.h). The gpud
		 * command only: a program using libgpud may have MPI plans of its own. */
		char note[600];
		if (!strcmp(c->rank_source, "Open MPI") && !opts->gen_ops && !opts->sink_ops &&
		    claims_use_mpi(h.claims, note, sizeof note, why, sizeof why) < 0) {
			say("%s: %s", c->path, why);
			goto out;
		}
	}
	int jr = resume_open(&h, (struct resume_flags){.resume = opts->resume,
						       .retry_failed = opts->retry_failed,
						       .force = opts->force});
	if (jr != 0) {
		rc = jr == 1 ? 0 : 2; /* already finished, or said why not */
		goto out;
	}
	watch_plugin_exits(&h);
	int op = open_plugins(&h, c);
	if (op < 0)
		goto out;
	h.view.mode = opts->ui;
	pthread_mutex_init(&h.view.notes.lock, NULL);
	if (op > 0 || setup_run(&h, c) < 0 || open_tty(&h, opts) < 0)
		goto close_plugins;
	if (h.claims) {
		char why[1200];
		if (claims_live(h.claims, c->lease, h.journal.fd >= 0 ? h.journal.path : NULL, why,
				sizeof why) < 0) {
			say("%s: %s", c->path, why);
			goto close_plugins;
		}
	}
	rc = run_loop(&h);
	/* Dynamic shares, this rank's share finished: the others' too, a lost one's by
	 * this process (the gpud command only: a child resumes that rank's share, which
	 * needs its journal). */
	if (h.claims && (rc == 0 || rc == 1) && h.journal.fd >= 0 && !opts->gen_ops &&
	    !opts->sink_ops)
		rc = claims_sweep(h.claims, rc);
	goto out;

close_plugins : /* nothing ran */
{
	struct gpud_error err = {{0}};
	if (h.sink_ops->finish) {
		struct gpud_run_end end = {.exit_status = rc,
					   .abort_reason = "the run could not start"};
		h.sink_ops->finish(h.sink, &h.stats, &end, &err);
	} else if (h.sink_ops->close) {
		h.sink_ops->close(h.sink, &h.stats, &err);
	}
	if (h.gen_ops->close)
		h.gen_ops->close(h.gen);
}
out:
	release(&h);
	watch_plugin_exits(NULL);
	return rc;
}
