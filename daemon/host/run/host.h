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
#include "run/tasks.h"
#include "wait.h"
#include "view/publish.h"
#include "view/ui.h"
#include "view/metrics.h"
#include "record/journal.h"

/* How a worker slot ended, for the dashboard. */
enum hw_end { END_NONE, END_FINISHED, END_ERROR };

enum hw_state {
	HW_STARTING, /* spawned, setup not finished */
	HW_READY,    /* takes tasks */
	HW_STOPPING, /* told to stop, not yet exited */
	HW_GONE,     /* exited, failed setup, or retired */
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
	int index, gpu_id;
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
	unsigned restarts;
	double last_seconds; /* its last task's time in process() */
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

/* An outcome that arrived before earlier tasks' (ordered = true): a copy, since its
 * ring space is reused once consumed. */
struct held_outcome {
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

struct host {
	const struct cfg *cfg;
	enum ui_mode ui_mode;
	int ui_fd; /* where the dashboard draws: a terminal the caller named; 0: standard error */
	char *log_dir;      /* the run's folder: failures list, dashboard worker logs */
	bool run_dir_fresh; /* made for this run (not [job] log_dir) */
	FILE *failures;     /* failures.h: every failure and task not run, as JSON lines */
	uint64_t failures_listed, not_run_listed;
	struct host_notes notes;
	char *worker_exe;
	char *worker_plugin;

	int shm_fd;       /* the run memfd: read-write here; workers get a read-only one */
	int ro_fd;        /* the same, opened read-only, for workers */
	int bell_fd;      /* the host's futex page */
	int host_pipe[2]; /* workers hold [0]; its end-of-file tells them we are gone */
	struct shm_header *hdr;
	size_t shm_size;
	_Atomic uint32_t *host_bell; /* in the bell page */
	struct wait_bell bell;       /* host_bell + hdr->host_sleeping */
	size_t out_size;
	struct host_worker *w;
	unsigned n_workers;
	unsigned *restarts;  /* per GPU index */
	bool *retired;       /* per GPU index: crashed past max_worker_restarts */
	char (*bus_ids)[32]; /* by CUDA device number: its PCI bus id, "" unknown (NVML) */
	bool ever_ready;     /* some worker finished its setup */
	uint64_t task_need;

	/* The generator and the sink are called only through their tables, with their
	 * state; gen_pl and sink_pl are the loaded files (loading, closing, naming). */
	struct plugin gen_pl, sink_pl;
	const struct gen_ops *gen_ops;
	void *gen;
	int64_t total; /* from gpud_generator_total, -1 unknown */
	const struct sink_ops *sink_ops;
	void *sink;
	uint32_t sink_mask;
	bool sink_open;
	bool sink_open_ever; /* opened (sink_open goes false when it fails) */

	struct gpud_stats stats;
	uint64_t next_id;
	uint64_t in_flight;     /* tasks in worker rings */
	uint64_t last_check_ns; /* when the timeouts were last looked at */
	uint64_t stopped_ns;    /* how long the job has been stopped in all (lifecycle.c) */
	uint64_t held_gap;      /* a long gap seen, not yet known to be a stop (lifecycle.c) */
	int conts_seen;         /* host_conts at the last look */
	struct requeued *rq_head, **rq_tail; /* tasks.c */
	unsigned rr;                         /* where the next feeding pass starts */
	struct gate gate;                    /* the generator call gate (standin.h) */
	pthread_t standin;
	bool standin_running;
	bool gen_stuck;                 /* the run ended while a generator call had not returned */
	bool sink_stuck;                /* ... while a sink call had not returned */
	bool finishing;                 /* finish_run has begun (run.c) */
	_Atomic uint64_t sink_stuck_ns; /* since when a sink call is stuck (standin.c), or 0 */
	int (*finish)(struct host *h);  /* the rest of the run after the loop (run.c) */
	const struct run_opts *opts;
	struct ui *ui;
	int interrupts_seen;     /* the loop's count of host_interrupts */
	uint64_t gen_check_mask; /* read the clock when (gate.calls & mask) == 0 */
	uint64_t feed_start_ns;
	bool gen_done;
	bool gen_failed;       /* the generator returned -1: what it yielded still runs */
	bool interrupted;      /* SIGINT/SIGTERM: nothing new starts */
	uint64_t interrupt_ns; /* when; the running tasks get drain_timeout from then */
	bool killing;          /* second interrupt: workers killed, nothing more runs */
	bool stopping;         /* workers told to stop */
	uint64_t stop_ns;      /* when they were */
	int abort;             /* exit status 3 pending; abort_msg says why */
	char abort_msg[4096];
	uint64_t sink_lost;   /* results that could not be delivered after a sink error */
	uint64_t corruptions; /* workers killed for corrupting their memory */
	/* ordered = true: outcomes held until every earlier task's is delivered */
	struct held_outcome **held; /* queue_size slots, by task_id % queue_size */
	uint64_t next_deliver;      /* the task whose outcome goes next */
	uint64_t t_start_ns;
	uint8_t result_copy[SHM_COPIED_MAX]; /* a small result, copied before it is delivered */
	struct journal journal;              /* fd -1 when off */
	bool resuming;                       /* --resume with a journal: done tasks are skipped */
	bool input_changed;                  /* a sampled input differs from the journaled run's */
	uint64_t resumed; /* tasks skipped because an earlier run finished them */
	/* Entries of the sink's output that name no task of this job, and tasks it holds
	 * that the journal had no memory for (resume.c); the first of each, to name it */
	uint64_t sink_strays, sink_stray_eg, sink_unheld, sink_unheld_eg;
	bool journal_failed;          /* a write failed (said once) */
	uint64_t first_new_ns;        /* resuming: when the first task not done before came */
	struct metrics_hist *metrics; /* NULL unless metrics_file or metrics_listen */
	struct metrics_srv *metrics_srv;
};

/* A host before anything is opened: every descriptor -1. */
#define HOST_INIT(c)                                                                               \
	{                                                                                          \
		.cfg = (c), .shm_fd = -1, .ro_fd = -1, .bell_fd = -1, .host_pipe = {-1, -1},       \
		.total = -1, .rq_tail = NULL, .journal = {                                         \
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
	return h->bus_ids && gpu_id >= 0 && gpu_id < CFG_MAX_GPUS && h->bus_ids[gpu_id][0]
		       ? h->bus_ids[gpu_id]
		       : NULL;
}

/* The tasks waiting to run again (tasks.h). */
static inline bool tasks_requeued_for(const struct host *h, const struct host_worker *w)
{
	return h->rq_head && (h->rq_head->avoid < 0 || tasks_retry_fits(h, w));
}

static inline bool tasks_requeued_any(const struct host *h)
{
	return h->rq_head != NULL;
}

#endif /* GPUD_HOST_H */
