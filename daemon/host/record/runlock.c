/* SPDX-License-Identifier: MIT */
/* One run of a job at a time (runlock.h). */
#define _GNU_SOURCE
#include "record/runlock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "record/outputs.h"

/* The lock file for `path`: `.NAME.lock` beside the file it names, symlinks resolved (a
 * link and its target are one output), or `.gpud.lock` inside a folder (a sink's `dir`).
 * malloc'd; NULL when there is nothing to lock (no such folder). */
static char *lock_path(const char *path, bool folder)
{
	char *lp = NULL, *real = realpath(path, NULL);
	if (folder) {
		if (real && asprintf(&lp, "%s/.gpud.lock", real) < 0)
			lp = NULL;
		free(real);
		return lp;
	}
	const char *p = real ? real : path;
	const char *slash = strrchr(p, '/');
	int rc = slash ? asprintf(&lp, "%.*s/.%s.lock", (int)(slash - p), p, slash + 1)
		       : asprintf(&lp, ".%s.lock", p);
	free(real);
	return rc < 0 ? NULL : lp;
}

struct guarded {
	const char *path; /* as the job names it, for messages */
	char *lock;       /* its lock file (malloc'd) */
};

/* The outputs a run of `c` writes that another run of the job would write too, each
 * with its lock file: the journal, the sink's files and folders. */
static unsigned guarded(const struct cfg *c, struct guarded *out)
{
	unsigned n = 0;
	if (c->journal && !c->journal_off && (out[n].lock = lock_path(c->journal, false)))
		out[n++].path = c->journal;
	for (size_t i = 0; i < c->sink.count && n < RUNLOCK_MAX; i++) {
		const char *k = c->sink.kv[i].key, *v = c->sink.kv[i].value;
		size_t kl = strlen(k);
		struct stat st;
		bool is_dir = stat(v, &st) == 0 && S_ISDIR(st.st_mode);
		bool dir_key = !strcmp(k, "dir") || (kl > 4 && !strcmp(k + kl - 4, "_dir"));
		char *lp;
		if (dir_key && is_dir)
			lp = lock_path(v, true);
		else if (outputs_file_key(k, v) && (stat(v, &st) != 0 || S_ISREG(st.st_mode)))
			lp = lock_path(v, false); /* (not /dev/null, a terminal, a FIFO) */
		else
			continue;
		bool dup = !lp;
		for (unsigned j = 0; lp && j < n; j++)
			dup |= strcmp(out[j].lock, lp) == 0;
		if (dup) {
			free(lp);
			continue;
		}
		out[n].path = v;
		out[n++].lock = lp;
	}
	return n;
}

static void free_guarded(struct guarded *g, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(g[i].lock);
}

/* The refusal, naming the holder as its lock file says. */
static void held_by(int fd, const char *path, char *why, size_t len)
{
	char who[400];
	ssize_t n = fd >= 0 ? pread(fd, who, sizeof who - 1, 0) : -1;
	who[n > 0 ? n : 0] = '\0';
	who[strcspn(who, "\n")] = '\0';
	snprintf(why, len,
		 "another run of this job is running (%s) and holds %s: two runs would "
		 "interleave their journal records and outputs; wait for it to end, or "
		 "stop it",
		 who[0] ? who : "who, its lock file does not say", path);
}

/* Takes the lock `lp` (owned from here) for the output `path`. */
static int take_one(struct runlock *l, const char *path, char *lp, const struct cfg *c, char *why,
		    size_t len)
{
	for (int tries = 0; tries < 100; tries++) {
		int fd = open(lp, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
		if (fd < 0) {
			/* No folder, or not ours to write: the run itself will say so when it
			 * opens the file; there is nothing here another run could share. */
			free(lp);
			return 0;
		}
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			bool busy = errno == EWOULDBLOCK;
			if (busy)
				held_by(fd, path, why, len);
			close(fd);
			free(lp);
			/* A file system without locks (ENOLCK): nothing to hold. */
			return busy ? -1 : 0;
		}
		/* The holder before us removes its lock file at its end, while it holds
		 * it: if the name is not our file any more, the lock is on nothing. */
		struct stat a, b;
		if (fstat(fd, &a) == 0 && stat(lp, &b) == 0 && a.st_dev == b.st_dev &&
		    a.st_ino == b.st_ino) {
			char host[256] = "", when[64] = "?";
			gethostname(host, sizeof host - 1);
			time_t now = time(NULL);
			struct tm tm;
			if (localtime_r(&now, &tm))
				strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
			char who[700];
			int k = snprintf(who, sizeof who, "pid %d on %s, started %s, job %s\n",
					 (int)getpid(), host[0] ? host : "?", when, c->path);
			if (ftruncate(fd, 0) < 0 || pwrite(fd, who, (size_t)k, 0) < 0) {
				/* The lock holds whatever the file says. */
			}
			l->fd[l->n] = fd;
			l->path[l->n++] = lp;
			return 0;
		}
		close(fd);
	}
	free(lp);
	snprintf(why, len, "cannot lock %s: its lock file keeps being replaced", path);
	return -1;
}

int runlock_take(struct runlock *l, const struct cfg *c, char *why, size_t len)
{
	struct guarded g[RUNLOCK_MAX];
	unsigned n = guarded(c, g);
	*l = (struct runlock){.n = 0};
	for (unsigned i = 0; i < n; i++) {
		char *lp = g[i].lock;
		g[i].lock = NULL;
		if (take_one(l, g[i].path, lp, c, why, len) < 0) {
			free_guarded(g, n);
			runlock_release(l);
			return -1;
		}
	}
	return 0;
}

/* Whether an flock is held on the file `fd` is open on, from /proc/locks (looking there
 * takes nothing, so a run starting meanwhile is not refused because of us). */
static bool flocked(int fd)
{
	struct stat st;
	FILE *f = fopen("/proc/locks", "re");
	if (!f || fstat(fd, &st) < 0) {
		if (f)
			fclose(f);
		return false;
	}
	char line[256];
	bool held = false;
	while (!held && fgets(line, sizeof line, f)) {
		char kind[16];
		unsigned maj, min;
		unsigned long ino;
		/* "1: FLOCK  ADVISORY  WRITE 1234 08:01:123456 0 EOF"; a "->" line waits. */
		if (strstr(line, "->"))
			continue;
		if (sscanf(line, "%*d: %15s %*s %*s %*d %x:%x:%lu", kind, &maj, &min, &ino) == 4 &&
		    !strcmp(kind, "FLOCK") && ino == st.st_ino && maj == major(st.st_dev) &&
		    min == minor(st.st_dev))
			held = true;
	}
	fclose(f);
	return held;
}

int runlock_probe(const struct cfg *c, char *why, size_t len)
{
	struct guarded g[RUNLOCK_MAX];
	unsigned n = guarded(c, g);
	int rc = 0;
	for (unsigned i = 0; i < n && !rc; i++) {
		int fd = open(g[i].lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0 && flocked(fd)) {
			held_by(fd, g[i].path, why, len);
			rc = -1;
		}
		if (fd >= 0)
			close(fd);
	}
	free_guarded(g, n);
	return rc;
}

void runlock_release(struct runlock *l)
{
	for (unsigned i = 0; i < l->n; i++) {
		unlink(l->path[i]); /* while held: see take_one */
		close(l->fd[i]);
		free(l->path[i]);
	}
	l->n = 0;
}
