/* SPDX-License-Identifier: MIT */
/* words.c: a generator yielding the words of a text file, one task each. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gpud/plugin.h>

GPUD_PLUGIN("generator", "words", "1.0");
GPUD_PLUGIN_DESCRIPTION("the words of a text file (path), one task each");
GPUD_PLUGIN_KEYS("path");

struct words {
	FILE *f;
};

int gpud_generator_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", NULL); /* [generator] path = ... */
	if (!path)
		return gpud_fail(err, "words: path is required");
	struct words *w = malloc(sizeof *w);
	if (!w)
		return gpud_fail(err, "words: out of memory");
	w->f = fopen(path, "r");
	if (!w->f) {
		free(w);
		return gpud_fail(err, "words: cannot open %s: %s", path, strerror(errno));
	}
	*state = w;
	return 0;
}

/* Writes the next word straight into the task (shared memory): 1, 0 at the end. */
int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct words *w = state;
	char *out = item->data;
	size_t n = 0;
	int c;
	while ((c = getc(w->f)) != EOF && isspace(c))
		;
	if (c == EOF)
		return ferror(w->f) ? gpud_fail(err, "words: read error") : 0;
	do {
		if (n < item->capacity)
			out[n] = (char)c;
		n++; /* a word too long: size says how long, gpud fails it */
	} while ((c = getc(w->f)) != EOF && !isspace(c));
	item->size = n;
	return 1;
}

void gpud_generator_close(void *state)
{
	struct words *w = state;
	fclose(w->f);
	free(w);
}
