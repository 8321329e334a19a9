/* SPDX-License-Identifier: MIT */
/*
 * Worker lifecycles seen from the host: setup results, deaths (noticed at once through
 * SIGCHLD, whose handler rings the host's doorbell), host-enforced timeouts, restarts
 * within a per-GPU budget, and the orderly stop at the end of a run.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "host.h"
#include "ui.h"
#include "wait.h"

/* While a task limit is set, the host looks at least this often for a task that began
 * while it slept (it is not woken for task starts unless its sink wants them). */
#define TIMEOUT_POLL_NS 20000000u

volatile sig_atomic_t host_sigchld, host_interrupts;
static _Atomic uint32_t *sig_bell;

static void on_signal(int sig)
{
	if (sig == SIGCHLD)
		host_sigchld = 1;
	else
		host_interrupts++;
	if (sig_bell) {
		atomic_fetch_add(sig_bell, 1);
		wait_futex_wake(sig_bell);
	}
}

void host_install_signals(struct host *h)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sig_bell = &h->hdr->host_bell.bell;
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, NULL);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	/* A closed standard output shows up as a write error in the sink. */
	signal(SIGPIPE, SIG_IGN);
}

/* cleanup_timeout: the run must end even if a plugin's cleanup hangs. */
static double cleanup_limit(const struct host *h)
{
	return h->cfg->cleanup_timeout;
}

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

static void setup_failed(struct host *h, struct host_worker *w, const char *why)
{
	h->stats.setup_failures++;
	ui_say(h, UI_EVENT, "worker %d (GPU %d) setup failed: %s", w->index, w->gpu_id, why);
	events_worker(h, GPUD_SETUP_FAILED, w, why);
	w->end = END_ERROR;
	w->state = HW_GONE;
}

void lifecycle_poll(struct host *h, struct host_worker *w)
{
	uint32_t s = atomic_load_explicit(&w->ctl->state, memory_order_acquire);
	if (s == WS_READY) {
		w->state = HW_READY;
		h->ever_ready = true;
		w->window = 1; /* until its first results tell how long its tasks take */
	} else if (s == WS_SETUP_FAILED) {
		setup_failed(h, w, w->ctl->message);
	}
}

/* A worker died while it held tasks: the one it was running gets the blame (an error,
 * or a timeout if we killed it for one), the others go back to the queue. */
static void crashed(struct host *h, struct host_worker *w, int status)
{
	char how[64], msg[SHM_MSG_MAX];
	uint64_t started = atomic_load(&w->ctl->task_tail);
	uint64_t run_from = atomic_load(&w->ctl->run_from);
	bool busy = atomic_load(&w->ctl->busy_since_ns) != 0;
	uint64_t pos = w->task_free;
	struct shm_rec *t;

	how_it_ended(status, how, sizeof how);
	/* Positions written by the dead process: keep them inside what we gave it. */
	if (started - w->task_free > w->task_head - w->task_free)
		started = w->task_free;
	if (run_from - w->task_free > started - w->task_free)
		run_from = started;
	while ((t = ring_peek(&w->tasks, &pos, w->task_head))) {
		uint64_t span = ring_span(t->size);
		/* The call it was in: [run_from, started), one task or a whole batch. Tasks
		 * before it finished, but their results never reached us: they run again. */
		bool in_call = pos >= run_from && pos < started;
		if (h->killing) {
			h->stats.not_run++;
		} else if (in_call && (busy || w->timed_out)) {
			if (w->timed_out) {
				w->timeouts++;
				snprintf(msg, sizeof msg, "timed out after %g s on worker %d (GPU %d)",
					 h->cfg->task_timeout, w->index, w->gpu_id);
				events_outcome(h, w, t, GPUD_TASK_TIMEOUT, NULL, 0, msg,
					       h->cfg->task_timeout);
			} else {
				w->failed++;
				snprintf(msg, sizeof msg, "worker %d (GPU %d) %s while running task %llu",
					 w->index, w->gpu_id, how, (unsigned long long)t->task_id);
				events_outcome(h, w, t, GPUD_TASK_ERROR, NULL, 0, msg,
					       (double)(wait_now_ns() - atomic_load(&w->ctl->busy_since_ns)) * 1e-9);
			}
		} else {
			events_requeue(h, t, t->attempt, -1);
		}
		pos += span;
		h->in_flight--;
	}
	w->outstanding = 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == WORKER_EXIT_FATAL)
		ui_say(h, UI_EVENT, "worker %d (GPU %d) restarted at its plugin's request: %s",
		       w->index, w->gpu_id, w->ctl->message);
	else if (!w->timed_out && !h->killing)
		ui_say(h, UI_EVENT, "worker %d (GPU %d) %s", w->index, w->gpu_id, how);
}

static void restart(struct host *h, struct host_worker *w)
{
	unsigned slot = (unsigned)w->index / h->cfg->workers_per_gpu;
	if (h->killing || h->stopping || h->retired[slot]) {
		w->state = HW_GONE;
		return;
	}
	if (h->restarts[slot] >= h->cfg->max_worker_restarts) {
		char msg[200];
		snprintf(msg, sizeof msg, "GPU %d retired: its workers were restarted %u times "
					  "(max_worker_restarts = %u)",
			 w->gpu_id, h->restarts[slot], h->cfg->max_worker_restarts);
		w->state = HW_GONE;
		w->end = END_ERROR;
		h->retired[slot] = true;
		/* Its other workers finish what they hold, then leave too. */
		for (unsigned i = 0; i < h->n_workers; i++) {
			struct host_worker *o = &h->w[i];
			if (o != w && o->gpu_id == w->gpu_id && o->state == HW_READY) {
				o->state = HW_STOPPING;
				atomic_store_explicit(&o->ctl->stop, 1, memory_order_release);
				wait_ring(&o->ctl->bell);
			}
		}
		ui_say(h, UI_EVENT, "%s", msg);
		events_worker(h, GPUD_GPU_RETIRED, w, msg);
		return;
	}
	h->restarts[slot]++;
	h->stats.worker_restarts++;
	w->restarts++;
	shm_reset_worker(h, w);
	int rc = spawn_worker(h, w);
	if (rc < 0) {
		ui_say(h, UI_EVENT, "cannot restart worker %d: %s", w->index, strerror(-rc));
		w->end = END_ERROR;
		w->state = HW_GONE;
	}
}

static void exited(struct host *h, struct host_worker *w, int status)
{
	char how[64], msg[SHM_MSG_MAX + 128];
	uint32_t s = atomic_load(&w->ctl->state);

	w->pid = -1;
	how_it_ended(status, how, sizeof how);
	switch (w->state) {
	case HW_GONE:
		return;
	case HW_STARTING:
		if (s == WS_SETUP_FAILED) {
			setup_failed(h, w, w->ctl->message);
		} else {
			snprintf(msg, sizeof msg, "worker %d (GPU %d) %s during setup", w->index,
				 w->gpu_id, how);
			setup_failed(h, w, msg);
		}
		return;
	case HW_STOPPING:
		dispatch_drain(h, w);
		if (w->outstanding)
			crashed(h, w, status);
		/* Told to stop while still in setup (the run ended first): how it ended
		 * belongs to setup, not cleanup. */
		if (s == WS_SETUP_FAILED) {
			setup_failed(h, w, w->ctl->message);
		} else if (w->cancelled) {
			/* Killed in setup because the run had ended: nothing to report. */
		} else if ((s == WS_SPAWNED || s == WS_SETUP) && !h->killing) {
			snprintf(msg, sizeof msg, "worker %d (GPU %d) %s during setup", w->index,
				 w->gpu_id, how);
			setup_failed(h, w, msg);
		} else if (s == WS_CLEANUP_FAILED) {
			w->end = END_ERROR;
			events_worker(h, GPUD_CLEANUP_FAILED, w, w->ctl->message);
		} else if (s != WS_DONE && w->timed_out) {
			snprintf(msg, sizeof msg, "worker %d (GPU %d): cleanup did not finish within "
				 "%g s; killed", w->index, w->gpu_id, cleanup_limit(h));
			events_worker(h, GPUD_CLEANUP_FAILED, w, msg);
		} else if (s != WS_DONE && !h->killing) {
			snprintf(msg, sizeof msg, "worker %d (GPU %d) %s during cleanup", w->index,
				 w->gpu_id, how);
			events_worker(h, GPUD_CLEANUP_FAILED, w, msg);
		}
		if (w->end == END_NONE)
			w->end = END_FINISHED;
		w->state = HW_GONE;
		return;
	case HW_READY:
		dispatch_drain(h, w);
		crashed(h, w, status);
		restart(h, w);
		return;
	}
}

void lifecycle_reap(struct host *h)
{
	pid_t pid;
	int status;
	host_sigchld = 0;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (unsigned i = 0; i < h->n_workers; i++) {
			if (h->w[i].pid == pid) {
				exited(h, &h->w[i], status);
				break;
			}
		}
	}
}

/* Workers told to stop get cleanup_limit() to exit; then they are killed. */
static uint64_t cleanup_deadline(struct host *h, uint64_t now)
{
	if (!h->stopping || h->killing || cleanup_limit(h) <= 0)
		return 0;
	uint64_t deadline = h->stop_ns + (uint64_t)(cleanup_limit(h) * 1e9);
	if (now < deadline)
		return deadline;
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct host_worker *w = &h->w[i];
		if (w->state == HW_STOPPING && w->pid > 0 && !w->timed_out && !w->cancelled) {
			w->timed_out = true;
			kill(w->pid, SIGKILL);
		}
	}
	return 0;
}

uint64_t lifecycle_timeouts(struct host *h, uint64_t now)
{
	double limit_s = h->cfg->task_timeout;
	uint64_t cleanup = cleanup_deadline(h, now);
	if (limit_s <= 0 || h->stopping)
		return cleanup;
	uint64_t limit = (uint64_t)(limit_s * 1e9);
	uint64_t deadline = now + TIMEOUT_POLL_NS;
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct host_worker *w = &h->w[i];
		if (w->state != HW_READY || w->pid <= 0 || w->timed_out)
			continue;
		uint64_t since = atomic_load_explicit(&w->ctl->busy_since_ns, memory_order_relaxed);
		/* A task may have begun after `now` was read: that is not a long one (and
		 * now - since would wrap around). */
		if (!since || since >= now)
			continue;
		if (now - since >= limit) {
			/* A plugin stuck in a kernel or a C loop cannot be interrupted from
			 * inside: the worker goes, a fresh one takes its place. */
			w->timed_out = true;
			kill(w->pid, SIGKILL);
		} else if (since + limit < deadline) {
			deadline = since + limit;
		}
	}
	return deadline;
}

void lifecycle_stop_all(struct host *h)
{
	h->stopping = true;
	h->stop_ns = wait_now_ns();
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct host_worker *w = &h->w[i];
		if (w->state == HW_STARTING && w->pid > 0) {
			/* Every task has its outcome: a setup still running can only delay
			 * the end (it may be minutes of model loading). */
			w->state = HW_STOPPING;
			w->cancelled = true;
			kill(w->pid, SIGKILL);
			continue;
		}
		if (w->state != HW_READY)
			continue;
		w->state = HW_STOPPING;
		atomic_store_explicit(&w->ctl->stop, 1, memory_order_release);
		wait_ring(&w->ctl->bell);
	}
}

void lifecycle_kill_all(struct host *h)
{
	h->killing = true;
	h->stopping = true;
	for (unsigned i = 0; i < h->n_workers; i++) {
		struct host_worker *w = &h->w[i];
		if (w->pid > 0) {
			if (w->state == HW_READY || w->state == HW_STARTING)
				w->state = HW_STOPPING;
			kill(w->pid, SIGKILL);
		}
	}
}

unsigned lifecycle_live(const struct host *h)
{
	unsigned n = 0;
	for (unsigned i = 0; i < h->n_workers; i++)
		n += h->w[i].state != HW_GONE;
	return n;
}
