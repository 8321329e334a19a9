/* SPDX-License-Identifier: MIT */
/* `gpud merge`: the ranks' --stats-json files as one summary that adds up. */
#define _GNU_SOURCE
#include "cluster/merge.h"
#include "util/log.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util/say.h"
#include "util/textio.h"

/* Largest stats file read: one of 4096 workers on 1024 GPUs is well under 1 MiB. */
#define MERGE_MAX_FILE (8u << 20)

/* The number after "key": in a --stats-json text (the first one: the totals come
 * before the per-worker lists). 0 with *out set, -1 when missing or not finite (1e999
 * is valid JSON but no figure of ours). */
static int number(const char *text, const char *key, double *out)
{
	char want[64];
	snprintf(want, sizeof want, "\"%s\": ", key);
	const char *p = strstr(text, want);
	if (!p)
		return -1;
	char *end;
	double v = strtod(p + strlen(want), &end);
	if (end == p + strlen(want) || !isfinite(v))
		return -1;
	*out = v;
	return 0;
}

/* A number for the output: JSON has no nan or inf, so an undefined figure is null. */
static void put_num(FILE *out, const char *key, double v, int decimals, bool known)
{
	if (known && isfinite(v))
		fprintf(out, ", \"%s\": %.*f", key, decimals, v);
	else
		fprintf(out, ", \"%s\": null", key);
}

/* The worst exit status of the ranks: aborted, then usage, then resumable, then some
 * failed, then all ok. */
static int worse(int a, int b)
{
	static const int rank_of[] = {0, 1, 4, 5, 3}; /* by status 0..4 */
	int ra = a >= 0 && a <= 4 ? rank_of[a] : 6, rb = b >= 0 && b <= 4 ? rank_of[b] : 6;
	return ra >= rb ? a : b;
}

/* What says which share of which job a file holds (absent in files of gpud before it
 * wrote them: has_rank false). */
struct share {
	bool has_rank;
	bool dynamic; /* "shares": "dynamic": a resume may have run another number of ranks */
	unsigned rank, ranks;
	char job_id[24];
	dev_t dev;
	ino_t ino;
};

static void read_share(const char *text, struct share *s)
{
	double r, n;
	s->has_rank = number(text, "rank", &r) == 0 && number(text, "ranks", &n) == 0 && r >= 0 &&
		      n >= 1 && r < n && n <= 1e6;
	if (s->has_rank) {
		s->rank = (unsigned)r;
		s->ranks = (unsigned)n;
	}
	s->dynamic = strstr(text, "\"shares\": \"dynamic\"") != NULL;
	const char *j = strstr(text, "\"job_id\": \"");
	s->job_id[0] = '\0';
	if (j)
		sscanf(j + 11, "%16[0-9a-f]", s->job_id);
}

/* Refuses files that are not shares of one job, each once. 0, or 2 with one line. */
static int check_shares(int argc, char **argv, const struct share *s)
{
	for (int i = 0; i < argc; i++) {
		for (int j = 0; j < i; j++) {
			if (s[i].dev == s[j].dev && s[i].ino == s[j].ino) {
				say("merge: %s and %s are the same file: each rank's "
				    "file is given once",
				    argv[j], argv[i]);
				return 2;
			}
			if (!s[i].has_rank || !s[j].has_rank)
				continue;
			if (s[i].ranks != s[j].ranks && !(s[i].dynamic && s[j].dynamic)) {
				say("merge: %s is of a run over %u ranks, %s of one "
				    "over %u: not one job",
				    argv[j], s[j].ranks, argv[i], s[i].ranks);
				return 2;
			}
			if (s[i].job_id[0] && s[j].job_id[0] && strcmp(s[i].job_id, s[j].job_id)) {
				say("merge: %s and %s are of different jobs (job_id %s "
				    "and %s: the worker's or the generator's plugin or keys, "
				    "or base_seed, differ)",
				    argv[j], argv[i], s[j].job_id, s[i].job_id);
				return 2;
			}
			if (s[i].rank == s[j].rank) {
				say("merge: %s and %s are both rank %u of %u: each "
				    "rank's file is given once",
				    argv[j], argv[i], s[i].rank, s[i].ranks);
				return 2;
			}
		}
	}
	return 0;
}

/* The ranks of the job no file was given for, as `"missing_ranks": [...]`; says so on
 * standard error. Returns how many. Unknown (null) when a file has no rank. */
static unsigned put_missing(FILE *out, int argc, char **argv, const struct share *s)
{
	for (int i = 0; i < argc; i++) {
		if (!s[i].has_rank) {
			fprintf(LOG_ERR,
				"gpud: merge: %s says no rank (an older gpud wrote it): "
				"duplicate and missing ranks cannot be told\n",
				argv[i]);
			fprintf(out, ", \"job_ranks\": null, \"missing_ranks\": null");
			return 0;
		}
	}
	/* With dynamic shares, the ranks of every run of the job (a resume with fewer
	 * ranks finishes the others' as they were). */
	unsigned n = s[0].ranks, missing = 0;
	for (int i = 1; i < argc; i++)
		if (s[i].ranks > n)
			n = s[i].ranks;
	bool *seen = calloc(n, sizeof *seen);
	if (!seen) {
		fprintf(LOG_ERR, "gpud: merge: out of memory\n");
		return n;
	}
	for (int i = 0; i < argc; i++)
		seen[s[i].rank] = true;
	fprintf(out, ", \"job_ranks\": %u, \"missing_ranks\": [", n);
	for (unsigned k = 0; k < n; k++)
		if (!seen[k])
			fprintf(out, "%s%u", missing++ ? ", " : "", k);
	fprintf(out, "]");
	if (missing) {
		fprintf(LOG_ERR, "gpud: merge: %u of the job's %u ranks have no file:", missing, n);
		unsigned said = 0;
		for (unsigned k = 0; k < n && said < 20; k++)
			if (!seen[k])
				fprintf(LOG_ERR, "%s %u", said++ ? "," : "", k);
		fprintf(LOG_ERR, "%s; the figures are theirs only\n",
			missing > said ? ", ..." : "");
	}
	free(seen);
	return missing;
}

static const char *const sums[] = {"generated",      "ok",
				   "failed",         "timed_out",
				   "not_run",        "retried",
				   "setup_failures", "worker_restarts",
				   "resumed",        "host_cpu_seconds",
				   "oom_splits"};
enum { N_SUMS = sizeof sums / sizeof *sums };

/* The files' figures added up. */
struct totals {
	double sum[N_SUMS];
	double start, end, expected;
	bool expected_known, have_start, have_end;
	int status;
};

/* Adds the i-th file's figures (its text) to *t. 0, or -1 said: not a stats file. */
static int add_file(struct totals *t, int i, const char *path, const char *text)
{
	double v, s, e, n, x;
	for (int k = 0; k < N_SUMS; k++) {
		int found = number(text, sums[k], &v);
		/* resumed and oom_splits: files of older gpuds may lack them */
		bool optional = !strcmp(sums[k], "resumed") || !strcmp(sums[k], "oom_splits");
		if ((found < 0 && !optional) || (found == 0 && v < 0)) {
			say("merge: %s: no \"%s\" that is a count: not a gpud "
			    "--stats-json file",
			    path, sums[k]);
			return -1;
		}
		t->sum[k] += found == 0 ? v : 0;
	}
	if (number(text, "start_time", &s) == 0 && (!t->have_start || s < t->start)) {
		t->start = s;
		t->have_start = true;
	}
	if (number(text, "end_time", &e) == 0 && (!t->have_end || e > t->end)) {
		t->end = e;
		t->have_end = true;
	}
	if (number(text, "total", &n) < 0 || n < 0)
		t->expected_known = false;
	else
		t->expected += n;
	if (number(text, "exit_status", &x) == 0 && x >= 0 && x <= 255)
		t->status = i == 0 ? (int)x : worse(t->status, (int)x);
	return 0;
}

/* Reads every file into share[] and *t. 0, or 2 said. */
static int read_files(int argc, char **argv, struct share *share, struct totals *t)
{
	for (int i = 0; i < argc; i++) {
		char why[200];
		size_t size;
		struct stat st;
		char *text = io_read_small(argv[i], MERGE_MAX_FILE, &size, why, sizeof why);
		if (!text || stat(argv[i], &st) < 0) {
			say("merge: %s: %s", argv[i], text ? strerror(errno) : why);
			free(text);
			return 2;
		}
		share[i].dev = st.st_dev;
		share[i].ino = st.st_ino;
		read_share(text, &share[i]);
		int rc = add_file(t, i, argv[i], text);
		free(text);
		if (rc < 0)
			return 2;
	}
	return 0;
}

/* The summary on standard output, and a line on standard error; the exit status. */
static int put_summary(FILE *out, int argc, char **argv, const struct share *share,
		       const struct totals *t, struct merge_figures *fig)
{
	const double *sum = t->sum;
	double done = sum[1] + sum[2] + sum[3];
	bool timed = t->have_start && t->have_end && t->end >= t->start;
	double elapsed = timed ? t->end - t->start : 0;
	fprintf(out, "{\"ranks\": %d", argc);
	for (int k = 0; k < N_SUMS; k++)
		put_num(out, sums[k], sum[k], strcmp(sums[k], "host_cpu_seconds") ? 0 : 6, true);
	put_num(out, "total", t->expected_known ? t->expected : -1, 0, true);
	put_num(out, "start_time", t->start, 3, t->have_start);
	put_num(out, "end_time", t->end, 3, t->have_end);
	put_num(out, "elapsed", elapsed, 6, timed);
	put_num(out, "throughput", elapsed > 0 ? done / elapsed : 0, 1, true);
	fprintf(out, ", \"exit_status\": %d", t->status);
	unsigned missing = put_missing(out, argc, argv, share);
	fprintf(out, ", \"files\": [");
	for (int i = 0; i < argc; i++) {
		fprintf(out, "%s", i ? ", " : "");
		io_json_string(out, argv[i]);
	}
	fprintf(out, "]}\n");
	*fig = (struct merge_figures){
		.made = true,
		.exit_status = t->status,
		.missing_ranks = missing,
		.generated = (uint64_t)sum[0],
		.ok = (uint64_t)sum[1],
		.failed = (uint64_t)sum[2],
		.timed_out = (uint64_t)sum[3],
		.not_run = (uint64_t)sum[4],
	};
	fprintf(LOG_INFO,
		"gpud: %d ranks: %.0f tasks: %.0f ok, %.0f failed, %.0f timed out, %.0f "
		"not run (exit status %d)\n",
		argc, sum[0], sum[1], sum[2], sum[3], sum[4], t->status);
	if (sum[0] != done + sum[4])
		fprintf(LOG_WARN,
			"gpud: merge: the ranks' figures do not add up (generated %.0f, "
			"outcomes %.0f)\n",
			sum[0], done + sum[4]);
	/* A summary without some ranks is not the job's: a script must not take it for one. */
	return t->status == 2 || missing ? 2 : 0;
}

int merge_run(int argc, char **argv, FILE *out, struct merge_figures *fig)
{
	*fig = (struct merge_figures){.made = false};
	if (argc < 1) {
		fprintf(LOG_ERR,
			"usage: gpud merge STATS.json...   (the ranks' --stats-json files)\n");
		return 2;
	}
	struct share *share = calloc((size_t)argc, sizeof *share);
	if (!share) {
		say("merge: out of memory");
		return 2;
	}
	struct totals t = {.expected_known = true};
	int rc = read_files(argc, argv, share, &t);
	if (!rc)
		rc = check_shares(argc, argv, share);
	if (!rc)
		rc = put_summary(out, argc, argv, share, &t, fig);
	free(share);
	return rc;
}
