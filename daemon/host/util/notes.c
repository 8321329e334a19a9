/* SPDX-License-Identifier: MIT */
/* Notes for the person watching (notes.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "util/notes.h"
#include "util/log.h"
#include "host.h"

void ui_say(struct host *h, enum ui_note kind, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	if (h->view.mode == UI_OFF) {
		if (kind == UI_EVENT)
			log_line(GPUD_LOG_WARN, line);
		return;
	}
	bool is_error = kind == UI_FAILURE;
	pthread_mutex_lock(&h->view.notes.lock);
	if (h->view.mode == UI_PLAIN && h->view.notes.count - h->view.notes.printed >= HOST_NOTES) {
		/* The printer is a whole ring behind: this one waits in the failures list. */
		h->view.notes.hidden++;
		pthread_mutex_unlock(&h->view.notes.lock);
		return;
	}
	unsigned k = (unsigned)(h->view.notes.count % HOST_NOTES);
	memcpy(h->view.notes.text[k], line, sizeof line);
	h->view.notes.error[k] = is_error;
	__atomic_store_n(&h->view.notes.count, h->view.notes.count + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&h->view.notes.lock);
}
