/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "output.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Plain mode (GPUD_OUTPUT_PREFIX set): the plugin's output is read back through a pipe
 * and passed on to the real standard error a line at a time, as "[worker K] line". */
struct prefixer {
	pthread_t thread;
	int in, out; /* the pipe's read end; the original standard error */
	int worker;
	bool on;
};

static struct prefixer prefixer;

static void *prefix_lines(void *arg)
{
	struct prefixer *p = arg;
	char buf[8192], line[8192 + 64];
	size_t have = 0;
	for (;;) {
		ssize_t n = read(p->in, buf + have, sizeof buf - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have += (size_t)n;
		char *start = buf, *nl;
		while ((nl = memchr(start, '\n', have - (size_t)(start - buf)))) {
			int len = snprintf(line, sizeof line, "[worker %d] %.*s\n", p->worker,
					   (int)(nl - start), start);
			if (write(p->out, line, (size_t)len) < 0)
				break;
			start = nl + 1;
		}
		have -= (size_t)(start - buf);
		memmove(buf, start, have);
		if (have == sizeof buf) { /* a very long line: pass it on in pieces */
			int len = snprintf(line, sizeof line, "[worker %d] %.*s\n", p->worker,
					   (int)have, buf);
			if (write(p->out, line, (size_t)len) < 0)
				break;
			have = 0;
		}
	}
	if (have) {
		int len = snprintf(line, sizeof line, "[worker %d] %.*s\n", p->worker, (int)have,
				   buf);
		if (write(p->out, line, (size_t)len) < 0)
			return NULL;
	}
	return NULL;
}

void output_prefix_start(int worker)
{
	int fds[2];
	if (!getenv("GPUD_OUTPUT_PREFIX") || pipe2(fds, O_CLOEXEC) < 0)
		return;
	prefixer.out = fcntl(2, F_DUPFD_CLOEXEC, 10);
	prefixer.in = fds[0];
	prefixer.worker = worker;
	dup2(fds[1], 1);
	dup2(fds[1], 2);
	close(fds[1]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (pthread_create(&prefixer.thread, NULL, prefix_lines, &prefixer) == 0)
		prefixer.on = true;
}

/* Before exiting: flush, close our ends of the pipe, let the last lines through. */
void output_prefix_finish(void)
{
	if (!prefixer.on)
		return;
	fflush(NULL);
	int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
	dup2(devnull, 1);
	dup2(devnull, 2);
	close(devnull);
	/* A plugin's own thread or child may still hold the pipe: wait a little, not
	 * for ever. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 1;
	pthread_timedjoin_np(prefixer.thread, NULL, &ts);
}

_Noreturn void worker_finish(int status)
{
	fflush(NULL);
	output_prefix_finish();
	_exit(status);
}
