/* SPDX-License-Identifier: MIT */
/*
 * libgpud, API version 1.4: gpud's host as a library. A program builds a job (a job
 * file, key/value pairs, or both), may supply its own generator and sink as callbacks
 * in its own process, runs the job to its end on the calling thread, and reads the
 * exit status and the final stats. The `gpud` command is a client of this API.
 *
 * Build and link with:
 *   cc my_program.c $(pkg-config --cflags --libs libgpud) -o my_program
 *
 * Everything `gpud run` does is done here the same way: worker processes (one per GPU
 * slot, the worker plugin loaded in them, never in the caller), shared-memory rings,
 * isolation, timeouts, retries, the journal and resuming, ranks, the dashboard, metrics
 * and the run lock. docs/library.md says it in prose.
 *
 * Ownership: a struct gpud_job is the caller's from gpud_job_new to gpud_job_free.
 * Strings passed in are copied before the call returns; strings and structs returned
 * are the job's, valid until the next call on the same job or gpud_job_free. Every
 * pointer gpud passes to a callback is valid only during the call (as for plugins).
 *
 * Threads: a job is used from one thread at a time, except gpud_job_stop, which may be
 * called from any thread and from a signal handler. gpud_job_run blocks: the calling
 * thread drives the run (it calls the generator and the sink). Only one run at a time
 * per process (gpud_job_run answers -1 while another is in progress): the signal state
 * it uses is process-wide. See "What a run does to the process" below.
 *
 * Versions: GPUD_API_MAJOR changes when a program built against an older header would
 * break (it is the library's soname version); GPUD_API_MINOR when something is added.
 * Structs the caller fills begin with `size` (set it to sizeof the struct): a newer
 * library reads only the fields an older caller's struct has, and takes defaults for
 * the rest.
 */
#ifndef GPUD_GPUD_H
#define GPUD_GPUD_H

#include <stddef.h>
#include <stdint.h>

#include <gpud/plugin.h>

#ifdef __cplusplus
extern "C" {
#endif

/** (API 1.3) The return conventions, one per call family, each value named:
 *  - gpud_job_run, gpud_job_check, gpud_job_status, gpud_plugins_list,
 *    gpud_arrays_merge, gpud_stats_merge (and the command forms gpud_plugins,
 *    gpud_merge, gpud_merge_arrays): an exit status of `gpud` (below; check, status, plugins and
 *    merge answer GPUD_EXIT_OK or GPUD_EXIT_REFUSED, arrays_merge also
 *    GPUD_EXIT_FAILED), or GPUD_MISUSE;
 *  - what a call gives the caller to free (gpud_plugins_list, gpud_arrays_merge,
 *    gpud_stats_merge): a
 *    struct beginning with `size`, freed by the call's own gpud_*_free (API 1.4);
 *  - gpud_job_load, gpud_job_set, gpud_job_set_generator, gpud_job_set_sink: 0, or
 *    GPUD_MISUSE with gpud_job_error();
 *  - the callbacks the caller gives (generator, sink): plugin.h's conventions (0, 1 for
 *    "one more"/"cannot tell" where a call says so, -1 with err).
 *  - getters: a pointer, NULL when there is nothing yet. */
enum gpud_exit {
	GPUD_MISUSE = -1,      /* the API misused (a NULL job, a second run...): gpud_job_error() */
	GPUD_EXIT_OK = 0,      /* every task succeeded (check: a run would start) */
	GPUD_EXIT_FAILED = 1,  /* some tasks failed or timed out */
	GPUD_EXIT_REFUSED = 2, /* a job, plugin or usage error, its lock held elsewhere, an input
				  changed: nothing ran */
	GPUD_EXIT_ABORTED = 3, /* no worker could be set up, the generator or the sink failed, or
				  stopped without a journal */
	GPUD_EXIT_STOPPED = 4, /* stopped (gpud_job_stop, a signal) with a journal: a new job with
				  GPUD_RUN_RESUME finishes it */
};

/** The API this header describes. */
#define GPUD_API_MAJOR 1
#define GPUD_API_MINOR 6

/** Marks the library's exported functions (default visibility; everything else in
 *  libgpud is hidden). */
#if defined(GPUD_BUILDING_LIBRARY) && (defined(__GNUC__) || defined(__clang__))
#define GPUD_API __attribute__((visibility("default")))
#else
#define GPUD_API
#endif

/** The library's API version as (major << 16) | minor: a program can check at run time
 *  that the libgpud it was loaded with is GPUD_API_MAJOR and at least its minor. */
GPUD_API unsigned gpud_api_version(void);
/** The gpud release, "0.1.0" (static storage). */
GPUD_API const char *gpud_version(void);

/** A job: its configuration, its optional callbacks, then one run and its results.
 *  Opaque; the typedef is a convenience (and reads well from C++). */
typedef struct gpud_job gpud_job;

/** A new, empty job, or NULL when out of memory. */
GPUD_API gpud_job *gpud_job_new(void);

/** Frees the job and everything it owns (its error text, stats, stats JSON). NULL is
 *  ignored. Not while gpud_job_run runs on it. */
GPUD_API void gpud_job_free(gpud_job *job);

/** Takes the job file at `path` (as `gpud run PATH`). Relative paths in it are
 *  resolved from its folder. Keys set with gpud_job_set apply on top of it, whatever
 *  the order of the calls (as `--set` does). Called again, the new path replaces the
 *  old one. Returns 0, or -1 with gpud_job_error() set: a file that cannot be read or a
 *  line that is not valid ("FILE:LINE: what"). What the job as a whole lacks (a required
 *  key) is said by gpud_job_check or gpud_job_run, since keys may still follow. */
GPUD_API int gpud_job_load(gpud_job *job, const char *path);

/** Sets one key, as `--set SECTION.KEY=VALUE` does: `section_key` is "SECTION.KEY"
 *  (job.gpus, worker.plugin, generator.path, ui.refresh_rate...), relative paths in
 *  `value` are resolved from the current folder, a later set of the same key wins.
 *  value NULL: section_key holds the whole "SECTION.KEY=VALUE". A job built only from
 *  keys needs at least job.gpus and worker.plugin (and generator.plugin unless a
 *  generator callback is set); it has no journal unless job.journal is set. Returns 0,
 *  or -1 with gpud_job_error() naming the key and what is wrong with it ("--set
 *  job.queue_size=0: ..."). Each call checks its key on its own (its cost does not grow
 *  with the job), so a value whose fault shows only with the whole job is said by
 *  gpud_job_check or gpud_job_run. */
GPUD_API int gpud_job_set(gpud_job *job, const char *section_key, const char *value);

/** The error of the last call on this job: one line naming what and where ("job.ini:7:
 *  ...", "--set KEY=VALUE: ..."), the text `gpud` prints; "" when that call succeeded
 *  (every call on the job but gpud_job_stop and the getters clears it first). Never NULL (for a
 *  NULL job: a static string saying so). Owned by the job. */
GPUD_API const char *gpud_job_error(const gpud_job *job);

/** An in-process generator: the generator plugin's contract (plugin.h), called with the
 *  caller's `ctx` instead of a plugin's state. There is no open: the callbacks are
 *  live from gpud_job_run's start. */
struct gpud_generator_ops {
	size_t size; /* sizeof(struct gpud_generator_ops) */
	/** Required. Writes the next task's bytes into `item` (at most item->capacity =
	 *  max_task_bytes, straight into shared memory), sets item->size and returns 1;
	 *  0 at the end; -1 with err filled: the generator failed (exit status 3 with the
	 *  message, what it yielded before still runs). */
	int (*next)(void *ctx, struct gpud_buf *item, struct gpud_error *err);
	/** Optional. How many tasks it will yield, -1 unknown. */
	int64_t (*total)(void *ctx);
	/** Optional. Skip the next n items (a resume, or another rank's share): 0, or -1
	 *  with err. Absent: gpud generates them and drops them. */
	int (*skip)(void *ctx, uint64_t n, struct gpud_error *err);
	/** Optional. Called once at the end of a run that started (not when a call was
	 *  still stuck when the run ended). */
	void (*close)(void *ctx);
	/** Optional (API 1.1). Called from another thread (the stand-in) when the run must
	 *  end while next() is blocked in its call: make that call return soon (0, or -1;
	 *  what it returns is not run). gpud waits up to GPUD_INTERRUPT_WAIT_S for it, then
	 *  ends the run on the calling thread as usual: gpud_job_run returns, the sink's
	 *  close and this close are called there. A call still blocked after that ends the
	 *  process as without this entry (see "What a run does to the process"). */
	void (*interrupt)(void *ctx);
};

/** How long gpud waits for an interrupted generator call to return (seconds). */
#define GPUD_INTERRUPT_WAIT_S 5

/** gpud_sink_ops.flags */
/** The sink is called on gpud_job_run's calling thread only, never on the stand-in:
 *  events that come while a generator call blocks that thread wait in gpud (copied,
 *  in order) and reach the sink after the call returns (at the next pass of the loop,
 *  before any later event). An outcome is journaled only once the sink took it, so
 *  one that never reached the sink (the run ended while the generator call was still
 *  blocked) is counted as not run and runs again with GPUD_RUN_RESUME; the sink's close
 *  is then not called either. */
#define GPUD_SINK_CALLING_THREAD (1u << 0)
/** (API 1.2) The sink does not read an outcome's or a start's input: its events carry
 *  none (input NULL, input_size 0), and an event that must wait (above, or for ordered
 *  delivery) is held without a copy of it (a task of a whole batch of images is tens of
 *  MB: copying it for every outcome that waits cost the calling process as much CPU as
 *  writing it into the ring). */
#define GPUD_SINK_NO_INPUT (1u << 1)
/** (API 1.5) The sink reads gpud_event.name (plugin.h, ABI 1.9: the name the generator
 *  gave the task, a sample's key): its task events carry it. Without the flag, name
 *  stays NULL (a sink built before it knew the field as reserved[0]). */
#define GPUD_SINK_NAMES (1u << 2)

/** An in-process sink: the sink plugin's contract (plugin.h), with the caller's ctx. */
struct gpud_sink_ops {
	size_t size; /* sizeof(struct gpud_sink_ops) */
	/** Required. One event (every pointer valid during the call). 0, or -1 with err:
	 *  the sink failed (exit status 3 with the message). */
	int (*event)(void *ctx, const struct gpud_event *ev, struct gpud_error *err);
	/** Optional. Called once at the end with the final stats. 0, or -1 with err (exit
	 *  status 3). */
	int (*close)(void *ctx, const struct gpud_stats *stats, struct gpud_error *err);
	/** Optional. The event kinds wanted, a mask of GPUD_EVENT_BIT(kind); absent: all. */
	uint32_t (*events)(void *ctx);
	/** Optional. On a resume (GPUD_RUN_RESUME), before any event: calls done(done_ctx,
	 *  task_id, status) for every task the caller's output already holds (status 0 ok,
	 *  1 error, 2 timeout); those do not run again. Returns 0; 1 when it cannot tell
	 *  (the journal decides); -1 with err. Absent: the journal decides. */
	int (*resume)(void *ctx, void (*done)(void *done_ctx, uint64_t task_id, int status),
		      void *done_ctx, struct gpud_error *err);
	/** Optional (API 1.1). GPUD_SINK_* flags; 0: the sink may also be called on the
	 *  stand-in thread. */
	unsigned flags;
	/** Optional (API 1.3; the sink plugin's gpud_sink_finish, plugin.h). Called instead
	 *  of close when set: once at the end with the final stats and how the run ends
	 *  (end->exit_status, end->abort_reason). 0, or -1 with err (exit status 3). */
	int (*finish)(void *ctx, const struct gpud_stats *stats, const struct gpud_run_end *end,
		      struct gpud_error *err);
	/** Optional (API 1.3; gpud_sink_resumed). On a resume, once, before any event (after
	 *  resume): the tasks earlier runs finished (info->done as (first id, count) pairs,
	 *  info->failed the ids among them that failed), whose slots a sink writing by task
	 *  id keeps. Not called on a fresh run. 0, or -1 with err (exit status 2, nothing
	 *  runs). */
	int (*resumed)(void *ctx, const struct gpud_resume_info *info, struct gpud_error *err);
	/** Optional (API 1.3; gpud_sink_tasks). Once, before resumed and any event: how many
	 *  tasks the generator says the job has (all ranks together), -1 when it does not
	 *  say. 0, or -1 with err (exit status 2, nothing runs). */
	int (*tasks)(void *ctx, int64_t total, struct gpud_error *err);
};

/** Uses `ops` with `ctx` as the job's generator instead of a [generator] plugin (the
 *  job's [generator] keys are then not used). ops is copied (its first ops->size
 *  bytes); ctx stays the caller's and must live until gpud_job_run returns. NULL ops:
 *  back to the plugin the job names. 0, or -1 with gpud_job_error() (no next, a size
 *  too small, a job already run). */
GPUD_API int gpud_job_set_generator(gpud_job *job, const struct gpud_generator_ops *ops, void *ctx);
/** The same for the sink, instead of the [sink] plugin. */
GPUD_API int gpud_job_set_sink(gpud_job *job, const struct gpud_sink_ops *ops, void *ctx);

/** What the run shows while it runs. */
enum gpud_ui {
	GPUD_UI_OFF = 0,   /* nothing but errors on standard error */
	GPUD_UI_PLAIN,     /* a progress line per [ui] plain_interval, failures as they happen,
			      on standard error */
	GPUD_UI_DASHBOARD, /* the live dashboard (workers' output goes to log files) */
};

/** gpud_run_options.flags */
#define GPUD_RUN_RESUME (1u << 0)       /* --resume: finish the run the journal describes */
#define GPUD_RUN_RETRY_FAILED (1u << 1) /* --retry-failed (implies GPUD_RUN_RESUME) */
/* --force: resume a journal another job wrote; without GPUD_RUN_RESUME, start over
 * although this job's journal holds outcomes and a sink file holds its output (else
 * refused: exit 2) */
#define GPUD_RUN_FORCE (1u << 2)
/** Leave SIGINT, SIGTERM, SIGHUP, SIGTSTP, SIGCONT, SIGPIPE and SIGXFSZ alone: the caller stops
 *  the run with gpud_job_stop (from its own handler, say). SIGCHLD is still gpud's for
 *  the run: it is how a worker's death is noticed. */
#define GPUD_RUN_KEEP_SIGNALS (1u << 3)
/** gpud_job_check only (`gpud check --import`): the python sections' code is imported in
 *  a helper process of the job's Python, and the classes, methods and keywords the job
 *  names are checked. */
#define GPUD_CHECK_IMPORT (1u << 4)

/** gpud_run_options.log levels (API 1.3). */
enum gpud_log_level {
	GPUD_LOG_ERROR = 0, /* the run, check or status cannot go on as asked (a bad key, a
			       setup that failed, an abort) */
	GPUD_LOG_WARN = 1,  /* something the operator should know: a worker died or was
			       restarted, a GPU retired, a task failed (plain mode) */
	GPUD_LOG_INFO = 2,  /* progress lines, the final summary, status and check notes */
};

/** How to run. All zero (or a NULL pointer) is a plain run with no UI. */
struct gpud_run_options {
	size_t size;            /* sizeof(struct gpud_run_options) */
	enum gpud_ui ui;        /* GPUD_UI_OFF by default */
	const char *tty;        /* GPUD_UI_DASHBOARD: the terminal to draw on (a path, opened
				   for writing); NULL: standard error */
	unsigned flags;         /* GPUD_RUN_* */
	const char *rank;       /* "K/N": this process is rank K of N (--rank); NULL: the job's
				   rank/ranks, else from Slurm, Open MPI or PMI, else 0 of 1 */
	const char *stats_json; /* also write the final stats JSON to this file, or NULL */
	/** (API 1.3) Optional. Every message the engine would write to standard error
	 *  during gpud_job_run, gpud_job_check or gpud_job_status (errors, notes, plain
	 *  progress, the summary) is handed here instead, one line per call: `message` is
	 *  the line without "gpud: " and without a newline (valid during the call), `level`
	 *  a GPUD_LOG_* value. NULL: standard error, as `gpud` writes it. Called from any
	 *  engine thread (the calling thread, the stand-in, the UI thread, the metrics
	 *  thread), never twice at once (gpud holds a lock around each call): it must
	 *  return soon and must not call libgpud (gpud_job_stop excepted). The dashboard
	 *  (GPUD_UI_DASHBOARD) still draws on its terminal, and a worker process's own
	 *  output (the worker plugin's) still goes to the standard error it inherited. */
	void (*log)(void *log_data, int level, const char *message);
	void *log_data; /* passed to log */
};

/** Runs the job to its end on the calling thread (--ui, --resume... as `options`;
 *  NULL: the defaults). Returns the exit status of `gpud run`:
 *    0 every task succeeded; 1 some failed or timed out; 2 a job, plugin or usage error,
 *    another run of the job alive, or an input changed since the journaled run (nothing
 *    ran); 3 aborted (no worker could be set up, the generator or the sink failed, or
 *    stopped without a journal); 4 stopped (gpud_job_stop, a signal) with a journal: a
 *    new job with GPUD_RUN_RESUME finishes it.
 *  -1 on API misuse, with gpud_job_error(): a NULL job, a job already run (one run per
 *  job: a resume is a new job), another run in progress in this process. For status 3,
 *  and for a status 2 found before the run (the job's keys, its rank, its outputs,
 *  another run holding its lock), gpud_job_error() holds the reason; every reason is
 *  also on standard error (or through options->log). */
GPUD_API int gpud_job_run(gpud_job *job, const struct gpud_run_options *options);

/** A warm pool (API 1.6): workers kept started and set up between runs. Opaque. */
typedef struct gpud_pool gpud_pool;

/** An empty pool (its first run starts its workers), with a thread of its own that starts
 *  them (a worker ends with the thread that started it); NULL when out of memory or
 *  threads. */
GPUD_API gpud_pool *gpud_pool_open(void);

/** gpud_job_run on the pool's workers: the first run starts them (and their setup) as
 *  gpud_job_run does; a run that ends with every task's outcome delivered (ok, failed,
 *  stopped or aborted) leaves them started, set up and idle for the next, with their
 *  rings empty. A later run reuses them: no new process, no second setup; a worker that
 *  died between runs is started (and set up) again at the run's start. Each run is the
 *  job's own: its generator and sink (or callbacks), journal, resume, run folder,
 *  stats and exactly-once accounting. What the workers were started with must stay
 *  the same (the worker plugin and its keys, the GPUs, workers_per_gpu,
 *  gpus_per_worker, queue_size, max_task_bytes, max_result_bytes, batch_size,
 *  batch_wait_ms, max_in_flight, task_timeout, base_seed, python): another value
 *  is refused (status 2, gpud_job_error naming the key, the pool's value and the
 *  run's), as are [stage.*] sections. A run whose workers were killed (a second
 *  gpud_job_stop, a timeout, a crash) leaves those slots empty: the next run starts
 *  them again. Returns what gpud_job_run returns; -1 also for a NULL pool. */
GPUD_API int gpud_pool_run(gpud_pool *pool, gpud_job *job, const struct gpud_run_options *options);

/** Closes the pool: each worker is told to stop, runs its cleanup (up to the last run's
 *  cleanup_timeout, then killed) and is waited for; the shared memory is freed. Not
 *  while a run of the pool is in progress. NULL is ignored. */
GPUD_API void gpud_pool_close(gpud_pool *pool);

/** Stops the job's run as SIGTERM does: the first call lets the running tasks finish
 *  (up to [job] drain_timeout) and starts nothing new (exit status 4 with a journal,
 *  3 without); a second stops every worker at once. From any thread, and
 *  async-signal-safe. Before the run starts, the run stops as soon as it starts; after
 *  it ended, nothing. NULL is ignored. */
GPUD_API void gpud_job_stop(gpud_job *job);

/** After gpud_job_run: the final figures (as given to the sink's close), or NULL when
 *  the job has not run (or stopped before any worker started). Owned by the job. */
GPUD_API const struct gpud_stats *gpud_job_stats(const gpud_job *job);
/** After gpud_job_run: the final stats as the JSON `--stats-json` writes (one object:
 *  counts, times, per worker and per GPU), or NULL as for gpud_job_stats. Owned by the
 *  job. start_time and end_time are the run's on the wall clock (seconds since the
 *  epoch, to the millisecond); host_cpu_seconds is this process's CPU time during the
 *  run (every thread's: the callbacks' included, the workers' not). */
GPUD_API const char *gpud_job_stats_json(const gpud_job *job);

/** `gpud check`: validates the job, loads every plugin and checks their keys, runs no
 *  task. What it found is kept in the job for gpud_job_check_report (API 1.3: it is no
 *  longer printed; the `gpud` command prints the report's text); errors go to
 *  gpud_job_error() and to standard error (or options->log). GPUD_EXIT_OK when a run
 *  would start, GPUD_EXIT_REFUSED otherwise; GPUD_MISUSE on misuse. options: rank,
 *  stats_json, log and the GPUD_CHECK_IMPORT flag are read (NULL: none). May be called
 *  any number of times, before a run. */
GPUD_API int gpud_job_check(gpud_job *job, const struct gpud_run_options *options);

/** (API 1.3) What the last gpud_job_check on a job found. Owned by the job, valid until
 *  the next call on it. */
struct gpud_check_report {
	size_t size;              /* sizeof(struct gpud_check_report) of the library */
	int ok;                   /* 1: a run would start; 0: it would not (error says why) */
	const char *text;         /* what `gpud check` prints on standard output: the summary
				     line, stages, ranks, GPUs, shared memory and notes ("" when
				     not ok) */
	const char *error;        /* the reason when not ok (gpud_job_error's), else "" */
	size_t n_gpus;            /* GPUs (or GPU groups' members) the job names */
	unsigned workers_per_gpu; /* worker processes per GPU (per group) */
	unsigned rank, ranks;     /* this process's rank of ranks (0 of 1 alone) */
	/* (API 1.5) The shared memory the run would map, in bytes, as the text's
	 * "shared memory:" lines say it (0 when not ok): in all (the run memfd, a result
	 * memfd per worker, a bell page); the run memfd (header, feeds, config, every
	 * worker's task ring); each worker's result memfd (its report block and result
	 * ring); each worker's task ring and result ring; and the workers, every stage's and
	 * the GPU workers. */
	uint64_t shm_total, shm_run_memfd, shm_result_memfd, shm_task_ring, shm_result_ring;
	unsigned shm_workers;
};
/** After gpud_job_check: its report, or NULL when the job was not checked (or the
 *  check was refused as misuse). */
GPUD_API const struct gpud_check_report *gpud_job_check_report(const gpud_job *job);
/** `gpud status`: how far the run its journal describes got, kept in the job for
 *  gpud_job_status_report (API 1.3: no longer printed; the `gpud` command prints the
 *  report's text). GPUD_EXIT_OK, GPUD_EXIT_REFUSED without a journal to read;
 *  GPUD_MISUSE on misuse. options as for gpud_job_check. */
GPUD_API int gpud_job_status(gpud_job *job, const struct gpud_run_options *options);

/** (API 1.3) What the last gpud_job_status on a job found. Owned by the job, valid until
 *  the next call on it. */
struct gpud_status_report {
	size_t size;       /* sizeof(struct gpud_status_report) of the library */
	int ok;            /* 1: told (text); 0: nothing to tell (error says why) */
	const char *text;  /* what `gpud status` prints on standard output ("" when not ok) */
	const char *error; /* the reason when not ok, else "" */
	int journal;       /* 1: the figures below are a journal's; 0 (dynamic shares: each
			      rank's claims are in text; or not ok): they are 0 */
	uint64_t done;     /* tasks with an outcome */
	uint64_t failed;   /* of them, those that failed or timed out */
	uint64_t low;      /* every task below this id has its outcome */
	int finished;      /* 1: the run ended (a resume runs nothing) */
	int changed;       /* 1: an input or the job changed since: a resume is refused
			      without GPUD_RUN_FORCE */
};
/** After gpud_job_status: its report, or NULL when it was not called (or refused as
 *  misuse). */
GPUD_API const struct gpud_status_report *gpud_job_status_report(const gpud_job *job);

/** (API 1.4) One plugin `gpud plugins` lists. Every string is the list's (never NULL). */
struct gpud_plugin_entry {
	const char *dir;          /* the folder it was found in */
	const char *origin;       /* "GPUD_PLUGIN_PATH" or "built-in" */
	const char *file;         /* its file name, <kind>-<NAME>.so */
	const char *kind;         /* the kind the plugin says ("worker", "generator", "sink");
				     "?" when it says none or is broken */
	const char *name;         /* the NAME a job file uses: the file's */
	const char *version;      /* the plugin's version, "?" when it says none */
	const char *description;  /* the plugin's one line, "" when none */
	const char *calls_itself; /* the name the plugin gives itself where it differs from
				     name, else "" */
	int broken;               /* 1: it could not be loaded and described (error says why) */
	const char *error;        /* why it is broken, else "" */
	int kind_differs;         /* 1: its file name says another kind than the plugin does:
				     a job cannot find it by name */
};

/** (API 1.4) A folder `gpud plugins` looked in, in the order looked. */
struct gpud_plugin_dir {
	const char *path;
	const char *origin; /* "GPUD_PLUGIN_PATH" or "built-in" */
	int readable;       /* 0: it could not be read (and lists nothing) */
	size_t first;       /* its plugins are plugins[first .. first + count) */
	size_t count;
};

/** (API 1.4) What gpud_plugins_list found. The caller's, until gpud_plugins_free. */
struct gpud_plugin_list {
	size_t size;       /* sizeof(struct gpud_plugin_list) of the library */
	int ok;            /* 1: listed; 0: nothing could be listed (error says why) */
	const char *text;  /* what `gpud plugins` prints on standard output ("" when not ok) */
	const char *error; /* the reason when not ok, else "" */
	size_t n_dirs;
	const struct gpud_plugin_dir *dirs;
	size_t n_plugins;
	const struct gpud_plugin_entry *plugins; /* by folder, then by file name */
	const char *python; /* a python plugin listed: the Python a job without [job] python
			       runs it on (or why there is none); else "" */
};

/** (API 1.4) `gpud plugins` as data: the plugins found by name (GPUD_PLUGIN_PATH's
 *  folders, then the built-in one), each loaded in a short-lived gpud-worker to be
 *  described. *list gets a list to read and free with gpud_plugins_free, also when not
 *  ok (NULL only out of memory). Prints nothing: messages go to options->log (the only
 *  field read; NULL options: standard error). GPUD_EXIT_OK, GPUD_EXIT_REFUSED (no
 *  gpud-worker to describe them with); GPUD_MISUSE when list is NULL or another call
 *  runs in this process. */
GPUD_API int gpud_plugins_list(const struct gpud_run_options *options,
			       struct gpud_plugin_list **list);
/** Frees what gpud_plugins_list gave. NULL is ignored. */
GPUD_API void gpud_plugins_free(struct gpud_plugin_list *list);

/** (API 1.4) What gpud_arrays_merge did. The caller's, until gpud_arrays_merge_free. */
struct gpud_arrays_merged {
	size_t size;        /* sizeof(struct gpud_arrays_merged) of the library */
	int ok;             /* 1: OUT was written (some rows may have failed); 0: refused,
			       nothing written (error says why) */
	const char *error;  /* the reason when not ok (the line also logged), else "" */
	const char *format; /* the shards' format, "npy" or "hdf5"; "" when not known */
	size_t shards;      /* shards joined (when ok) */
	uint64_t rows;      /* rows in OUT (when ok) */
	uint64_t failed;    /* of them, tasks that failed or timed out: their rows are zero,
			       marked 2 or 3 in OUT's done record (OUT.done; hdf5: NAME_done) */
};

/** (API 1.4) `gpud merge-arrays` as data: the ranks' shards of an `npy` or `hdf5` sink
 *  (each with its done record) joined into `out` by task id (docs/cluster.md).
 *  `dataset`: the hdf5 dataset (NULL: "data"). Messages (a refusal's reason, the
 *  summary line at GPUD_LOG_INFO) go to options->log (the only field read; NULL
 *  options: standard error, as `gpud merge-arrays` writes them). *result gets the
 *  figures, to free with gpud_arrays_merge_free, also when refused (NULL only out of
 *  memory). GPUD_EXIT_OK every row ok, GPUD_EXIT_FAILED merged with failed rows,
 *  GPUD_EXIT_REFUSED refused (a task id in two shards or in none, shards that differ,
 *  a shard without its done record, no shard: nothing written); GPUD_MISUSE when
 *  result is NULL or another call runs in this process. */
GPUD_API int gpud_arrays_merge(const char *out, const char *const *shards, size_t n_shards,
			       const char *dataset, const struct gpud_run_options *options,
			       struct gpud_arrays_merged **result);
/** Frees what gpud_arrays_merge gave. NULL is ignored. */
GPUD_API void gpud_arrays_merge_free(struct gpud_arrays_merged *result);

/** (API 1.4) What gpud_stats_merge made. The caller's, until gpud_stats_merge_free. */
struct gpud_stats_merged {
	size_t size;            /* sizeof(struct gpud_stats_merged) of the library */
	int ok;                 /* 1: the summary was made (also with ranks missing: see
				   missing_ranks); 0: refused (error says why) */
	const char *json;       /* the summary, what `gpud merge` prints on standard output:
				   one JSON object and a newline ("" when not ok) */
	const char *error;      /* the reason when refused, else "" */
	unsigned files;         /* files merged */
	unsigned missing_ranks; /* ranks of the job no file was given for (the figures are
				   then the others' only, and GPUD_EXIT_REFUSED is returned) */
	int exit_status;        /* the worst of the ranks' exit statuses */
	uint64_t generated, succeeded, failed, timed_out, not_run; /* tasks, all ranks */
};

/** (API 1.4) `gpud merge` as data: the ranks' --stats-json files as one summary. Prints
 *  nothing: its messages (a refusal, the one-line summary at GPUD_LOG_INFO) go to
 *  options->log (the only field read; NULL options: standard error). *result gets
 *  the summary, to free with gpud_stats_merge_free, also when refused (NULL only out
 *  of memory). GPUD_EXIT_OK; GPUD_EXIT_REFUSED when a file is missing, not a stats
 *  file, given twice, of another job or number of ranks, or a rank has no file (the
 *  summary of those given is then still made); GPUD_MISUSE when result is NULL or
 *  another call runs in this process. */
GPUD_API int gpud_stats_merge(const char *const *files, size_t n_files,
			      const struct gpud_run_options *options,
			      struct gpud_stats_merged **result);
/** Frees what gpud_stats_merge gave. NULL is ignored. */
GPUD_API void gpud_stats_merge_free(struct gpud_stats_merged *result);

/** The command forms of API 1.0 (kept for programs built against them): each prints
 *  what `gpud` prints, to standard output and standard error. gpud_plugins is
 *  gpud_plugins_list with the text printed; gpud_merge is gpud_stats_merge with the
 *  JSON printed (0, or 2); gpud_merge_arrays takes the arguments
 *  after `merge-arrays` ([--dataset NAME] OUT SHARD..., --help) and returns what
 *  gpud_arrays_merge returns (2 for a usage error). */
GPUD_API int gpud_plugins(void);
GPUD_API int gpud_merge(int n_files, char *const *files);
GPUD_API int gpud_merge_arrays(int argc, char *const *argv);

/*
 * What a run does to the process (gpud_job_run, gpud_job_check, gpud_job_status):
 * - Worker processes are started with fork/exec (the worker executable is found next to
 *   libgpud, or GPUD_WORKER_EXE). During a run the process is a child subreaper
 *   (PR_SET_CHILD_SUBREAPER; the previous setting is restored after), so what a worker
 *   leaves behind becomes its child.
 * - The caller's children: those that exist when gpud_job_run starts (known by pid and
 *   start time) are never signalled nor waited for by gpud; one that exits during the
 *   run stays a zombie with its exit status for the caller's waitpid. gpud waits for
 *   its workers by pid, never with waitpid(-1). A child the caller starts DURING the
 *   run (from another thread or a callback) cannot be told from one a worker left
 *   behind: if it exits during the run gpud reaps it (its status is lost to the caller),
 *   and if it is still there at the run's end gpud kills it with SIGKILL and reaps it.
 *   So is a process orphaned during the run (a grandchild of the caller's whose parent
 *   exited), which the subreaper setting makes the process's child. The caller must not
 *   wait with waitpid(-1) (or wait()) during a run: it would take a worker's exit
 *   status from gpud.
 * - Signals: unless GPUD_RUN_KEEP_SIGNALS, gpud's handlers for SIGINT, SIGTERM, SIGHUP
 *   (each stops the run as gpud_job_stop), SIGTSTP, SIGCONT and SIGCHLD are installed for
 *   the run and SIGPIPE and SIGXFSZ are ignored (a closed output, a file past
 *   RLIMIT_FSIZE: a write error); the caller's dispositions are restored when
 *   gpud_job_run returns. With the dashboard, a handler that restores the terminal's
 *   cursor is left on SIGSEGV, SIGBUS, SIGFPE, SIGILL and SIGABRT where none was set.
 * - Threads: the run starts a stand-in thread (it may call the sink, or end the run,
 *   while a generator or sink callback is blocked on the calling thread: never two
 *   generator calls or two sink calls at once), a UI thread with --ui plain/dashboard,
 *   and one with metrics_listen. All end before gpud_job_run returns. In-process
 *   callbacks are called on the calling thread or the stand-in.
 * - Callbacks must return to gpud: never longjmp/siglongjmp out of one, throw a C++
 *   exception through one, or end the calling thread (pthread_exit, cancellation) in
 *   one. gpud_job_run would be left half-way, holding its workers, signal handlers,
 *   threads and run lock: the job, and any later run in the process, cannot be used,
 *   and the process's exit is taken for one during a run (status 3). To end a run
 *   from a callback, return -1 with a message (the run aborts) or call gpud_job_stop
 *   (it drains) and return.
 * - exit() called by any thread during a run (a callback's) ends the process at once with
 *   status 3 after a message: the workers must not outlive the host unreported.
 * - Standard error: progress and the final summary, as `gpud run` writes them (or, with
 *   gpud_run_options.log, through it and not to standard error); errors also go to
 *   gpud_job_error(). Standard output is the sink plugin's (jsonl's default).
 * - A callback still blocked in its call when the run must end (every task done, or a
 *   stop's drain over) cannot be returned from: gpud then ends the process after the
 *   summary with the run's status (_exit), as `gpud run` does. A generator with an
 *   `interrupt` entry is asked to return first, and the run then ends as usual.
 * - Dumpability: the `gpud` command makes itself undumpable (PR_SET_DUMPABLE 0), so the
 *   workers, which run the user's code, cannot reach into it through /proc or ptrace.
 *   The library does not change that on its own: a program that runs untrusted worker
 *   plugins should do the same before gpud_job_run.
 */

#ifdef __cplusplus
}
#endif

#endif /* GPUD_GPUD_H */
