/* SPDX-License-Identifier: MIT */
/* The engine's messages, to standard error or the caller's callback (log.h). */
#define _GNU_SOURCE
#include "util/log.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

/* The callback and its data, read under `lock`, which is also held during each call:
 * the caller's callback is never called twice at once. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void (*log_fn)(void *data, int level, const char *message);
static void *log_data;

/* One stream per level; made the first time a callback is set, kept for the process
 * (a FILE's own lock guards `part`: glibc calls the write function under it). */
struct line_stream {
	int level;
	size_t used;
	char part[4096];
	FILE *f;
};
static struct line_stream streams[3];
static pthread_once_t streams_once = PTHREAD_ONCE_INIT;

static void hand_on(int level, const char *line)
{
	const char *p = strncmp(line, "gpud: ", 6) == 0 ? line + 6 : line;
	pthread_mutex_lock(&lock);
	if (log_fn)
		log_fn(log_data, level, p);
	else
		fprintf(stderr, "gpud: %s\n", p);
	pthread_mutex_unlock(&lock);
}

static void flush_part(struct line_stream *s)
{
	if (!s->used)
		return;
	s->part[s->used] = '\0';
	s->used = 0;
	hand_on(s->level, s->part);
}

static ssize_t stream_write(void *cookie, const char *buf, size_t size)
{
	struct line_stream *s = cookie;
	for (size_t i = 0; i < size; i++) {
		if (buf[i] == '\n') {
			s->part[s->used] = '\0';
			s->used = 0;
			hand_on(s->level, s->part);
		} else {
			if (s->used == sizeof s->part - 1)
				flush_part(s); /* a line too long: handed on in pieces */
			s->part[s->used++] = buf[i];
		}
	}
	return (ssize_t)size;
}

static void streams_make(void)
{
	cookie_io_functions_t io = {.write = stream_write};
	for (int k = 0; k < 3; k++) {
		streams[k].level = k;
		streams[k].f = fopencookie(&streams[k], "w", io);
		if (streams[k].f)
			setvbuf(streams[k].f, NULL, _IOLBF, 0);
	}
}

void log_set(void (*fn)(void *data, int level, const char *message), void *data)
{
	if (fn)
		pthread_once(&streams_once, streams_make);
	for (int k = 0; k < 3; k++) {
		if (!streams[k].f)
			continue;
		flockfile(streams[k].f);
		fflush_unlocked(streams[k].f);
		flush_part(&streams[k]);
		funlockfile(streams[k].f);
	}
	pthread_mutex_lock(&lock);
	log_fn = fn;
	log_data = data;
	pthread_mutex_unlock(&lock);
}

FILE *log_stream(int level)
{
	if (level < 0 || level > 2)
		level = GPUD_LOG_ERROR;
	pthread_mutex_lock(&lock);
	bool to_caller = log_fn != NULL && streams[level].f != NULL;
	pthread_mutex_unlock(&lock);
	return to_caller ? streams[level].f : stderr;
}

void log_line(int level, const char *line)
{
	hand_on(level, line);
}
