/* SPDX-License-Identifier: MIT */
/* csv.c: a sink writing task_id,status,text lines to a file, and a summary at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <gpud/plugin.h>

GPUD_PLUGIN("sink", "csv", "1.0");
GPUD_PLUGIN_DESCRIPTION("task_id,status,text lines in a CSV file (path)");
GPUD_PLUGIN_KEYS("path");

struct csv {
	FILE *f;
};

int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err)
{
	const char *path = gpud_arg(args, "path", "results.csv");
	struct csv *s = malloc(sizeof *s);
	if (!s)
		return gpud_fail(err, "csv: out of memory");
	s->f = fopen(path, "w");
	if (!s->f) {
		free(s);
		return gpud_fail(err, "csv: cannot open %s: %s", path, strerror(errno));
	}
	fputs("task_id,status,text\n", s->f);
	*state = s;
	return 0;
}

/* Only outcomes: gpud then never even builds the other events. */
uint32_t gpud_sink_events(void *state)
{
	(void)state;
	return GPUD_EVENT_BIT(GPUD_TASK_OK) | GPUD_EVENT_BIT(GPUD_TASK_ERROR) |
	       GPUD_EVENT_BIT(GPUD_TASK_TIMEOUT);
}

static void quoted(FILE *f, const char *p, size_t n)
{
	putc('"', f);
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '"')
			putc('"', f);
		putc(p[i], f);
	}
	putc('"', f);
}

int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err)
{
	struct csv *s = state;
	switch (ev->kind) {
	case GPUD_TASK_OK:
		fprintf(s->f, "%llu,ok,", (unsigned long long)ev->task_id);
		quoted(s->f, ev->result, ev->result_size);
		break;
	case GPUD_TASK_ERROR:
	case GPUD_TASK_TIMEOUT:
		fprintf(s->f, "%llu,%s,", (unsigned long long)ev->task_id,
			ev->kind == GPUD_TASK_ERROR ? "error" : "timeout");
		quoted(s->f, ev->message, strlen(ev->message));
		break;
	default:
		return 0; /* kinds this sink does not know: ignore them */
	}
	putc('\n', s->f);
	return ferror(s->f) ? gpud_fail(err, "csv: write error") : 0; /* -1 aborts the run */
}

int gpud_sink_close(void *state, const struct gpud_stats *stats, struct gpud_error *err)
{
	struct csv *s = state;
	fprintf(s->f, "# %llu tasks: %llu ok, %llu failed, %llu timed out\n",
		(unsigned long long)stats->generated, (unsigned long long)stats->ok,
		(unsigned long long)stats->failed, (unsigned long long)stats->timed_out);
	int bad = fclose(s->f) != 0;
	free(s);
	return bad ? gpud_fail(err, "csv: write error") : 0;
}
