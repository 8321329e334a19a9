/* SPDX-License-Identifier: MIT */
/* Generator `lines`: each line of `path` (`-` for standard input) without its line
 * ending (LF or CRLF), bytes as they are (NUL included). `path` is a regular file: a
 * FIFO or a device is refused (a pipe comes as standard input). A line longer than
 * max_task_bytes becomes one failed task: it is measured, never split, and never held
 * in memory whole. The total is counted up front for regular files. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpud/plugin.h>

#include "check.h"

GPUD_PLUGIN("generator", "lines", "1.1");
GPUD_PLUGIN_DESCRIPTION("each line of a file (path; - for standard input)");
GPUD_PLUGIN_KEYS("path");

#define CHUNK (1 << 16)

struct lines {
	int fd;
	const char *path;
	int64_t total;
	char buf[CHUNK];
	size_t pos, len;
	bool eof;
};

/* Counts the lines of the regular file open as fd in one pass of large reads (pread:
 * the reading position stays at the start). */
static int64_t count_lines(int fd)
{
	static char chunk[CHUNK];
	int64_t n = 0;
	ssize_t got;
	off_t at = 0;
	char last = '\n';
	while ((got = pread(fd, chunk, sizeof chunk, at)) > 0) {
		for (const char *p = chunk; (p = memchr(p, '\n', (size_t)(chunk + got - p))); p++)
			n++;
		last = chunk[got - 1];
		at += got;
	}
	if (got < 0)
		return -1;
	return n + (last != '\n');
}

/* Standard input is not looked at: checking must not consume it. */
GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL);
	if (!path)
		return gpud_fail(err,
				 "lines: 'path' is required (a file, or - for standard input)");
	if (strcmp(path, "-") == 0)
		return 0;
	return check_file_readable("lines", path, err);
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL);
	struct stat st;
	if (!path)
		return gpud_fail(err,
				 "lines: 'path' is required (a file, or - for standard input)");
	struct lines *l = calloc(1, sizeof *l);
	if (!l)
		return gpud_fail(err, "lines: out of memory");
	l->total = -1;
	l->path = path;
	if (strcmp(path, "-") == 0) {
		l->fd = 0;
		l->path = "standard input";
	} else {
		/* A pipe is read as standard input (path = -): a FIFO's open would wait for
		 * a writer, a device may never end. */
		l->fd = check_open_regular("lines", path, &st, err);
		if (l->fd < 0) {
			free(l);
			return -1;
		}
		l->total = count_lines(l->fd);
	}
	*state = l;
	return 0;
}

/* Refills the buffer; 1, 0 at the end, -1 on a read error. */
static int refill(struct lines *l)
{
	if (l->eof)
		return 0;
	/* An interrupted read is not retried: gpud interrupts reads only to stop the run
	 * (Ctrl-C, SIGTERM, SIGHUP), and a pipe that stays idle must not hold it up. */
	ssize_t n = read(l->fd, l->buf, sizeof l->buf);
	if (n < 0)
		return -1;
	l->pos = 0;
	l->len = (size_t)n;
	if (n == 0)
		l->eof = true;
	return n > 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct lines *l = state;
	size_t size = 0;
	bool any = false;
	char *out = item->data;

	for (;;) {
		if (l->pos == l->len) {
			int r = refill(l);
			if (r < 0)
				return gpud_fail(err, "lines: reading %s: %s", l->path,
						 strerror(errno));
			if (r == 0)
				break;
		}
		any = true;
		const char *start = l->buf + l->pos;
		size_t avail = l->len - l->pos;
		const char *nl = memchr(start, '\n', avail);
		size_t take = nl ? (size_t)(nl - start) : avail;
		/* Copy what still fits; past the limit only count. */
		if (size < item->capacity) {
			size_t room = item->capacity - size;
			memcpy(out + size, start, take < room ? take : room);
		}
		size += take;
		l->pos += take + (nl != NULL);
		if (nl)
			goto line;
	}
	if (!any)
		return 0; /* end of input */
line:
	/* CRLF: the CR is part of the ending. It may be the last byte copied, or (when the
	 * line was too long) only counted. */
	if (size > 0 && size <= item->capacity && out[size - 1] == '\r')
		size--;
	item->size = size;
	return 1;
}

/* Resuming: the first n lines, read past with large reads (no item is made). */
GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err)
{
	struct lines *l = state;
	while (n) {
		if (l->pos == l->len) {
			int r = refill(l);
			if (r < 0)
				return gpud_fail(err, "lines: reading %s: %s", l->path,
						 strerror(errno));
			if (r == 0)
				return 0; /* fewer lines than that: the end */
		}
		const char *nl = memchr(l->buf + l->pos, '\n', l->len - l->pos);
		if (!nl) {
			l->pos = l->len; /* a line goes on in the next read */
			continue;
		}
		l->pos = (size_t)(nl - l->buf) + 1;
		n--;
	}
	return 0;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return ((struct lines *)state)->total;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	struct lines *l = state;
	if (l->fd > 0)
		close(l->fd);
	free(l);
}
