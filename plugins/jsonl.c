/* SPDX-License-Identifier: MIT */
/*
 * Sink `jsonl`: one JSON object a line for every finished task, in completion order:
 *   {"task_id": 7, "status": "ok", "worker_id": 1, "gpu_id": 1, "attempt": 0,
 *    "seconds": 0.0012, "key": "a/0001", "result": "..."}
 * status is ok, error or timeout; failures carry "error"; "key" is the task's name
 * when its generator gave one (ABI 1.9: the `tar` generator's sample key). Bytes that are not valid
 * UTF-8 go base64 under result_base64 / input_base64 instead.
 * Keys: path (default: standard output), include_input (true/false, default false),
 * append (true/false, default false: the file is emptied first).
 *
 * Output is buffered in whole lines and written with write(2) only at line boundaries
 * (when the buffer fills, and at least once a second), so a crash of the host loses at
 * most the lines still buffered. A kill in the middle of a large write can still leave
 * the last line cut short; with append = true the next open cuts such a line off
 * (and says so), so the file again holds whole lines only.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <gpud/plugin.h>

#include "check.h"

GPUD_PLUGIN("sink", "jsonl", "1.0");
GPUD_PLUGIN_DESCRIPTION("one JSON object a line per finished task (path, or standard output)");
GPUD_PLUGIN_KEYS("path", "include_input", "append");

#define BUF_SIZE (1 << 16)
#define FLUSH_NS 1000000000ull

struct jsonl {
	int fd;
	bool own;
	bool read_back; /* resuming into a regular file: what it holds is reported */
	bool include_input;
	const char *path;
	char *buf;
	size_t len, cap;
	uint64_t flushed_ns;
	int error; /* errno of a failed write, sticky */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool truthy(const char *v)
{
	return v &&
	       (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"));
}

/* A true/false key (default false) into *out; -1 with err set when it is neither. */
static int parse_flag(const struct gpud_args *args, const char *key, bool *out,
		      struct gpud_error *err)
{
	const char *v = gpud_arg(args, key, "false");
	*out = truthy(v);
	if (!*out && strcmp(v, "0") && strcmp(v, "false") && strcmp(v, "no") && strcmp(v, "off"))
		return gpud_fail(err, "jsonl: %s = '%s': expected true or false", key, v);
	return 0;
}

/* Writes out the buffer, which holds whole lines only. */
static int flush_out(struct jsonl *j)
{
	size_t off = 0;
	while (off < j->len && !j->error) {
		ssize_t n = write(j->fd, j->buf + off, j->len - off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			j->error = errno;
		else
			off += (size_t)n;
	}
	j->len = 0;
	j->flushed_ns = now_ns();
	return j->error ? -1 : 0;
}

/* Room for `n` more bytes in the buffer (one line may outgrow it: it grows). */
static int reserve(struct jsonl *j, size_t n)
{
	if (j->len + n <= j->cap)
		return 0;
	size_t cap = j->cap;
	while (j->len + n > cap)
		cap *= 2;
	char *b = realloc(j->buf, cap);
	if (!b) {
		j->error = ENOMEM;
		return -1;
	}
	j->buf = b;
	j->cap = cap;
	return 0;
}

static void put(struct jsonl *j, const void *p, size_t n)
{
	if (reserve(j, n) == 0) {
		memcpy(j->buf + j->len, p, n);
		j->len += n;
	}
}

static void putc_(struct jsonl *j, char c)
{
	if (j->len < j->cap || reserve(j, 1) == 0)
		j->buf[j->len++] = c;
}

static void puts_(struct jsonl *j, const char *s)
{
	put(j, s, strlen(s));
}

/* A file appended to: whatever follows its last newline is a line an earlier run was
 * killed while writing. It is cut off, so every line is whole again. */
static int cut_torn_line(int fd, const char *path, struct gpud_error *err)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
		return 0;
	char buf[4096];
	off_t pos = st.st_size, keep = 0;
	while (pos > 0) {
		size_t n = pos < (off_t)sizeof buf ? (size_t)pos : sizeof buf;
		pos -= (off_t)n;
		if (pread(fd, buf, n, pos) != (ssize_t)n)
			return gpud_fail(err, "jsonl: cannot read %s: %s", path, strerror(errno));
		char *nl = memrchr(buf, '\n', n);
		if (nl) {
			keep = pos + (nl - buf) + 1;
			break;
		}
	}
	if (keep == st.st_size)
		return 0;
	if (ftruncate(fd, keep) < 0)
		return gpud_fail(err, "jsonl: cannot cut the torn last line of %s: %s", path,
				 strerror(errno));
	fprintf(stderr,
		"jsonl: %s ended in a line cut short (%lld bytes, from a run that was "
		"killed); it was removed\n",
		path, (long long)(st.st_size - keep));
	return 0;
}

/* The file is not opened: opening it for writing would empty it. */
GPUD_EXPORT int gpud_sink_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", "-");
	bool flag;
	if (parse_flag(args, "include_input", &flag, err) < 0 ||
	    parse_flag(args, "append", &flag, err) < 0)
		return -1;
	return strcmp(path, "-") == 0 ? 0 : check_file_writable("jsonl", path, err);
}

static int open_sink(const struct gpud_args *args, void **state, bool resume,
		     struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", "-");
	bool include_input, append;
	if (parse_flag(args, "include_input", &include_input, err) < 0 ||
	    parse_flag(args, "append", &append, err) < 0)
		return -1;
	/* A resumed run adds to what the earlier one wrote, in a regular file. What is
	 * not one (/dev/stdout, a terminal, a FIFO, a socket) holds nothing to read back,
	 * as `-`: it is opened as a fresh run opens it, and the journal decides. */
	struct stat st;
	bool read_back =
		resume && strcmp(path, "-") != 0 && !(stat(path, &st) == 0 && !S_ISREG(st.st_mode));
	append |= read_back;
	struct jsonl *j = calloc(1, sizeof *j);
	if (!j || !(j->buf = malloc(BUF_SIZE))) {
		free(j);
		return gpud_fail(err, "jsonl: out of memory");
	}
	j->cap = BUF_SIZE;
	j->include_input = include_input;
	if (strcmp(path, "-") == 0) {
		j->fd = 1;
		j->path = "standard output";
	} else {
		int mode = append ? O_RDWR | O_APPEND : O_WRONLY | O_TRUNC;
		int fd = open(path, mode | O_CREAT | O_CLOEXEC, 0666);
		if (fd < 0) {
			int e = errno;
			free(j->buf);
			free(j);
			return gpud_fail(err, "jsonl: cannot open %s: %s", path, strerror(e));
		}
		if (append && cut_torn_line(fd, path, err) < 0) {
			close(fd);
			free(j->buf);
			free(j);
			return -1;
		}
		j->fd = fd;
		j->own = true;
		j->path = path;
		j->read_back = read_back && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
	}
	j->flushed_ns = now_ns();
	*state = j;
	return 0;
}

GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	return open_sink(args, state, false, err);
}

/* The first bytes of a line kept to read its id and status back: the id and status
 * come first, well within them. */
#define HEAD_SIZE 96

/* Whether s[0..n) starts with the string `lit`. */
static bool starts(const char *s, size_t n, const char *lit)
{
	size_t l = strlen(lit);
	return n >= l && memcmp(s, lit, l) == 0;
}

/* A line's first n bytes: when it is one of ours, its task is done. */
static void line_head(const char *s, size_t n,
		      void (*done)(void *ctx, uint64_t task_id, int status), void *ctx)
{
	static const char lead[] = "{\"task_id\": ", st[] = ", \"status\": \"";
	if (!starts(s, n, lead))
		return;
	size_t i = sizeof lead - 1, digits = 0;
	uint64_t id = 0;
	for (; i < n && s[i] >= '0' && s[i] <= '9' && digits < 20; i++, digits++)
		id = id * 10 + (uint64_t)(s[i] - '0');
	if (!digits || !starts(s + i, n - i, st))
		return;
	i += sizeof st - 1;
	int status = starts(s + i, n - i, "ok\"") ? 0 : starts(s + i, n - i, "timeout\"") ? 2 : 1;
	done(ctx, id, status);
}

/* Resuming: the file is kept (its torn last line cut), and every task it has a line
 * for is reported done, with its status. Standard output, or a path that is not a
 * regular file (/dev/stdout, a FIFO, a device), cannot be read back: it says so
 * (returns 1), and the tasks the journal counts are what is skipped. */
GPUD_EXPORT int gpud_sink_resume(const struct gpud_args *args, void **state,
				 void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
				 struct gpud_error *err)
{
	if (open_sink(args, state, true, err) < 0)
		return -1;
	struct jsonl *j = *state;
	if (!j->read_back)
		return 1; /* opened; the journal decides what is done */
	/* Lines are streamed: only the first bytes of each are kept (where its id and
	 * status are), so a line of any length is recognised. The last line is whole:
	 * open_sink cut a torn one. */
	char buf[1 << 16], head[HEAD_SIZE];
	size_t head_len = 0;
	off_t pos = 0;
	for (;;) {
		ssize_t n = pread(j->fd, buf, sizeof buf, pos);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return gpud_fail(err, "jsonl: cannot read %s back: %s", j->path,
					 strerror(errno));
		if (n == 0)
			break;
		pos += n;
		const char *p = buf, *end = buf + n;
		while (p < end) {
			const char *nl = memchr(p, '\n', (size_t)(end - p));
			size_t seg = (size_t)((nl ? nl : end) - p);
			if (nl && head_len == 0) { /* the whole line is here: read in place */
				line_head(p, seg, done, ctx);
				p = nl + 1;
				continue;
			}
			size_t take = seg < HEAD_SIZE - head_len ? seg : HEAD_SIZE - head_len;
			memcpy(head + head_len, p, take);
			head_len += take;
			if (!nl)
				break;
			line_head(head, head_len, done, ctx);
			head_len = 0;
			p = nl + 1;
		}
	}
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

static void put_string(struct jsonl *f, const unsigned char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	putc_(f, '"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		switch (c) {
		case '"':
			puts_(f, "\\\"");
			break;
		case '\\':
			puts_(f, "\\\\");
			break;
		case '\n':
			puts_(f, "\\n");
			break;
		case '\r':
			puts_(f, "\\r");
			break;
		case '\t':
			puts_(f, "\\t");
			break;
		default:
			if (c < 0x20 || c == 0x7f) {
				puts_(f, "\\u00");
				putc_(f, hex[c >> 4]);
				putc_(f, hex[c & 15]);
			} else {
				putc_(f, (char)c);
			}
		}
	}
	putc_(f, '"');
}

static void put_base64(struct jsonl *f, const unsigned char *s, size_t n)
{
	static const char tab[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	putc_(f, '"');
	size_t i = 0;
	for (; i + 3 <= n; i += 3) {
		unsigned v = (unsigned)s[i] << 16 | (unsigned)s[i + 1] << 8 | s[i + 2];
		putc_(f, tab[v >> 18]);
		putc_(f, tab[(v >> 12) & 63]);
		putc_(f, tab[(v >> 6) & 63]);
		putc_(f, tab[v & 63]);
	}
	if (i < n) {
		unsigned v = (unsigned)s[i] << 16 | (i + 1 < n ? (unsigned)s[i + 1] << 8 : 0);
		putc_(f, tab[v >> 18]);
		putc_(f, tab[(v >> 12) & 63]);
		putc_(f, i + 1 < n ? tab[(v >> 6) & 63] : '=');
		putc_(f, '=');
	}
	putc_(f, '"');
}

/* `"name": "text"`, or `"name_base64": "..."` when the bytes are not UTF-8. */
static void put_bytes(struct jsonl *f, const char *name, const void *p, size_t n)
{
	const unsigned char *s = p ? p : (const unsigned char *)"";
	char key[48];
	bool utf8 = valid_utf8(s, n);
	snprintf(key, sizeof key, ", \"%s%s\": ", name, utf8 ? "" : "_base64");
	puts_(f, key);
	if (utf8)
		put_string(f, s, n);
	else
		put_base64(f, s, n);
}

GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct jsonl *j = state;
	const char *status;
	switch (ev->kind) {
	case GPUD_TASK_OK:
		status = "ok";
		break;
	case GPUD_TASK_ERROR:
		status = "error";
		break;
	case GPUD_TASK_TIMEOUT:
		status = "timeout";
		break;
	default:
		return 0; /* worker events and kinds we do not know */
	}
	char head[256];
	int n = snprintf(head, sizeof head,
			 "{\"task_id\": %llu, \"status\": \"%s\", \"worker_id\": %d, "
			 "\"gpu_id\": %d, \"attempt\": %d, \"seconds\": %.6f",
			 (unsigned long long)ev->task_id, status, ev->worker_id, ev->gpu_id,
			 ev->attempt, ev->seconds);
	put(j, head, (size_t)n);
	/* (ABI 1.9) The task's name from its generator (a sample's key); not valid UTF-8
	 * (a hostile shard's member name), it goes as key_base64. */
	if (ev->name)
		put_bytes(j, "key", ev->name, strlen(ev->name));
	if (j->include_input)
		put_bytes(j, "input", ev->input, ev->input_size);
	if (ev->kind == GPUD_TASK_OK) {
		put_bytes(j, "result", ev->result, ev->result_size);
	} else {
		const char *m = ev->message ? ev->message : "";
		puts_(j, ", \"error\": ");
		put_string(j, (const unsigned char *)m, strlen(m));
	}
	puts_(j, "}\n");
	/* Whole lines only reach the file: at the buffer's size, and once a second. */
	if (j->len >= BUF_SIZE - 1024 || now_ns() - j->flushed_ns >= FLUSH_NS)
		flush_out(j);
	if (j->error)
		return gpud_fail(err, "jsonl: writing %s: %s", j->path, strerror(j->error));
	return 0;
}

GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *stats, struct gpud_error *err)
{
	struct jsonl *j = state;
	int rc = 0;
	(void)stats;
	if (flush_out(j) < 0)
		rc = gpud_fail(err, "jsonl: writing %s: %s", j->path, strerror(j->error));
	if (j->own && close(j->fd) != 0 && rc == 0)
		rc = gpud_fail(err, "jsonl: closing %s: %s", j->path, strerror(errno));
	free(j->buf);
	free(j);
	return rc;
}
