/* SPDX-License-Identifier: MIT */
/* `gpud merge`: the ranks' --stats-json files as one summary that adds up. */
#define _GNU_SOURCE
#include "merge.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number after "key": in a --stats-json text (the first one: the totals come
 * before the per-worker lists). 0 with *out set, -1 when missing. */
static int number(const char *text, const char *key, double *out)
{
	char want[64];
	snprintf(want, sizeof want, "\"%s\": ", key);
	const char *p = strstr(text, want);
	if (!p)
		return -1;
	char *end;
	*out = strtod(p + strlen(want), &end);
	return end == p + strlen(want) ? -1 : 0;
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	char chunk[8192];
	size_t n;
	while (m && (n = fread(chunk, 1, sizeof chunk, f)) > 0)
		fwrite(chunk, 1, n, m);
	fclose(f);
	if (m)
		fclose(m);
	return buf;
}

/* The worst exit status of the ranks: aborted, then usage, then resumable, then some
 * failed, then all ok. */
static int worse(int a, int b)
{
	static const int rank_of[] = {0, 1, 4, 5, 3}; /* by status 0..4 */
	int ra = a >= 0 && a <= 4 ? rank_of[a] : 6, rb = b >= 0 && b <= 4 ? rank_of[b] : 6;
	return ra >= rb ? a : b;
}

int merge_main(int argc, char **argv)
{
	static const char *const sums[] = {"generated", "ok", "failed", "timed_out", "not_run",
					   "retried", "setup_failures", "worker_restarts", "resumed",
					   "host_cpu_seconds"};
	enum { N_SUMS = sizeof sums / sizeof *sums };
	double total[N_SUMS] = {0}, start = 0, end = 0, expected = 0;
	bool expected_known = true;
	int status = 0;
	if (argc < 1) {
		fprintf(stderr, "usage: gpud merge STATS.json...   (the ranks' --stats-json files)\n");
		return 2;
	}
	for (int i = 0; i < argc; i++) {
		char *text = slurp(argv[i]);
		if (!text) {
			fprintf(stderr, "gpud: merge: %s: %s\n", argv[i], strerror(errno));
			return 2;
		}
		double v, s, e, t, x;
		for (int k = 0; k < N_SUMS; k++) {
			if (number(text, sums[k], &v) < 0 && strcmp(sums[k], "resumed") != 0) {
				fprintf(stderr, "gpud: merge: %s: no \"%s\": not a gpud --stats-json "
						"file\n", argv[i], sums[k]);
				free(text);
				return 2;
			}
			total[k] += number(text, sums[k], &v) == 0 ? v : 0;
		}
		if (number(text, "start_time", &s) == 0 && (i == 0 || s < start))
			start = s;
		if (number(text, "end_time", &e) == 0 && (i == 0 || e > end))
			end = e;
		if (number(text, "total", &t) < 0 || t < 0)
			expected_known = false;
		else
			expected += t;
		if (number(text, "exit_status", &x) == 0)
			status = i == 0 ? (int)x : worse(status, (int)x);
		free(text);
	}
	double done = total[1] + total[2] + total[3];
	double elapsed = end > start ? end - start : 0;
	printf("{\"ranks\": %d", argc);
	for (int k = 0; k < N_SUMS; k++) {
		if (!strcmp(sums[k], "host_cpu_seconds"))
			printf(", \"%s\": %.6f", sums[k], total[k]);
		else
			printf(", \"%s\": %.0f", sums[k], total[k]);
	}
	printf(", \"total\": %.0f, \"start_time\": %.3f, \"end_time\": %.3f, \"elapsed\": %.6f, "
	       "\"throughput\": %.1f, \"exit_status\": %d, \"files\": [",
	       expected_known ? expected : -1, start, end, elapsed,
	       elapsed > 0 ? done / elapsed : 0, status);
	for (int i = 0; i < argc; i++) {
		printf("%s\"", i ? ", " : "");
		for (const char *p = argv[i]; *p; p++)
			printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
		printf("\"");
	}
	printf("]}\n");
	fprintf(stderr, "gpud: %d ranks: %.0f tasks: %.0f ok, %.0f failed, %.0f timed out, %.0f "
			"not run (exit status %d)\n",
		argc, total[0], total[1], total[2], total[3], total[4], status);
	if (total[0] != done + total[4])
		fprintf(stderr, "gpud: merge: the ranks' figures do not add up (generated %.0f, "
				"outcomes %.0f)\n", total[0], done + total[4]);
	return status == 2 ? 2 : 0;
}
