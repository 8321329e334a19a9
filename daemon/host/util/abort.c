/* SPDX-License-Identifier: MIT */
/* The run's abort (abort.h). */
#include <stdarg.h>
#include <stdio.h>

#include "util/abort.h"

void host_abort(struct host *h, const char *fmt, ...)
{
	if (h->ctl.abort)
		return; /* the first reason is the one to tell */
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(h->ctl.abort_msg, sizeof h->ctl.abort_msg, fmt, ap);
	va_end(ap);
	h->ctl.abort = 3;
}
