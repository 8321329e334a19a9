/* SPDX-License-Identifier: MIT */
/* gpud_job_set's cost as a job grows: N keys, then 4N, each set one call at a time on a
 * fresh job; prints both times and their ratio (about 4 when each call costs the same,
 * 16 when each call re-reads every key before it). Usage: job-set [N] (1000). */
#define _GNU_SOURCE
#include <gpud/gpud.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Seconds for job.gpus, worker.plugin and n worker keys; -1 when a set failed. */
static double build(int n)
{
	gpud_job *job = gpud_job_new();
	if (!job)
		return -1;
	double t0 = now();
	int rc = gpud_job_set(job, "job.gpus", "0") | gpud_job_set(job, "worker.plugin", "echo");
	for (int i = 0; rc == 0 && i < n; i++) {
		char k[64], v[32];
		snprintf(k, sizeof k, "worker.key_%d", i);
		snprintf(v, sizeof v, "%d", i);
		rc = gpud_job_set(job, k, v);
	}
	double t = now() - t0;
	if (rc != 0)
		fprintf(stderr, "job-set: %s\n", gpud_job_error(job));
	gpud_job_free(job);
	return rc ? -1 : t;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	if (n < 1)
		return 2;
	double a = build(n), b = build(4 * n);
	if (a < 0 || b < 0)
		return 1;
	printf("gpud_job_set: %d keys %.4f s (%.2f us a call), %d keys %.4f s (%.2f us a call); "
	       "ratio %.1f\n",
	       n, a, a / n * 1e6, 4 * n, b, b / (4 * n) * 1e6, b / a);
	return 0;
}
