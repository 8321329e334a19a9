/* SPDX-License-Identifier: MIT */
/* The worker tied to the host, and the thread that watches it (attach.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "worker.h"

bool attach_forked_child;

static void on_fork_child(void)
{
	attach_forked_child = true;
}

/* The host holds the write end of the pipe on fd 6 and never writes: end of file means
 * it is gone. Unlike PR_SET_PDEATHSIG this survives a plugin changing its credentials,
 * and it takes the process group the host made for us (anything the plugin started)
 * along. That group, never "our group now" (kill(0)): the plugin may have moved us into
 * another one, the host's own among them. Its id is our pid, which no other process
 * can take while we live, so it is never anyone else's. */
static struct worker *watched; /* set once the shared memory is mapped */

/* While a call runs longer than HELD_NS, the results finished before it are published
 * from here (the loop publishes in bursts, and only between calls). The loop's own
 * publishing only moves the head on, and this only from the value it last saw to the
 * loop's committed one, so the head never goes back. */
static void publish_held(struct worker *w)
{
	uint64_t since = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed);
	uint64_t now = wait_now_ns();
	if (!since || now < since || now - since < HELD_NS)
		return;
	uint64_t cur = atomic_load_explicit(&w->rep->result_head, memory_order_relaxed);
	uint64_t head = atomic_load_explicit(&w->committed, memory_order_acquire);
	if (head == cur || head - cur > (UINT64_C(1) << 62))
		return; /* nothing held, or the loop has published past it */
	if (atomic_compare_exchange_strong_explicit(&w->rep->result_head, &cur, head,
						    memory_order_release, memory_order_relaxed))
		wait_ring_fast(w->host_bell);
}

/* A call past task_timeout in a plugin that can end it (gpud_worker_interrupt): asked
 * once to, while the loop cannot end the call meanwhile (call_ends waits). The host
 * kills the process when the call has not returned timeout_grace later. */
static void interrupt_late(struct worker *w)
{
	uint64_t s = atomic_load(&w->call_seq);
	if (!(s & 1) || s == atomic_load_explicit(&w->interrupted, memory_order_relaxed))
		return;
	/* Written before call_seq: this call's start, or a later call's (seen below). */
	uint64_t since = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed);
	uint64_t now = wait_now_ns();
	if (!since || now < since || now - since < w->interrupt_ns)
		return;
	atomic_store(&w->interrupting, s);
	if (atomic_load(&w->call_seq) == s) {
		atomic_store_explicit(&w->interrupted, s, memory_order_relaxed);
		w->plugin.worker.interrupt(w->state);
	}
	atomic_store(&w->interrupting, 0);
}

static void *watch_host(void *arg)
{
	(void)arg;
	struct pollfd p = {SHM_FD_HOST, POLLIN, 0};
	for (;;) {
		int n = poll(&p, 1, HELD_NS / 1000000u);
		if (n == 0) {
			struct worker *w = __atomic_load_n(&watched, __ATOMIC_ACQUIRE);
			if (w)
				publish_held(w);
			if (w && w->interrupts)
				interrupt_late(w);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		char c;
		if (n < 0 || read(SHM_FD_HOST, &c, 1) <= 0)
			break;
	}
	kill(-getpid(), SIGKILL);
	_exit(1);
}

int attach_to_host(long host_pid)
{
	pthread_t watcher;
	sigset_t all, old;
	/* Die with the host, and catch the case where it died before this line. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != (pid_t)host_pid)
		return -1;
	/* Signals meant for the job (Ctrl-C, a batch system's SIGTERM to every process,
	 * a closed terminal, Ctrl-Z) are the host's to act on. */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGTSTP, SIG_IGN);
	signal(SIGTTIN, SIG_IGN);
	signal(SIGTTOU, SIG_IGN);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int watching = pthread_create(&watcher, NULL, watch_host, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (watching != 0)
		return -1;
	if (pthread_atfork(NULL, NULL, on_fork_child) != 0) {
		fprintf(stderr, "gpud-worker: cannot register the fork handler\n");
		return -1;
	}
	return 0;
}

void attach_watch(struct worker *w)
{
	__atomic_store_n(&watched, w, __ATOMIC_RELEASE);
}
