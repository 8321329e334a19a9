/* SPDX-License-Identifier: MIT */
/* The host's view of a run: shared memory, workers, generator and sink. */
#ifndef GPUD_HOST_H
#define GPUD_HOST_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include <gpud/plugin.h>

#include "job/config.h"
#include "loader.h"
#include "ring.h"
#include "run/standin.h"
#include "util/names.h"
#include "run/tasks.h"
#include "wait.h"
#include "view/figures.h"
#include "view/publish.h"
#include "view/ui.h"
#include "view/metrics.h"
#include "record/journal.h"
#include "cluster/claims.h"

/* Why a task ended: the event it makes, and whether it runs again (run/events.c). */
enum cause {
	CAUSE_OK,      /* GPUD_TASK_OK */
	CAUSE_ERROR,   /* the plugin failed it: retried if retry_on has error */
	CAUSE_REJECT,  /* the plugin rejected it for good (gpud_task_reject): not retried */
	CAUSE_TIMEOUT, /* it ran past task_timeout: retried if retry_on has timeout */
	CAUSE_CRASH,   /* its worker died while running it: retried if retry_on has crash */
	CAUSE_FINAL,   /* an error that running again cannot help (a poison task) */
};

/* How a worker slot ended, for the dashboard. */
enum hw_end { END_NONE, END_FINISHED, END_ERROR };

enum hw_state {
	HW_STARTING, /* spawned, setup not finished */
	HW_READY,    /* takes tasks */
	HW_STOPPING, /* told to stop, not yet exited */
	HW_GONE,     /* exited, failed setup, or retired */
};

/* Where one worker's time goes (workers/times.h): each phase and the wall time they add up to, in
 * ns, and its calls by size (bucket b: calls of 2^(b-1)+1 .. 2^b tasks; bucket 0: of 1). */
struct worker_times {
	uint64_t phase_ns[PH_COUNT];
	uint64_t wall_ns;
	uint64_t calls[SHM_CALL_BUCKETS];
	uint32_t call_min, call_max;  /* 0: no call yet */
	uint64_t items;               /* the calls' tasks (or items), all together */
	uint64_t cpu_ns, main_cpu_ns; /* CPU time of its processes, and of their main threads */
	uint64_t user_cpu_ns;         /* of phase_ns[PH_USER], CPU time (at most all of it) */
};

struct host_worker {
	struct shm_feed *feed;  /* what we tell it (run memfd) */
	struct shm_report *rep; /* what it tells us (its out memfd): untrusted */
	int out_fd;             /* its out memfd, fresh for each process */
	struct ring tasks, results;
	uint64_t task_head;   /* producer position (published in bursts) */
	uint64_t task_free;   /* oldest task whose result is not yet consumed */
	uint64_t result_tail; /* consumer position (published in bursts) */
	/* the task table's FIFO of what it holds (tasks.c) */
	struct task_ent *tt;
	uint32_t tt_mask;
	uint64_t tt_head, tt_tail, tt_started; /* tt_started: next to report as started */
	uint32_t window;     /* most tasks it may hold: covers ~WINDOW_NS of its work */
	double task_seconds; /* moving average of its process() time */
	pid_t pid;           /* also its process group's id (spawn_kill: it may leave) */
	int index, gpu_id;   /* gpu_id -1: a CPU stage's worker */
	unsigned stage;      /* its stage: 0.. for [stage.NAME]s, pool.n_stages for the GPU's */
	bool blocked;        /* a stage's worker whose next result waits for room downstream */
	bool flies;          /* its process said it runs tasks in flight (for its window) */
	bool handed;         /* given tasks by the stage before, not yet published */
	enum hw_state state;
	bool timed_out;       /* the host killed it for running past task_timeout, or its cleanup
				 for running past the cleanup bound */
	bool cancelled;       /* still in setup when the run ended: killed, not reported */
	bool corrupt;         /* killed for writing something that is not valid */
	bool setup_timed_out; /* killed for running past setup_timeout */
	bool held_still;      /* killed for holding tasks it did not start */
	bool free_restart;    /* it died running a task that had crashed a worker before:
			       * the task is to blame, its restart is not the GPU's */
	int log_fd;           /* dashboard: its log file, or -1 */
	char corrupt_why[160];
	enum hw_end end;
	uint64_t ok, failed, timeouts;
	uint64_t oom_splits_past;       /* out-of-memory splits of its earlier processes (fit.h) */
	struct worker_times times_past; /* its earlier processes' time (times.h, published) */
	unsigned restarts;
	double last_seconds; /* its last task's time in process() */
	double busy_s;       /* its tasks' time in process(), all together (published) */
	uint64_t ready_ns;   /* when it first finished its setup, 0 not yet (published) */
	uint64_t spawned_ns; /* when this process started (setup_timeout) */
	uint64_t seen_since; /* the busy_since value the timeout clock last saw */
	uint64_t grace_ns;   /* time the host was stopped during that task: not counted */
	uint64_t seen_tail;  /* its task_tail when last looked at */
	uint64_t still_ns;   /* since when it has held unstarted tasks while not busy */
	int exit_status;     /* reaped, not yet handled */
	bool exited;
};

/* The task table's per-worker FIFO (tasks.h). */
static inline uint32_t tasks_held(const struct host_worker *w)
{
	return (uint32_t)(w->tt_head - w->tt_tail);
}

/* Adds a task the worker was given. The dispatcher never gives a worker more than its
 * window, which the FIFO holds. */
static inline void tasks_push(struct host_worker *w, const struct task_ent *t)
{
	if (__builtin_expect(tasks_held(w) > w->tt_mask, 0))
		tasks_overfull(w);
	w->tt[w->tt_head++ & w->tt_mask] = *t;
}

/* The oldest task the worker holds, or NULL. */
static inline const struct task_ent *tasks_front(const struct host_worker *w)
{
	return w->tt_head == w->tt_tail ? NULL : &w->tt[w->tt_tail & w->tt_mask];
}

static inline void tasks_pop(struct host_worker *w)
{
	w->tt_tail++;
	if (w->tt_started - w->tt_tail > w->tt_head - w->tt_tail)
		w->tt_started = w->tt_tail;
}

/* Gives w task `ent`, whose input is already in the reserved record `rec` of its ring:
 * the record's header written, the task noted in the table, the ring's head moved (it
 * is published later, with the others of the burst). On every task's path: the feed's
 * and a CPU stage's hand-over. */
static inline __attribute__((always_inline)) void
tasks_place(struct host_worker *w, struct shm_rec *rec, struct task_ent *ent)
{
	ent->pos = w->task_head;
	rec->task_id = ent->id;
	rec->size = ent->size;
	rec->attempt = ent->attempt;
	rec->flags = 0;
	rec->kind = REC_TASK;
	tasks_push(w, ent);
	w->task_head += ring_span(ent->size);
}

/* An outcome that arrived before earlier tasks' (ordered = true): a copy, since its
 * ring space is reused once consumed. */
struct held_outcome {
	struct held_outcome *next; /* the next one waiting for the calling thread */
	struct gpud_event ev;
	uint8_t data[]; /* input, result, message */
};

/* Messages for the UI thread (failures, worker deaths), newest last: the dashboard shows
 * the last few; plain mode prints them in order and, when it falls behind by the whole
 * ring, counts the newer ones as hidden rather than dropping older ones unseen. */
#define HOST_NOTES 64
struct host_notes {
	pthread_mutex_t lock;
	char text[HOST_NOTES][256];
	bool error[HOST_NOTES];
	uint64_t count;   /* notes ever added; text[(count - 1) % HOST_NOTES] is the newest */
	uint64_t printed; /* plain mode: notes printed or counted as hidden */
	uint64_t hidden;  /* plain mode: not printed, since the last progress line */
};

struct run_opts;
struct lifecycle_up;

/*
 * The engine's state, grouped by the module that owns each part (the one that writes
 * it; docs/architecture.md, "Who owns what"). Other modules read a part through its
 * owner's functions where there are some, and read its fields directly only where the
 * table in docs/architecture.md says so.
 */

/* The run's shared memory: workers/memory.c. */
struct host_shm {
	int fd;                 /* the run memfd: read-write here; workers get a read-only one */
	int ro_fd;              /* the same, opened read-only, for workers */
	int bell_fd;            /* the host's futex page */
	int pipe[2];            /* workers hold [0]; its end-of-file tells them we are gone */
	struct shm_header *hdr; /* read by the loop (the workers' settings) */
	size_t size;            /* of the run memfd */
	_Atomic uint32_t *host_bell; /* in the bell page */
	struct wait_bell bell;       /* host_bell + hdr->host_sleeping: the loop waits on it */
	size_t out_size;             /* each worker's out memfd */
	uint64_t task_need;          /* ring bytes one task of max_task_bytes needs */
};

/* A CPU stage before the GPU workers (run/stages.c): its workers are pool.w[first] to
 * pool.w[first + n - 1]. The GPU workers are the last stage, pool.stages[n_stages]. */
struct host_stage {
	const char *name; /* "decode"; "gpu" for the GPU workers */
	char *plugin;     /* the stage's plugin path (NULL for the GPU workers: pool.plugin) */
	unsigned first, n;
	unsigned rr;                    /* where the next hand-over looks first */
	struct requeued *rq, **rq_tail; /* its tasks to run again (stage > 0) */
	struct stage_figures fig;       /* published for the view (view/figures.h) */
	bool drained_told;              /* its workers were told no new task will come */
	/* its largest ok result so far and that task's input (the loop's; said at the
	 * end by stages_note_results when large) */
	uint32_t largest_result, largest_input;
};

/* The worker processes: workers/lifecycle.c and spawn.c (started, ended, restarted). */
struct host_pool {
	struct host_worker *w;
	unsigned n;
	unsigned *restarts;   /* per GPU index */
	bool *retired;        /* per GPU index: crashed past max_worker_restarts */
	char (*bus_ids)[32];  /* by CUDA device number: its PCI bus id, "" unknown (NVML) */
	bool ever_ready;      /* some worker finished its setup */
	uint64_t corruptions; /* workers killed for corrupting their memory */
	char *exe;            /* gpud-worker */
	char *plugin;         /* the worker plugin's path */

	/* CPU stages (run/stages.h): w[0] to w[n_gpu_workers - 1] are the GPU workers,
	 * the stages' follow; `stages` has n_stages + 1 entries, the GPU workers last
	 * (NULL without stages). restarts and retired have one entry per GPU, then one
	 * per stage worker. */
	unsigned n_gpu_workers, n_stages;
	struct host_stage *stages;
	/* What the run does with the outcomes, events and retries lifecycle.c finds: set
	 * by run/ before any worker starts (workers/lifecycle.h). */
	const struct lifecycle_up *up;
	/* A warm pool's: the thread its workers are started from (spawner.h); NULL: the
	 * thread that runs the loop. */
	struct spawn_thread *spawner;
};

/* The generator's side of the loop: run/dispatcher.c. */
struct host_flow {
	uint64_t next_id;    /* the id the next generated task gets */
	uint64_t in_flight;  /* tasks in worker rings (published: the dashboard reads it) */
	unsigned rr;         /* where the next feeding pass starts */
	uint64_t check_mask; /* read the clock when (gate.calls & mask) == 0 */
	uint64_t start_ns;   /* when this feeding pass began */
	int64_t total;       /* from the generator's total, -1 unknown (published) */
	bool done;           /* no more from the generator */
	bool drained_told;   /* the workers it fed were told (shm_feed.drained) */
	bool failed;         /* the generator returned -1: what it yielded still runs */
	bool stuck;          /* the run ended while a generator call had not returned */
	/* The largest task the generator gave and the largest ok result of a GPU worker:
	 * what the rings needed, said at the end when far below what they took
	 * (capacity_note_oversized). */
	uint32_t largest_task, largest_result;
};

/* Outcomes on their way to the sink: run/events.c. */
struct host_out {
	uint32_t mask;             /* the event kinds the sink wants */
	bool open;                 /* the sink takes events (false after it failed) */
	bool open_ever;            /* it was opened */
	bool stuck;                /* the run ended while a sink call had not returned */
	_Atomic uint64_t stuck_ns; /* since when a sink call is stuck (standin.c), or 0 */
	uint64_t lost;             /* results that could not be delivered after a sink error */
	/* ordered = true: outcomes held until every earlier task's is delivered */
	struct held_outcome **held;          /* queue_size slots, by task_id % queue_size */
	uint64_t next_deliver;               /* the task whose outcome goes next */
	uint8_t result_copy[SHM_COPIED_MAX]; /* a small result, copied before it is delivered */
	/* GPUD_SINK_CALLING_THREAD: events that came while the stand-in ran the loop, oldest
	 * first, for the calling thread (events_deliver_waiting) */
	bool calling_thread;
	struct held_outcome *waiting, *waiting_last;
	bool no_input; /* GPUD_SINK_NO_INPUT: events carry no input (none copied to hold one) */
	/* ABI 1.9: the tasks' names, kept when the generator gives them and the sink takes
	 * them (`names`), until the sink took the task's outcome (util/names.h) */
	bool names;
	struct task_names task_names;
};

/* How the run is being ended, and the clocks that stops do not count against:
 * workers/lifecycle.c (signals, timeouts) and the loop's dispatch_signals. */
struct host_ctl {
	int interrupts_seen;    /* the loop's count of host_interrupts */
	bool interrupted;       /* SIGINT/SIGTERM: nothing new starts */
	uint64_t interrupt_ns;  /* when; the running tasks get drain_timeout from then */
	bool killing;           /* second interrupt: workers killed, nothing more runs */
	bool stopping;          /* workers told to stop */
	uint64_t stop_ns;       /* when they were */
	uint64_t last_check_ns; /* when the timeouts were last looked at */
	uint64_t stopped_ns;    /* how long the job has been stopped in all */
	uint64_t held_gap;      /* a long gap seen, not yet known to be a stop */
	int conts_seen;         /* host_conts at the last look */
	int abort;              /* exit status 3 pending; abort_msg says why */
	char abort_msg[4096];
	bool finishing; /* finish_run has begun (run.c) */
	bool parked;    /* a pool's run ended with its workers kept for the next (run.c) */
	bool keep;      /* a pool's run (run.c sets it): the loop parks its workers at its end
			 * instead of stopping them */
};

/* The run's folder and its failures list: record/files.c and failures.c. */
struct host_files {
	char *log_dir;  /* the run's folder: failures list, dashboard worker logs */
	bool dir_fresh; /* made for this run (not [job] log_dir) */
	FILE *failures; /* every failure and task not run, as JSON lines */
	uint64_t failures_listed, not_run_listed;
};

/* Resuming an earlier run: record/resume.c (the journal itself is record/journal.c's). */
struct host_resume {
	bool asked;             /* --resume was given */
	bool on;                /* --resume with a journal: done tasks are skipped */
	bool input_changed;     /* a sampled input differs from the journaled run's */
	bool journal_failed;    /* a journal write failed (said once) */
	uint64_t skipped;       /* tasks skipped because an earlier run finished them */
	uint64_t failed_before; /* of the journal's outcomes, failures (not --retry-failed) */
	/* Entries of the sink's output that name no task of this job, and tasks it holds
	 * that the journal had no memory for; the first of each, to name it */
	uint64_t strays, stray_eg, unheld, unheld_eg;
	/* Dynamic shares: entries naming a task of the job in no claim of this rank (its
	 * claims lost), which refuse the run */
	uint64_t unclaimed, unclaimed_eg;
	uint64_t first_new_ns; /* when the first task not done before came */
};

/* Tasks waiting to run again: run/tasks.c. */
struct host_rq {
	struct requeued *head, **tail;
	uint64_t later; /* tasks waiting in later stages' queues (host_stage.rq) */
};

/* What the operator sees: view/ui.c and view/metrics.c. */
struct host_view {
	enum ui_mode mode;
	int fd; /* where the dashboard draws: a terminal the caller named; 0: standard error */
	struct ui *ui;
	struct host_notes notes;
	struct metrics_hist *metrics; /* NULL unless metrics_file or metrics_listen */
	struct metrics_srv *srv;
};

/* Where the time before the first result went (the stats JSON's `first_result`): clock
 * readings (wait_now_ns), 0 until reached. run.c stamps the start and the spawns, the
 * loop the first window written (run/dispatcher.c) and events.c the first outcome. */
struct host_startup {
	uint64_t enter_ns;        /* run_job entered */
	uint64_t spawn_from_ns;   /* the first worker being spawned */
	uint64_t spawn_to_ns;     /* every worker spawned */
	uint64_t first_window_ns; /* the first worker's first tasks written and published */
	uint64_t first_result_ns; /* the first outcome taken in */
	int first_worker;         /* whose outcome it was (its index), -1 none */
	uint64_t spawned_ns;      /* that worker's process started */
	uint64_t ready_ns;        /* that worker seen ready by the loop */
};

/* One run: a local of run_job (run/run.c), one at a time per process. */
struct host {
	const struct cfg *cfg;
	const struct run_opts *opts;
	struct host_shm shm;
	struct host_pool pool;
	/* The generator and the sink are called only through their tables, with their
	 * state; gen_pl and sink_pl are the loaded files (loading, closing, naming). */
	struct plugin gen_pl, sink_pl;
	const struct gen_ops *gen_ops;
	void *gen;
	const struct sink_ops *sink_ops;
	void *sink;
	struct host_flow flow;
	struct host_out out;
	struct host_rq rq;
	struct host_ctl ctl;
	struct gate gate; /* the generator and sink call gate (standin.h) */
	pthread_t standin;
	bool standin_running;
	struct gpud_stats stats; /* run/events.c counts; published for the view */
	uint64_t t_start_ns;
	/* The run's start on the wall clock (s since the epoch) and the process's CPU time
	 * then (s): the stats JSON's start_time and host_cpu_seconds are from these. */
	double t_start_wall, cpu_start;
	struct journal journal; /* fd -1 when off */
	struct claims *claims;  /* shares = dynamic with ranks (claims.h); NULL: static */
	struct host_resume resume;
	struct host_files files;
	struct host_view view;
	struct host_startup startup;
};

/* A host before anything is opened: every descriptor -1. */
#define HOST_INIT(c)                                                                               \
	{                                                                                          \
		.cfg = (c), .shm = {.fd = -1, .ro_fd = -1, .bell_fd = -1, .pipe = {-1, -1}},       \
		.flow = {.total = -1}, .startup = {.first_worker = -1}, .journal = {               \
			.fd = -1                                                                   \
		}                                                                                  \
	}

/* The PCI bus id CUDA gave for GPU `gpu_id`, or NULL (for NVML lookups). */
static inline const char *host_bus_id(const struct host *h, int gpu_id)
{
	/* gpus = auto with GPU-.../MIG-... tokens: NVML looks those up itself. */
	if (h->cfg->gpu_tokens && gpu_id >= 0 && (size_t)gpu_id < h->cfg->n_gpus &&
	    (!strncmp(h->cfg->gpu_tokens[gpu_id], "GPU-", 4) ||
	     !strncmp(h->cfg->gpu_tokens[gpu_id], "MIG-", 4)))
		return h->cfg->gpu_tokens[gpu_id];
	if (h->cfg->gpu_tokens) /* CUDA numbers the launcher's list as given */
		gpu_id += (int)h->cfg->gpu_token_from;
	return h->pool.bus_ids && gpu_id >= 0 && gpu_id < CFG_MAX_GPUS && h->pool.bus_ids[gpu_id][0]
		       ? h->pool.bus_ids[gpu_id]
		       : NULL;
}

/* The tasks waiting to run again (tasks.h). */
static inline bool tasks_requeued_for(const struct host *h, const struct host_worker *w)
{
	return h->rq.head && (h->rq.head->avoid < 0 || tasks_retry_fits(h, w));
}

static inline bool tasks_requeued_any(const struct host *h)
{
	return h->rq.head != NULL || h->rq.later;
}

static inline bool tasks_requeued_alone(const struct host *h)
{
	return h->rq.head && h->rq.head->t.alone;
}

static inline bool tasks_may_hold(const struct host_worker *w, bool alone)
{
	return !tasks_held(w) || (!alone && !tasks_front(w)->alone);
}

#endif /* GPUD_HOST_H */
