/* SPDX-License-Identifier: MIT */
/* Errors said on standard error and kept: the command prints them, the library also
 * hands the last one to its caller (gpud_job_error). */
#include "util/say.h"
#include "util/textio.h"
#include "util/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
static char said[4096];

void say(const char *fmt, ...)
{
	char line[sizeof said];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	/* One line: a value echoed in it must not start another, nor reach the
	 * terminal raw. */
	text_clean(line);
	log_line(GPUD_LOG_ERROR, line);
	pthread_mutex_lock(&said_lock);
	memcpy(said, line, sizeof said);
	pthread_mutex_unlock(&said_lock);
}

void say_last(char *buf, size_t len)
{
	if (!len)
		return;
	pthread_mutex_lock(&said_lock);
	snprintf(buf, len, "%s", said);
	pthread_mutex_unlock(&said_lock);
}

void say_forget(void)
{
	pthread_mutex_lock(&said_lock);
	said[0] = '\0';
	pthread_mutex_unlock(&said_lock);
}
