/* SPDX-License-Identifier: MIT */
/*
 * The host's children (lifecycle.h): workers reaped as they exit (their group killed
 * while the zombie still holds it), whatever they left behind reaped as the subreaper's
 * orphans, everything left killed at the end (lifecycle_sweep); the caller's own
 * children (libgpud in someone else's process) noted at the start and never touched.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "workers/children.h"
#include "host.h"
#include "workers/signals.h" /* host_sigchld */

static struct host_worker *worker_by_pid(struct host *h, pid_t pid)
{
	for (unsigned i = 0; i < h->pool.n; i++)
		if (h->pool.w[i].pid == pid && !h->pool.w[i].exited)
			return &h->pool.w[i];
	return NULL;
}

/* The caller's children when the run began (libgpud): never killed nor reaped by the
 * run. Known by pid and start time, so that a pid reused meanwhile is not mistaken. */
#define FOREIGN_MAX 4096
struct child {
	pid_t pid;
	char state;
	unsigned long long start; /* clock ticks after boot (/proc/PID/stat, field 22) */
};
static struct child foreign[FOREIGN_MAX];
static unsigned n_foreign;

/* Child `pid`'s state, parent and start time from /proc; false when it is gone. */
static bool child_stat(pid_t pid, struct child *out, pid_t *ppid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	size_t len = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[len] = '\0';
	/* "pid (comm) state ppid ...": comm may hold anything, so parse after the last
	 * ')'. */
	char *p = strrchr(buf, ')');
	int pp;
	out->pid = pid;
	if (!p || sscanf(p + 1,
			 " %c %d %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
			 "%*s %llu",
			 &out->state, &pp, &out->start) != 3)
		return false;
	*ppid = pp;
	return true;
}

/* The processes whose parent is us, from /proc; up to `max`. */
static unsigned our_children(struct child *out, unsigned max)
{
	DIR *d = opendir("/proc");
	struct dirent *e;
	unsigned n = 0;
	pid_t self = getpid(), ppid;
	if (!d)
		return 0;
	while (n < max && (e = readdir(d))) {
		if (e->d_name[0] < '1' || e->d_name[0] > '9')
			continue;
		if (child_stat((pid_t)atoi(e->d_name), &out[n], &ppid) && ppid == self)
			n++;
	}
	closedir(d);
	return n;
}

static bool is_foreign(const struct child *c)
{
	for (unsigned i = 0; i < n_foreign; i++)
		if (foreign[i].pid == c->pid && foreign[i].start == c->start)
			return true;
	return false;
}

static bool pid_foreign(pid_t pid)
{
	struct child c;
	pid_t ppid;
	bool any = false;
	for (unsigned i = 0; i < n_foreign && !any; i++)
		any = foreign[i].pid == pid;
	return any && child_stat(pid, &c, &ppid) && is_foreign(&c);
}

void lifecycle_children_note(void)
{
	n_foreign = our_children(foreign, FOREIGN_MAX);
}

void lifecycle_children_keep(pid_t pid)
{
	pid_t ppid;
	if (n_foreign < FOREIGN_MAX && child_stat(pid, &foreign[n_foreign], &ppid))
		n_foreign++;
}

void lifecycle_children_forget(void)
{
	n_foreign = 0;
}

/* Reaps `pid`, which has exited: a worker's exit is marked; anything else is a process
 * a worker left behind, handed to us as the subreaper: reaped, nothing more. */
static void reap_one(struct host *h, pid_t pid)
{
	struct host_worker *w = worker_by_pid(h, pid);
	/* While the dead worker is a zombie its process group still exists, so whatever
	 * it left behind in it can be killed safely. */
	if (w)
		kill(-pid, SIGKILL);
	int status;
	if (waitpid(pid, &status, 0) < 0)
		return;
	if (w) {
		w->exit_status = status;
		w->exited = true;
	}
}

void lifecycle_reap(struct host *h)
{
	siginfo_t si;
	host_sigchld = 0;
	for (;;) {
		si.si_pid = 0;
		/* Look before reaping: the child may be the caller's (libgpud). */
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
			return;
		if (!n_foreign || !pid_foreign(si.si_pid)) {
			reap_one(h, si.si_pid);
			continue;
		}
		break;
	}
	/* A child of the caller's has exited and keeps its status for the caller: it
	 * hides the others from waitid, so they are found by pid. */
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		si.si_pid = 0;
		if (w->pid > 0 && !w->exited &&
		    waitid(P_PID, (id_t)w->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == w->pid)
			reap_one(h, w->pid);
	}
	struct child *kids = malloc(1024 * sizeof *kids);
	unsigned n = kids ? our_children(kids, 1024) : 0;
	for (unsigned i = 0; i < n; i++)
		if (kids[i].state == 'Z' && !is_foreign(&kids[i]))
			reap_one(h, kids[i].pid);
	free(kids);
}

unsigned lifecycle_sweep(void)
{
	struct child *kids = malloc(1024 * sizeof *kids);
	unsigned total = 0, n = 0;
	if (!kids)
		return 0;
	/* Each round kills what is below us now, but the caller's own children; their
	 * own children come to us as orphans for the next round. */
	for (int round = 0; round < 64; round++) {
		unsigned found = our_children(kids, 1024);
		n = 0;
		for (unsigned i = 0; i < found; i++)
			if (!is_foreign(&kids[i]))
				kids[n++] = kids[i];
		if (!n)
			break;
		for (unsigned i = 0; i < n; i++)
			kill(kids[i].pid, SIGKILL);
		for (unsigned i = 0; i < n; i++)
			while (waitpid(kids[i].pid, NULL, 0) < 0 && errno == EINTR)
				;
		total += n;
	}
	free(kids);
	return total;
}
