/* SPDX-License-Identifier: MIT */
/* Generator `lines`: each line of `path` (`-` for standard input) without its line
 * ending (LF or CRLF). A line longer than max_task_bytes becomes one failed task. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("generator", "lines", "1.0");

struct lines {
	FILE *f;
	char *buf;
	size_t cap;
	int64_t total;
	const char *path;
};

/* Counts the lines of a regular file in one pass of large reads. */
static int64_t count_lines(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	static char chunk[1 << 16];
	int64_t n = 0;
	size_t got;
	char last = '\n';
	while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
		for (const char *p = chunk; (p = memchr(p, '\n', (size_t)(chunk + got - p))); p++)
			n++;
		last = chunk[got - 1];
	}
	int bad = ferror(f);
	fclose(f);
	if (bad)
		return -1;
	return n + (last != '\n');
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL);
	struct stat st;
	if (!path)
		return gpud_fail(err, "lines: 'path' is required (a file, or - for standard input)");
	struct lines *l = calloc(1, sizeof *l);
	if (!l)
		return gpud_fail(err, "lines: out of memory");
	l->total = -1;
	l->path = path;
	if (strcmp(path, "-") == 0) {
		l->f = stdin;
	} else {
		l->f = fopen(path, "r");
		if (!l->f) {
			free(l);
			return gpud_fail(err, "lines: cannot open %s: %s", path, strerror(errno));
		}
		if (fstat(fileno(l->f), &st) == 0 && S_ISREG(st.st_mode))
			l->total = count_lines(path);
	}
	*state = l;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct lines *l = state;
	errno = 0;
	ssize_t n = getline(&l->buf, &l->cap, l->f);
	if (n < 0) {
		if (ferror(l->f))
			return gpud_fail(err, "lines: reading %s: %s", l->path, strerror(errno));
		return 0;
	}
	if (n > 0 && l->buf[n - 1] == '\n')
		n--;
	if (n > 0 && l->buf[n - 1] == '\r')
		n--;
	item->size = (size_t)n;
	if ((size_t)n <= item->capacity)
		memcpy(item->data, l->buf, (size_t)n);
	return 1;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return ((struct lines *)state)->total;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	struct lines *l = state;
	if (l->f && l->f != stdin)
		fclose(l->f);
	free(l->buf);
	free(l);
}
