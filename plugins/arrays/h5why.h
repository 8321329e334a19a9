/* SPDX-License-Identifier: MIT */
/* Why a libhdf5 call failed, for the hdf5 generator's and sink's messages: read from
 * libhdf5's error stack, which the next libhdf5 call clears, so it must be asked right
 * after the call that failed (before any H5?close). */
#ifndef GPUD_PLUGINS_ARRAYS_H5WHY_H
#define GPUD_PLUGINS_ARRAYS_H5WHY_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hdf5.h>

struct h5why_walk {
	char *buf;
	size_t len;
	int err_no;   /* "errno = N" in a message (a file driver's failed system call), or 0 */
	bool plugins; /* libhdf5 looked for a filter plugin and found none */
	bool have;    /* buf holds the cause */
};

static inline herr_t h5why_entry_(unsigned n, const H5E_error2_t *e, void *data)
{
	struct h5why_walk *w = data;
	(void)n;
	if (!e->desc || !*e->desc)
		return 0;
	const char *en = strstr(e->desc, "errno = ");
	if (en && !w->err_no)
		w->err_no = atoi(en + 8);
	/* The innermost message is the cause, but for the plugin search a missing filter
	 * sets off (its folder not there): the filter's own message is the one above it. */
	if (e->maj_num == H5E_PLUGIN) {
		w->plugins = true;
		return 0;
	}
	if (!w->have)
		snprintf(w->buf, w->len, "%s", e->desc);
	w->have = true;
	return 0;
}

/* The cause of the last failure into buf: the system's error (strerror) where a file
 * driver's system call failed, else the innermost message of the stack (a missing
 * filter's, with a word on plugins); "libhdf5 gave no reason" when the stack is empty.
 * Returns buf. */
static inline const char *h5why(char *buf, size_t len)
{
	struct h5why_walk w = {buf, len, 0, false, false};
	buf[0] = '\0';
	H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5why_entry_, &w);
	if (w.err_no > 0) {
		snprintf(buf, len, "%s", strerror(w.err_no));
	} else if (!w.have) {
		snprintf(buf, len, "libhdf5 gave no reason");
	} else if (w.plugins) {
		size_t used = strlen(buf);
		snprintf(buf + used, len - used,
			 " (libhdf5 found no plugin for it: HDF5_PLUGIN_PATH names the folders "
			 "of filter plugins)");
	}
	return buf;
}

#endif
