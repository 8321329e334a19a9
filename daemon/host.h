/* SPDX-License-Identifier: MIT */
/* The host's view of a run: shared memory, workers, generator and sink. */
#ifndef GPUD_HOST_H
#define GPUD_HOST_H

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <gpud/plugin.h>

#include "config.h"
#include "loader.h"
#include "ring.h"
#include "ui.h"

/* Fields the UI thread reads while the host writes them: aligned words, stored and
 * loaded whole. The UI reads them with relaxed atomic loads. */
#define UI_READ(x)                                                                         \
	({                                                                                 \
		__typeof__(x) ui_read_;                                                    \
		__atomic_load(&(x), &ui_read_, __ATOMIC_RELAXED);                          \
		ui_read_;                                                                  \
	})

/* How a worker slot ended, for the dashboard. */
enum hw_end { END_NONE, END_FINISHED, END_ERROR };

enum hw_state {
	HW_STARTING, /* spawned, setup not finished */
	HW_READY,    /* takes tasks */
	HW_STOPPING, /* told to stop, not yet exited */
	HW_GONE,     /* exited, failed setup, or retired */
};

struct host_worker {
	struct shm_worker *ctl;
	struct ring tasks, results;
	uint64_t task_head;   /* producer position (published in bursts) */
	uint64_t task_free;   /* oldest task whose result is not yet consumed */
	uint64_t start_pos;   /* next task to report GPUD_TASK_START for */
	uint64_t result_tail; /* consumer position (published in bursts) */
	uint32_t outstanding; /* tasks in its ring without a consumed result */
	uint32_t window;      /* most tasks it may hold: covers ~WINDOW_NS of its work */
	double task_seconds;  /* moving average of its process() time */
	pid_t pid;
	int index, gpu_id;
	enum hw_state state;
	bool timed_out; /* the host killed it for running past task_timeout, or its cleanup
			   for running past the cleanup bound */
	bool cancelled; /* still in setup when the run ended: killed, not reported */
	enum hw_end end;
	uint64_t ok, failed, timeouts;
	unsigned restarts;
	double last_seconds; /* its last task's time in process() */
};

/* An outcome that arrived before earlier tasks' (ordered = true): a copy, since its
 * ring space is reused once consumed. */
struct held_outcome {
	struct gpud_event ev;
	uint8_t data[]; /* input, result, message */
};

/* A task taken back from a dead worker, waiting to run again. */
struct requeued {
	struct requeued *next;
	uint64_t task_id;
	uint32_t attempt, size;
	int avoid; /* the worker a retry should not go back to, or -1 */
	uint8_t data[];
};

/* The last messages for the dashboard (failures, worker deaths), newest last. */
#define HOST_NOTES 6
struct host_notes {
	pthread_mutex_t lock;
	char text[HOST_NOTES][256];
	bool error[HOST_NOTES];
	uint64_t count; /* notes ever added; text[(count - 1) % HOST_NOTES] is the newest */
};

struct host {
	const struct cfg *cfg;
	enum ui_mode ui_mode;
	char *log_dir; /* dashboard: where each worker's output goes */
	struct host_notes notes;
	char *worker_exe;
	char *worker_plugin;

	int shm_fd;
	struct shm_header *hdr;
	size_t shm_size;
	struct host_worker *w;
	unsigned n_workers;
	unsigned *restarts; /* per GPU index */
	bool *retired;      /* per GPU index: crashed past max_worker_restarts */
	bool ever_ready;    /* some worker finished its setup */
	uint64_t task_need;

	struct plugin gen_pl, sink_pl;
	void *gen;
	int (*gen_next)(void *, struct gpud_buf *, struct gpud_error *);
	void (*gen_close)(void *);
	int64_t total; /* from gpud_generator_total, -1 unknown */
	void *sink;
	int (*sink_event)(void *, const struct gpud_event *, struct gpud_error *);
	int (*sink_close)(void *, const struct gpud_stats *, struct gpud_error *);
	uint32_t sink_mask;
	bool sink_open;

	struct gpud_stats stats;
	uint64_t next_id;
	uint64_t in_flight; /* tasks in worker rings */
	struct requeued *rq_head, **rq_tail;
	unsigned rr;      /* where the next feeding pass starts */
	unsigned n_ready; /* workers taking tasks, counted each feeding pass */
	bool gen_done;
	bool gen_failed;  /* the generator returned -1: what it yielded still runs */
	bool interrupted; /* SIGINT/SIGTERM: nothing new starts */
	bool killing; /* second interrupt: workers killed, nothing more runs */
	bool stopping;    /* workers told to stop */
	uint64_t stop_ns; /* when they were */
	int abort;     /* exit status 3 pending; abort_msg says why */
	char abort_msg[4096];
	uint64_t sink_lost; /* results that could not be delivered after a sink error */
	/* ordered = true: outcomes held until every earlier task's is delivered */
	struct held_outcome **held; /* queue_size slots, by task_id % queue_size */
	uint64_t next_deliver;      /* the task whose outcome goes next */
	uint64_t t_start_ns;
};

/* shm.c */
int shm_create(struct host *h);
void shm_destroy(struct host *h);
void shm_reset_worker(struct host *h, struct host_worker *w);

/* spawn.c */
int spawn_worker(struct host *h, struct host_worker *w);
int spawn_check_worker_plugin(const char *worker_exe, const char *plugin, char *err,
			      size_t errlen);
/* gpud plugins: "kind\tname\tversion\tdescription" of a plugin, from a helper process
 * (a worker plugin never loads into the host). 0, or -1 with err. */
int spawn_describe(const char *worker_exe, const char *plugin, char *out, size_t outlen,
		   char *err, size_t errlen);
/* gpus = all: the CUDA device count, from a short-lived gpud-worker; -1 with err. */
int spawn_count_gpus(const char *worker_exe, char *err, size_t errlen);

/* dispatcher.c: runs the loop until every task has an outcome; 0, or 3 on abort. */
int dispatch(struct host *h);
unsigned dispatch_drain(struct host *h, struct host_worker *w);

/* events.c: outcomes and events */
void events_deliver(struct host *h, const struct gpud_event *ev);
/* A task's outcome: delivered now, or held until earlier ones are (ordered = true). */
void events_deliver_outcome(struct host *h, const struct gpud_event *ev);
/* End of run: delivers every held outcome in task order, past the gaps of tasks that
 * did not run. */
void events_flush_held(struct host *h);
void events_worker(struct host *h, enum gpud_event_kind kind, const struct host_worker *w,
		   const char *message);
/* The final outcome of a task (or a retry when attempts are left): kind is
 * GPUD_TASK_OK, GPUD_TASK_ERROR or GPUD_TASK_TIMEOUT. */
void events_outcome(struct host *h, const struct host_worker *w, const struct shm_rec *task,
		    enum gpud_event_kind kind, const void *result, size_t result_size,
		    const char *message, double seconds);
/* Keeps a copy of `task` to run again; a retry (attempt > task->attempt) avoids the
 * worker `avoid` when another can take it. */
void events_requeue(struct host *h, const struct shm_rec *task, uint32_t attempt, int avoid);
/* Counts every requeued task as not run and frees them. */
void events_drop_requeued(struct host *h);
void host_abort(struct host *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* lifecycle.c: worker states, deaths, timeouts, stopping */
void lifecycle_poll(struct host *h, struct host_worker *w);
void lifecycle_reap(struct host *h);
uint64_t lifecycle_timeouts(struct host *h, uint64_t now);
void lifecycle_stop_all(struct host *h);
void lifecycle_kill_all(struct host *h);
unsigned lifecycle_live(const struct host *h);

/* signals (lifecycle.c) */
extern volatile sig_atomic_t host_sigchld, host_interrupts;
void host_install_signals(struct host *h);

#endif /* GPUD_HOST_H */
