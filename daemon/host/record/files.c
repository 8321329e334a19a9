/* SPDX-License-Identifier: MIT */
/*
 * The run's folder (the failures list, the dashboard's worker logs), made like a private
 * temporary folder: another local user must not be able to plant a folder or a symlink
 * that makes a run write somewhere else.
 */
#define _GNU_SOURCE
#include "record/files.h"
#include "util/log.h"
#include "record/failures.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The per-user base folder: ours, a folder (not a symlink to one), nobody else's to
 * read or write. 0, or -1 with why. */
static int check_private(const char *dir, char *why, size_t len)
{
	struct stat st;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, len, "cannot create %s: %s", dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st) < 0) {
		snprintf(why, len, "%s: %s", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, len, "%s is not a folder (a symlink?); refusing to use it", dir);
		return -1;
	}
	if (st.st_uid != getuid()) {
		snprintf(why, len, "%s belongs to uid %u, not to us (uid %u); refusing to use it",
			 dir, (unsigned)st.st_uid, (unsigned)getuid());
		return -1;
	}
	if (st.st_mode & 077) {
		snprintf(why, len,
			 "%s is open to other users (mode %03o; it must be 0700); "
			 "refusing to use it",
			 dir, (unsigned)(st.st_mode & 0777));
		return -1;
	}
	return 0;
}

/* Removes run folders older than FILES_KEEP_DAYS: their worker-*.log files and
 * failures list, then the folder. Anything else in one (a folder, a file of another name) keeps it.
 */
static void clean_old_runs(const char *base)
{
	DIR *d = opendir(base);
	struct dirent *e;
	time_t cutoff = time(NULL) - (time_t)FILES_KEEP_DAYS * 86400;
	if (!d)
		return;
	while ((e = readdir(d))) {
		struct stat st;
		if (strncmp(e->d_name, "run-", 4) != 0 ||
		    fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode) || st.st_uid != getuid() || st.st_mtime >= cutoff)
			continue;
		int fd = openat(dirfd(d), e->d_name,
				O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		DIR *run = fd >= 0 ? fdopendir(fd) : NULL;
		if (!run) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		struct dirent *f;
		while ((f = readdir(run)))
			if (strncmp(f->d_name, "worker-", 7) == 0 ||
			    strcmp(f->d_name, FILES_FAILURES) == 0)
				unlinkat(fd, f->d_name, 0);
		closedir(run);
		unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
	}
	closedir(d);
}

static char *default_dir(char *why, size_t len)
{
	const char *tmp = getenv("TMPDIR");
	char *base = NULL, *run = NULL, stamp[32];
	time_t now = time(NULL);
	if (asprintf(&base, "%s/gpud-%u", tmp && *tmp ? tmp : "/tmp", (unsigned)getuid()) < 0) {
		snprintf(why, len, "out of memory");
		return NULL;
	}
	if (check_private(base, why, len) < 0) {
		free(base);
		return NULL;
	}
	/* Once a process: the folder holds a run folder for every run of the last
	 * FILES_KEEP_DAYS (thousands for a program that runs job after job), and reading it
	 * all again at each run's start adds up; a day-old folder can wait for the next
	 * process. */
	static char *cleaned;
	if (!cleaned || strcmp(cleaned, base) != 0) {
		clean_old_runs(base);
		free(cleaned);
		cleaned = strdup(base);
	}
	strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&now));
	if (asprintf(&run, "%s/run-%s-XXXXXX", base, stamp) < 0)
		run = NULL;
	free(base);
	if (!run || !mkdtemp(run)) {
		snprintf(why, len, "cannot create a run folder: %s", strerror(errno));
		free(run);
		return NULL;
	}
	return run;
}

/* Opens `name` in the run folder: new in a fresh one, else `flags` (append or truncate);
 * never through a symlink, never as one of the descriptors workers are given (0-6). */
static int open_in_run(const struct host *h, const char *name, int flags, char *why, size_t len)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", h->files.log_dir, name);
	int fd = open(path,
		      O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC |
			      (h->files.dir_fresh ? O_EXCL : flags),
		      0600);
	if (fd < 0) {
		snprintf(why, len, "cannot create %s: %s", path, strerror(errno));
		return -1;
	}
	if (fd < 10) {
		int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
		close(fd);
		fd = hi;
	}
	return fd;
}

int files_open_run(struct host *h)
{
	char why[4200];
	bool fresh = !h->cfg->log_dir;
	char *dir = fresh ? default_dir(why, sizeof why) : strdup(h->cfg->log_dir);
	if (dir && !fresh && mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(why, sizeof why, "cannot create %s: %s", dir, strerror(errno));
		free(dir);
		dir = NULL;
	}
	h->files.log_dir = dir;
	h->files.dir_fresh = fresh;
	if (dir && failures_open(h, open_in_run(h, FILES_FAILURES, O_TRUNC, why, sizeof why)) < 0) {
		free(h->files.log_dir);
		h->files.log_dir = NULL;
	}
	if (!h->files.log_dir) {
		fprintf(LOG_ERR, "gpud: %s; failures are only %s\n", why,
			h->view.mode == UI_OFF ? "counted" : "printed");
		return -1;
	}
	return 0;
}

int files_open_logs(struct host *h)
{
	char why[4200] = "no run folder";
	for (unsigned k = 0; h->files.log_dir && k < h->pool.n; k++) {
		char name[32];
		snprintf(name, sizeof name, "worker-%u.log", k);
		h->pool.w[k].log_fd = open_in_run(h, name, O_APPEND, why, sizeof why);
		if (h->pool.w[k].log_fd < 0) {
			files_close_logs(h);
			fprintf(LOG_ERR,
				"gpud: %s; showing plain progress instead of the dashboard\n", why);
			return -1;
		}
	}
	if (!h->files.log_dir) {
		fprintf(LOG_ERR,
			"gpud: no run folder for the workers' logs; showing plain progress "
			"instead of the dashboard\n");
		return -1;
	}
	return 0;
}

void files_close_logs(struct host *h)
{
	for (unsigned k = 0; h->pool.w && k < h->pool.n; k++) {
		if (h->pool.w[k].log_fd >= 0)
			close(h->pool.w[k].log_fd);
		h->pool.w[k].log_fd = -1;
	}
}
