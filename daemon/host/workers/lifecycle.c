/* SPDX-License-Identifier: MIT */
/*
 * Worker lifecycles seen from the host: setup results, deaths (noticed at once through
 * SIGCHLD, whose handler rings the host's bell), host-enforced bounds on every wait
 * (task_timeout, setup_timeout, tasks held but never started, cleanup), restarts within
 * a per-GPU budget, and the orderly stop at the end of a run. The run's signals and job
 * control are signals.c's.
 *
 * Each worker leads its own process group: whatever it starts dies with it, and
 * signals meant for the job (Ctrl-C, SIGTERM to the group) reach only the host, which
 * decides. The host is a child subreaper, so what escapes a group still ends below it.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job/stagecfg.h"
#include "record/failures.h"
#include "job/groups.h"
#include "workers/lifecycle.h"
#include "workers/memory.h"
#include "workers/spawner.h"
#include "util/textio.h"
#include "view/ui.h"
#include "util/notes.h"

static const char *how_it_ended(int status, char *buf, size_t len)
{
	if (WIFSIGNALED(status)) {
		const char *abbrev = sigabbrev_np(WTERMSIG(status));
		if (abbrev)
			snprintf(buf, len, "killed by SIG%s", abbrev);
		else
			snprintf(buf, len, "killed by signal %d", WTERMSIG(status));
	} else {
		snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
	}
	return buf;
}

/* The worker's message (setup, cleanup, fatal), read once, bounded and made printable. */
static const char *worker_message(const struct host_worker *w, char *buf, size_t len,
				  const char *none)
{
	size_t n = w->rep ? strnlen(w->rep->message, sizeof w->rep->message) : 0;
	if (n >= len)
		n = len - 1;
	if (n)
		memcpy(buf, w->rep->message, n);
	buf[n] = '\0';
	text_clean(buf);
	if (!buf[0])
		snprintf(buf, len, "%s", none);
	return buf;
}

static void setup_failed(struct host *h, struct host_worker *w, const char *why)
{
	UI_ADD(h->stats.setup_failures, 1);
	/* Tasks written while it set up run elsewhere, without blame: none of them ran. */
	if (tasks_held(w))
		lifecycle_take_back(h, w);
	ui_say(h, UI_EVENT, "worker %d (%s) setup failed: %s", w->index, WHERE_OF(h, w), why);
	h->pool.up->worker_event(h, GPUD_SETUP_FAILED, w, why);
	UI_SET(w->end, END_ERROR);
	UI_SET(w->state, HW_GONE);
}

void lifecycle_poll(struct host *h, struct host_worker *w)
{
	char msg[SHM_MSG_MAX];
	uint32_t s = atomic_load_explicit(&w->rep->state, memory_order_acquire);
	if (s == WS_READY) {
		UI_SET(w->state, HW_READY);
		if (!w->ready_ns) /* the busy fraction counts from here (stages.c) */
			UI_SET(w->ready_ns, wait_now_ns());
		h->pool.ever_ready = true;
		/* until its first results tell how long its tasks take */
		h->pool.up->ready(h, w);
	} else if (s == WS_SETUP_FAILED) {
		setup_failed(h, w,
			     worker_message(w, msg, sizeof msg, "setup failed without a message"));
	}
}

void lifecycle_kill(struct host_worker *w)
{
	if (w->pid > 0 && !w->exited)
		spawn_kill(w->pid, SIGKILL);
}

void lifecycle_corrupt(struct host *h, struct host_worker *w, const char *why)
{
	if (w->corrupt || w->pid <= 0 || w->timed_out)
		return;
	w->corrupt = true;
	snprintf(w->corrupt_why, sizeof w->corrupt_why, "%s", why);
	/* A plugin that corrupts its memory on every task would say this thousands of
	 * times: the first few are told, then that the rest are not. */
	if (++h->pool.corruptions <= LIFECYCLE_CORRUPTIONS_TOLD)
		ui_say(h, UI_EVENT,
		       "worker %d (%s) corrupted its shared memory (%s); "
		       "restarting it%s",
		       w->index, WHERE_OF(h, w), why,
		       h->pool.corruptions == LIFECYCLE_CORRUPTIONS_TOLD
			       ? " (further corruptions are not told; the tasks they fail are "
				 "in the failures list)"
			       : "");
	if (!w->exited) /* reaped already: its process group is gone */
		lifecycle_kill(w);
}

/* Where the dead worker said its current call began and ended, kept inside what it held. */
static void reported_call(const struct host_worker *w, uint64_t *from, uint64_t *to)
{
	uint64_t started = atomic_load(&w->rep->task_tail);
	uint64_t run_from = atomic_load(&w->rep->run_from);
	if (started - w->task_free > w->task_head - w->task_free)
		started = w->task_free;
	if (run_from - w->task_free > started - w->task_free)
		run_from = started;
	*from = run_from;
	*to = started;
}

/* With tasks in flight, what a timeout blames: the oldest task alone, [from, *timed);
 * otherwise the whole call. Kept inside [from, to]. */
static uint64_t reported_timed(const struct host_worker *w, uint64_t from, uint64_t to)
{
	uint64_t timed = atomic_load(&w->rep->timed_to);
	if (!timed || timed == from || timed - from > to - from)
		return to;
	return timed;
}

/* A worker died while it held tasks: the call it was running gets the blame (an error,
 * a timeout if we killed it for one, a strike if we killed it for corrupting its
 * memory), the others go back to the queue. */
static void crashed(struct host *h, struct host_worker *w, int status)
{
	char how[64], msg[SHM_MSG_MAX + 256];
	uint64_t from, to;
	uint64_t since = atomic_load(&w->rep->busy_since_ns);
	bool busy = since != 0;

	how_it_ended(status, how, sizeof how);
	reported_call(w, &from, &to);
	uint64_t timed = reported_timed(w, from, to);
	/* A timeout, or a task in flight that ended its process (gpud_task_fatal, a write
	 * before its result buffer: worker/flight.c, flight_culprit), names one task as the
	 * call, [from, timed); the others in flight beside it are not its fault. Only a
	 * worker with tasks in flight reports timed_to, and a poll that failed clears it
	 * (every task in flight is blamed); a plugin that calls exit(70) itself leaves no
	 * message: an exit like any other. */
	bool by_task = WIFEXITED(status) && atomic_load(&w->rep->timed_to) != 0 &&
		       ((WEXITSTATUS(status) == WORKER_EXIT_FATAL && w->rep->message[0]) ||
			WEXITSTATUS(status) == WORKER_EXIT_TAINTED);
	bool fatal_task = by_task && WEXITSTATUS(status) == WORKER_EXIT_FATAL;
	bool narrowed = w->timed_out || by_task;
	/* Its own exit for a write before a result buffer (the worker found its canary
	 * broken), unless the host had already killed it as corrupt: told below. */
	bool tainted =
		WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_TAINTED && !w->corrupt;
	if (tainted) {
		w->corrupt = true;
		snprintf(w->corrupt_why, sizeof w->corrupt_why, "wrote before a result buffer");
	}
	/* A death in a call of several tasks (a batch, tasks in flight) that nothing
	 * narrows to one does not say which of them caused it. */
	unsigned in_call_n = 0;
	for (uint64_t k = w->tt_tail; k != w->tt_head; k++) {
		uint64_t at = w->tt[k & w->tt_mask].pos - w->task_free;
		in_call_n += at >= from - w->task_free && at < to - w->task_free;
	}
	bool unsure = in_call_n > 1 && !narrowed && (busy || w->corrupt);
	while (tasks_held(w)) {
		struct task_ent t = *tasks_front(w);
		const void *input = ring_payload(ring_at(&w->tasks, t.pos));
		/* The call it was in: [from, to), one task or a whole batch. Tasks before it
		 * finished, but their results never reached us: they run again. */
		bool in_call = t.pos - w->task_free >= from - w->task_free &&
			       t.pos - w->task_free < to - w->task_free;
		tasks_pop(w);
		UI_SET(h->flow.in_flight, h->flow.in_flight - 1);
		if (h->ctl.killing) {
			UI_ADD(h->stats.not_run, 1);
			failures_not_run(h, t.id, t.attempt);
		} else if (in_call && narrowed && t.pos - w->task_free >= timed - w->task_free) {
			/* In flight beside the one that timed out or ended it: not its fault. */
			h->pool.up->requeue(h, &t, input, -1, w->stage);
		} else if (in_call && unsure && !t.alone) {
			/* One of them did it: each runs again alone (tasks.h), and only one
			 * that kills its worker alone is blamed, so the others are never
			 * called poison for being beside it. A task alone already (given
			 * several by a path that does not isolate) is blamed as before. */
			t.alone = true;
			h->pool.up->requeue(h, &t, input, -1, w->stage);
		} else if (in_call && w->corrupt) {
			/* Which task did it is not known for sure: a strike, and it runs again,
			 * unless this keeps happening to it. */
			if (++t.strikes >= TASK_MAX_STRIKES) {
				UI_ADD(w->failed, 1);
				snprintf(msg, sizeof msg,
					 "its worker was killed %u times while running it "
					 "(last: worker %d (%s) %s)",
					 t.strikes, w->index, WHERE_OF(h, w), w->corrupt_why);
				h->pool.up->outcome(h, w, &t, input, CAUSE_FINAL, NULL, 0, msg, 0);
			} else {
				h->pool.up->requeue(h, &t, input, -1, w->stage);
			}
		} else if (in_call && (busy || w->timed_out)) {
			if (w->timed_out) {
				UI_ADD(w->timeouts, 1);
				snprintf(msg, sizeof msg, "timed out after %g s on worker %d (%s)",
					 stagecfg_task_timeout(h->cfg, w->stage), w->index,
					 WHERE_OF(h, w));
				h->pool.up->outcome(h, w, &t, input, CAUSE_TIMEOUT, NULL, 0, msg,
						    stagecfg_task_timeout(h->cfg, w->stage));
			} else if (fatal_task) {
				/* gpud_task_fatal in flight: its failure and message, as from
				 * process() (an error, not a crash). */
				UI_ADD(w->failed, 1);
				worker_message(w, msg, sizeof msg,
					       "gpud_task_fatal() without a message");
				h->pool.up->outcome(h, w, &t, input, CAUSE_ERROR, NULL, 0, msg,
						    (double)wait_since(wait_now_ns(), since) *
							    1e-9);
			} else {
				uint64_t now = wait_now_ns();
				enum cause cause = CAUSE_CRASH;
				UI_ADD(w->failed, 1);
				/* A task that crashed a worker before is the likely culprit:
				 * this restart is its, not the GPU's. */
				if (t.crashes++ > 0)
					w->free_restart = true;
				if (t.crashes > stagecfg_max_retries(h->cfg, w->stage) &&
				    t.crashes > 1) {
					cause = CAUSE_FINAL;
					snprintf(msg, sizeof msg,
						 "poison task: %u workers died while "
						 "running it (last: worker %d (%s) %s)",
						 t.crashes, w->index, WHERE_OF(h, w), how);
				} else {
					snprintf(msg, sizeof msg,
						 "worker %d (%s) %s while running "
						 "task %llu",
						 w->index, WHERE_OF(h, w), how,
						 (unsigned long long)t.id);
				}
				h->pool.up->outcome(h, w, &t, input, cause, NULL, 0, msg,
						    (double)wait_since(now, since) * 1e-9);
			}
		} else {
			h->pool.up->requeue(h, &t, input, -1, w->stage);
		}
	}
	w->task_free = w->task_head;
	if (tainted)
		ui_say(h, UI_EVENT,
		       "worker %d (%s) exited tainted: its plugin wrote before a result buffer",
		       w->index, WHERE_OF(h, w));
	else if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_FATAL && !w->corrupt &&
		 worker_message(w, msg, sizeof msg, "")[0])
		/* A plugin that calls exit(70) itself leaves no message: that is an exit
		 * like any other, told below. */
		ui_say(h, UI_EVENT, "worker %d (%s) restarted at its plugin's request: %s",
		       w->index, WHERE_OF(h, w), msg);
	else if (!w->timed_out && !h->ctl.killing && !w->corrupt && !w->held_still)
		ui_say(h, UI_EVENT, "worker %d (%s) %s", w->index, WHERE_OF(h, w), how);
}

void lifecycle_take_back(struct host *h, struct host_worker *w)
{
	while (tasks_held(w)) {
		struct task_ent t = *tasks_front(w);
		h->pool.up->requeue(h, &t, ring_payload(ring_at(&w->tasks, t.pos)), -1, w->stage);
		tasks_pop(w);
		UI_SET(h->flow.in_flight, h->flow.in_flight - 1);
	}
	/* Tasks written but never handed over (a worker still starting) were never seen:
	 * the ring goes back to what it was handed, so that no hole is left for its
	 * process, or its successor, to read as tasks. */
	w->task_head = atomic_load_explicit(&w->feed->task_head, memory_order_relaxed);
	w->task_free = w->task_head;
}

/* Where w's restarts are counted: its GPU, or (a CPU stage's worker) its own slot,
 * after the GPUs': a stage's workers are no one GPU's, and one that keeps crashing is
 * retired alone. */
static unsigned restart_slot(const struct host *h, const struct host_worker *w)
{
	if (w->stage < h->pool.n_stages)
		return (unsigned)groups_count(h->cfg) + (unsigned)w->index - h->pool.n_gpu_workers;
	return (unsigned)w->index / h->cfg->workers_per_gpu;
}

static void restart(struct host *h, struct host_worker *w)
{
	unsigned slot = restart_slot(h, w);
	if (h->ctl.killing || h->ctl.stopping || h->ctl.interrupted || h->pool.retired[slot]) {
		UI_SET(w->state, HW_GONE);
		return;
	}
	bool free_restart = w->free_restart;
	w->free_restart = false;
	if (!free_restart && h->pool.restarts[slot] >= h->cfg->max_worker_restarts) {
		char msg[300], gpus[GROUPS_LABEL];
		if (w->stage < h->pool.n_stages)
			snprintf(msg, sizeof msg,
				 "stage %s: worker %d retired: it was restarted %u times "
				 "(max_worker_restarts = %u)",
				 h->pool.stages[w->stage].name, w->index, h->pool.restarts[slot],
				 h->cfg->max_worker_restarts);
		else
			snprintf(msg, sizeof msg,
				 "GPU %s retired: its workers were restarted %u times "
				 "(max_worker_restarts = %u)",
				 groups_label(h->cfg, w->gpu_id, gpus, sizeof gpus),
				 h->pool.restarts[slot], h->cfg->max_worker_restarts);
		UI_SET(w->state, HW_GONE);
		UI_SET(w->end, END_ERROR);
		UI_SET(h->pool.retired[slot], true);
		/* Its other workers finish what they hold, then leave too. */
		for (unsigned i = 0; i < h->pool.n; i++) {
			struct host_worker *o = &h->pool.w[i];
			if (o != w && restart_slot(h, o) == slot && o->state == HW_READY) {
				UI_SET(o->state, HW_STOPPING);
				atomic_store_explicit(&o->feed->stop, 1, memory_order_release);
				wait_ring(shm_worker_bell(o));
			}
		}
		ui_say(h, UI_EVENT, "%s", msg);
		h->pool.up->worker_event(h, GPUD_GPU_RETIRED, w, msg);
		return;
	}
	if (!free_restart)
		h->pool.restarts[slot]++;
	UI_ADD(h->stats.worker_restarts, 1);
	UI_ADD(w->restarts, 1);
	int rc = shm_renew_worker(h, w);
	if (rc == 0)
		rc = spawn_worker(h, w);
	if (rc < 0) {
		ui_say(h, UI_EVENT, "cannot restart worker %d: %s", w->index, strerror(-rc));
		UI_SET(w->end, END_ERROR);
		UI_SET(w->state, HW_GONE);
	}
}

void lifecycle_exited(struct host *h, struct host_worker *w)
{
	char how[64], msg[SHM_MSG_MAX + 128], wmsg[SHM_MSG_MAX];
	int status = w->exit_status;
	uint32_t s = atomic_load(&w->rep->state);

	w->exited = false;
	w->pid = -1;
	how_it_ended(status, how, sizeof how);
	switch (w->state) {
	case HW_GONE:
		return;
	case HW_STARTING:
		if (w->setup_timed_out) {
			snprintf(msg, sizeof msg,
				 "worker %d (%s): setup did not finish within "
				 "%g s (setup_timeout); killed",
				 w->index, WHERE_OF(h, w), h->cfg->setup_timeout);
			setup_failed(h, w, msg);
		} else if (s == WS_SETUP_FAILED) {
			setup_failed(h, w,
				     worker_message(w, wmsg, sizeof wmsg,
						    "setup failed without a message"));
		} else {
			snprintf(msg, sizeof msg, "worker %d (%s) %s during setup", w->index,
				 WHERE_OF(h, w), how);
			setup_failed(h, w, msg);
		}
		return;
	case HW_STOPPING: {
		/* Killed or dead with tasks still held (a task that ran past task_timeout
		 * on a worker told to stop): crashed() says what became of them, and that
		 * is the whole story, not a cleanup that failed. */
		bool in_task = tasks_held(w) != 0;
		if (in_task)
			crashed(h, w, status);
		/* Told to stop while still in setup (the run ended first): how it ended
		 * belongs to setup, not cleanup. */
		if (s == WS_SETUP_FAILED) {
			setup_failed(h, w,
				     worker_message(w, wmsg, sizeof wmsg,
						    "setup failed without a message"));
		} else if (w->cancelled) {
			/* Killed in setup because the run had ended: nothing to report. */
		} else if (in_task && s != WS_CLEANUP && s != WS_CLEANUP_FAILED) {
			/* Said by crashed(). */
		} else if ((s == WS_SPAWNED || s == WS_SETUP) && !h->ctl.killing) {
			snprintf(msg, sizeof msg, "worker %d (%s) %s during setup", w->index,
				 WHERE_OF(h, w), how);
			setup_failed(h, w, msg);
		} else if (s == WS_CLEANUP_FAILED) {
			UI_SET(w->end, END_ERROR);
			worker_message(w, wmsg, sizeof wmsg, "cleanup failed without a message");
			ui_say(h, UI_EVENT, "worker %d (%s) cleanup failed: %s", w->index,
			       WHERE_OF(h, w), wmsg);
			h->pool.up->worker_event(h, GPUD_CLEANUP_FAILED, w, wmsg);
		} else if (s != WS_DONE && w->timed_out) {
			UI_SET(w->end, END_ERROR);
			snprintf(msg, sizeof msg,
				 "worker %d (%s): cleanup did not finish within "
				 "%g s; killed",
				 w->index, WHERE_OF(h, w), h->cfg->cleanup_timeout);
			ui_say(h, UI_EVENT, "%s", msg);
			h->pool.up->worker_event(h, GPUD_CLEANUP_FAILED, w, msg);
		} else if (s != WS_DONE && !h->ctl.killing) {
			snprintf(msg, sizeof msg, "worker %d (%s) %s during cleanup", w->index,
				 WHERE_OF(h, w), how);
			ui_say(h, UI_EVENT, "%s", msg);
			h->pool.up->worker_event(h, GPUD_CLEANUP_FAILED, w, msg);
		}
		if (w->end == END_NONE)
			UI_SET(w->end, END_FINISHED);
		UI_SET(w->state, HW_GONE);
		return;
	}
	case HW_READY:
		crashed(h, w, status);
		restart(h, w);
		return;
	}
}

void lifecycle_stop_all(struct host *h)
{
	h->ctl.stopping = true;
	h->ctl.stop_ns = wait_now_ns();
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		if (w->state == HW_STARTING && w->pid > 0) {
			/* Every task has its outcome: a setup still running can only delay
			 * the end (it may be minutes of model loading). */
			UI_SET(w->state, HW_STOPPING);
			w->cancelled = true;
			lifecycle_kill(w);
			continue;
		}
		if (w->state != HW_READY)
			continue;
		UI_SET(w->state, HW_STOPPING);
		atomic_store_explicit(&w->feed->stop, 1, memory_order_release);
		wait_ring(shm_worker_bell(w));
	}
}

void lifecycle_kill_all(struct host *h)
{
	h->ctl.killing = true;
	h->ctl.stopping = true;
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		if (w->pid > 0) {
			if (w->state == HW_READY || w->state == HW_STARTING)
				UI_SET(w->state, HW_STOPPING);
			lifecycle_kill(w);
		}
	}
}

unsigned lifecycle_live(const struct host *h)
{
	unsigned n = 0;
	for (unsigned i = 0; i < h->pool.n; i++)
		n += h->pool.w[i].state != HW_GONE || h->pool.w[i].exited;
	return n;
}
