/* SPDX-License-Identifier: MIT */
/*
 * Sink `files`: each successful task's result is written to `dir/<task_id><suffix>`
 * (`dir` is created if missing; `suffix` defaults to nothing). Each file is written
 * under a temporary name in the same folder and renamed into place, so a reader never
 * sees half a file. Failed tasks write nothing (the host reports them; a jsonl run
 * shows their messages).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpud/plugin.h>

#include "check.h"

GPUD_PLUGIN("sink", "files", "1.0");
GPUD_PLUGIN_DESCRIPTION("each result written to dir/<task_id><suffix>");
GPUD_PLUGIN_KEYS("dir", "suffix");

struct files_sink {
	const char *dir;
	const char *suffix;
};

/* The folder exists and is writable, or can be made in its parent; nothing is created. */
GPUD_EXPORT int gpud_sink_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *dir = gpud_arg(args, "dir", NULL);
	const char *suffix = gpud_arg(args, "suffix", "");
	struct stat st;
	char parent[4096];
	if (!dir)
		return gpud_fail(err, "files: 'dir' is required (the folder for the results)");
	if (strchr(suffix, '/'))
		return gpud_fail(err, "files: suffix = '%s' must not contain '/'", suffix);
	if (stat(dir, &st) == 0 || errno != ENOENT)
		return check_dir_writable("files", dir, err);
	return check_dir_writable("files", check_parent(dir, parent, sizeof parent), err);
}

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	const char *dir = gpud_arg(args, "dir", NULL);
	struct stat st;
	if (!dir)
		return gpud_fail(err, "files: 'dir' is required (the folder for the results)");
	if (mkdir(dir, 0777) < 0 && errno != EEXIST)
		return gpud_fail(err, "files: cannot create folder %s: %s", dir, strerror(errno));
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return gpud_fail(err, "files: %s is not a folder", dir);
	if (access(dir, W_OK) < 0)
		return gpud_fail(err, "files: cannot write in %s: %s", dir, strerror(errno));
	const char *suffix = gpud_arg(args, "suffix", "");
	if (strchr(suffix, '/'))
		return gpud_fail(err, "files: suffix = '%s' must not contain '/'", suffix);
	struct files_sink *s = malloc(sizeof *s);
	if (!s)
		return gpud_fail(err, "files: out of memory");
	s->dir = dir;
	s->suffix = suffix;
	*state = s;
	return 0;
}

/* Resuming: every `<id><suffix>` file in the folder is a finished task (they are renamed
 * into place whole); temporary files a crash left behind are removed. */
GPUD_EXPORT int gpud_sink_resume(const struct gpud_args *args, void **state,
				 void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
				 struct gpud_error *err)
{
	if (gpud_sink_open(args, state, err) < 0)
		return -1;
	struct files_sink *s = *state;
	DIR *d = opendir(s->dir);
	if (!d)
		return gpud_fail(err, "files: cannot read folder %s: %s", s->dir, strerror(errno));
	size_t sl = strlen(s->suffix);
	struct dirent *e;
	while ((e = readdir(d))) {
		const char *n = e->d_name;
		if (n[0] == '.' && strstr(n, ".tmp-")) {
			unlinkat(dirfd(d), n, 0);
			continue;
		}
		char *end;
		unsigned long long id = strtoull(n, &end, 10);
		if (end == n || n[0] < '0' || n[0] > '9' || strlen(end) != sl ||
		    strcmp(end, s->suffix))
			continue;
		done(ctx, id, 0);
	}
	closedir(d);
	return 0;
}

GPUD_EXPORT uint32_t gpud_sink_events(void *state)
{
	(void)state;
	return GPUD_EVENT_BIT(GPUD_TASK_OK);
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct files_sink *s = state;
	char tmp[4096], final[4096];
	if (ev->kind != GPUD_TASK_OK)
		return 0;
	snprintf(final, sizeof final, "%s/%llu%s", s->dir, (unsigned long long)ev->task_id,
		 s->suffix);
	snprintf(tmp, sizeof tmp, "%s/.%llu%s.tmp-%ld", s->dir, (unsigned long long)ev->task_id,
		 s->suffix, (long)getpid());
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		return gpud_fail(err, "files: cannot create %s: %s", tmp, strerror(errno));
	const char *p = ev->result;
	size_t left = ev->result_size;
	while (left) {
		ssize_t n = write(fd, p, left);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			close(fd);
			unlink(tmp);
			return gpud_fail(err, "files: writing %s: %s", tmp, strerror(e));
		}
		p += n;
		left -= (size_t)n;
	}
	if (close(fd) < 0) {
		int e = errno;
		unlink(tmp);
		return gpud_fail(err, "files: writing %s: %s", tmp, strerror(e));
	}
	if (rename(tmp, final) < 0) {
		int e = errno;
		unlink(tmp);
		return gpud_fail(err, "files: cannot rename %s to %s: %s", tmp, final, strerror(e));
	}
	return 0;
}

GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *stats, struct gpud_error *err)
{
	(void)stats;
	(void)err;
	free(state);
	return 0;
}
