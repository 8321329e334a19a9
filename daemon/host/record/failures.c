/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "record/failures.h"
#include "util/textio.h"

#include <stdio.h>
#include <unistd.h>

int failures_open(struct host *h, int fd)
{
	if (fd < 0)
		return -1;
	h->files.failures = fdopen(fd, "w");
	if (!h->files.failures) {
		close(fd);
		return -1;
	}
	return 0;
}

void failures_add(struct host *h, uint64_t task_id, unsigned attempt, const struct host_worker *w,
		  bool timeout, const char *message, bool retried)
{
	if (!h->files.failures)
		return;
	fprintf(h->files.failures,
		"{\"task_id\": %llu, \"status\": \"%s\", \"attempt\": %u, \"worker_id\": %d, "
		"\"gpu_id\": %d, \"retried\": %s, \"message\": ",
		(unsigned long long)task_id, timeout ? "timeout" : "error", attempt,
		w ? w->index : -1, w ? w->gpu_id : -1, retried ? "true" : "false");
	io_json_string(h->files.failures, message ? message : "");
	fputs("}\n", h->files.failures);
	h->files.failures_listed++;
}

void failures_not_run(struct host *h, uint64_t task_id, unsigned attempt)
{
	if (!h->files.failures)
		return;
	fprintf(h->files.failures,
		"{\"task_id\": %llu, \"status\": \"not_run\", \"attempt\": %u}\n",
		(unsigned long long)task_id, attempt);
	h->files.not_run_listed++;
}

void failures_not_run_held(struct host *h)
{
	for (unsigned i = 0; i < h->pool.n; i++) {
		struct host_worker *w = &h->pool.w[i];
		for (uint64_t k = w->tt_tail; w->tt && k != w->tt_head; k++) {
			const struct task_ent *t = &w->tt[k & w->tt_mask];
			failures_not_run(h, t->id, t->attempt);
		}
	}
}

void failures_close(struct host *h, FILE *summary)
{
	if (!h->files.failures)
		return;
	bool ok = fflush(h->files.failures) == 0;
	ok &= fclose(h->files.failures) == 0;
	h->files.failures = NULL;
	if (!h->files.failures_listed && !h->files.not_run_listed) {
		/* Nothing to keep: a folder made for this run goes, unless worker logs are
		 * in it (rmdir fails then). */
		if (ok && h->files.dir_fresh) {
			char path[4096];
			snprintf(path, sizeof path, "%s/%s", h->files.log_dir, FILES_FAILURES);
			unlink(path);
			rmdir(h->files.log_dir);
		}
		return;
	}
	if (!ok)
		fprintf(summary, "gpud: could not write all of %s/%s\n", h->files.log_dir,
			FILES_FAILURES);
	else if (h->files.not_run_listed)
		fprintf(summary, "gpud: every failure and every task not run is listed in %s/%s\n",
			h->files.log_dir, FILES_FAILURES);
	else
		fprintf(summary, "gpud: every failure is listed in %s/%s\n", h->files.log_dir,
			FILES_FAILURES);
}
