/* SPDX-License-Identifier: MIT */
/*
 * Sink `jsonl`: one JSON object a line for every finished task, in completion order:
 *   {"task_id": 7, "status": "ok", "worker_id": 1, "gpu_id": 1, "attempt": 0,
 *    "seconds": 0.0012, "result": "..."}
 * status is ok, error or timeout; failures carry "error". Bytes that are not valid
 * UTF-8 go base64 under result_base64 / input_base64 instead.
 * Keys: path (default: standard output), include_input (true/false, default false).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("sink", "jsonl", "1.0");

struct jsonl {
	FILE *f;
	bool own;
	bool include_input;
	const char *path;
	char *iobuf;
};

static bool truthy(const char *v)
{
	return v && (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"));
}

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state,
			       struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", "-");
	const char *inc = gpud_arg(args, "include_input", "false");
	struct jsonl *j = calloc(1, sizeof *j);
	if (!j)
		return gpud_fail(err, "jsonl: out of memory");
	if (!truthy(inc) && strcmp(inc, "0") && strcmp(inc, "false") && strcmp(inc, "no") &&
	    strcmp(inc, "off")) {
		free(j);
		return gpud_fail(err, "jsonl: include_input = '%s': expected true or false", inc);
	}
	j->include_input = truthy(inc);
	j->path = strcmp(path, "-") == 0 ? "standard output" : path;
	if (strcmp(path, "-") == 0) {
		j->f = stdout;
	} else {
		j->f = fopen(path, "w");
		if (!j->f) {
			free(j);
			return gpud_fail(err, "jsonl: cannot open %s: %s", path, strerror(errno));
		}
		j->own = true;
	}
	/* Fully buffered: a line per task must not cost a write(2) per task. Standard
	 * output keeps its buffer after close (it is flushed again at exit). */
	static char stdout_buf[1 << 16];
	j->iobuf = j->own ? malloc(1 << 16) : NULL;
	if (j->own && j->iobuf)
		setvbuf(j->f, j->iobuf, _IOFBF, 1 << 16);
	else if (!j->own)
		setvbuf(j->f, stdout_buf, _IOFBF, sizeof stdout_buf);
	*state = j;
	return 0;
}

GPUD_EXPORT uint32_t gpud_sink_events(void *state)
{
	(void)state;
	return GPUD_EVENT_BIT(GPUD_TASK_OK) | GPUD_EVENT_BIT(GPUD_TASK_ERROR) |
	       GPUD_EVENT_BIT(GPUD_TASK_TIMEOUT);
}

/* Whether s[0..n) is valid UTF-8 (no overlongs, surrogates or code points past 10FFFF). */
static bool valid_utf8(const unsigned char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		unsigned char c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t len;
		unsigned cp;
		if (c >= 0xc2 && c <= 0xdf) {
			len = 2;
			cp = c & 0x1f;
		} else if (c >= 0xe0 && c <= 0xef) {
			len = 3;
			cp = c & 0x0f;
		} else if (c >= 0xf0 && c <= 0xf4) {
			len = 4;
			cp = c & 0x07;
		} else {
			return false;
		}
		if (i + len > n)
			return false;
		for (size_t k = 1; k < len; k++) {
			if ((s[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (s[i + k] & 0x3f);
		}
		if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
		    (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += len;
	}
	return true;
}

static void put_string(FILE *f, const unsigned char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	putc_unlocked('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		switch (c) {
		case '"': fputs_unlocked("\\\"", f); break;
		case '\\': fputs_unlocked("\\\\", f); break;
		case '\n': fputs_unlocked("\\n", f); break;
		case '\r': fputs_unlocked("\\r", f); break;
		case '\t': fputs_unlocked("\\t", f); break;
		default:
			if (c < 0x20 || c == 0x7f) {
				fputs_unlocked("\\u00", f);
				putc_unlocked(hex[c >> 4], f);
				putc_unlocked(hex[c & 15], f);
			} else {
				putc_unlocked((int)c, f);
			}
		}
	}
	putc_unlocked('"', f);
}

static void put_base64(FILE *f, const unsigned char *s, size_t n)
{
	static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	putc_unlocked('"', f);
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
		putc_unlocked(tab[v >> 18], f);
		putc_unlocked(tab[(v >> 12) & 63], f);
		putc_unlocked(tab[(v >> 6) & 63], f);
		putc_unlocked(tab[v & 63], f);
	}
	if (i < n) {
		unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0);
		putc_unlocked(tab[v >> 18], f);
		putc_unlocked(tab[(v >> 12) & 63], f);
		putc_unlocked(i + 1 < n ? tab[(v >> 6) & 63] : '=', f);
		putc_unlocked('=', f);
	}
	putc_unlocked('"', f);
}

/* `"name": "text"`, or `"name_base64": "..."` when the bytes are not UTF-8. */
static void put_bytes(FILE *f, const char *name, const void *p, size_t n)
{
	const unsigned char *s = p ? p : (const unsigned char *)"";
	if (valid_utf8(s, n)) {
		fprintf(f, ", \"%s\": ", name);
		put_string(f, s, n);
	} else {
		fprintf(f, ", \"%s_base64\": ", name);
		put_base64(f, s, n);
	}
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev,
				struct gpud_error *err)
{
	struct jsonl *j = state;
	const char *status;
	switch (ev->kind) {
	case GPUD_TASK_OK: status = "ok"; break;
	case GPUD_TASK_ERROR: status = "error"; break;
	case GPUD_TASK_TIMEOUT: status = "timeout"; break;
	default: return 0; /* worker events and kinds we do not know */
	}
	FILE *f = j->f;
	fprintf(f, "{\"task_id\": %llu, \"status\": \"%s\", \"worker_id\": %d, \"gpu_id\": %d, "
		   "\"attempt\": %d, \"seconds\": %.6f",
		(unsigned long long)ev->task_id, status, ev->worker_id, ev->gpu_id, ev->attempt,
		ev->seconds);
	if (j->include_input)
		put_bytes(f, "input", ev->input, ev->input_size);
	if (ev->kind == GPUD_TASK_OK) {
		put_bytes(f, "result", ev->result, ev->result_size);
	} else {
		const char *m = ev->message ? ev->message : "";
		fputs_unlocked(", \"error\": ", f);
		put_string(f, (const unsigned char *)m, strlen(m));
	}
	fputs_unlocked("}\n", f);
	if (ferror(f))
		return gpud_fail(err, "jsonl: writing %s: %s", j->path, strerror(errno));
	return 0;
}

GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *stats,
				struct gpud_error *err)
{
	struct jsonl *j = state;
	int rc = 0;
	(void)stats;
	if (fflush(j->f) != 0 || ferror(j->f))
		rc = gpud_fail(err, "jsonl: writing %s: %s", j->path, strerror(errno));
	if (j->own && fclose(j->f) != 0 && rc == 0)
		rc = gpud_fail(err, "jsonl: closing %s: %s", j->path, strerror(errno));
	free(j->iobuf);
	free(j);
	return rc;
}
