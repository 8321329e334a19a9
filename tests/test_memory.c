/* SPDX-License-Identifier: MIT */
/* Memory a user can predict: `gpud check`'s account of the shared memory (the figures
 * it prints are the sizes a run of the same job maps, read from the running host's
 * /proc/PID/maps), its warning for a stage whose results may be large, the note at the
 * end of a run whose stage results were, and the default count of a stage's workers. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* A job: range 0..n-1 through a [stage.decode] of the tagger (no GPU; `stage` more
 * keys) to the tagger on GPU 0 (workers_per_gpu `gpu_workers`), the jsonl sink. */
static void job(const char *dir, unsigned n, unsigned gpu_workers, const char *jobkeys,
		const char *stage)
{
	free(t_jobf(dir,
		    "[job]\ngpus = 0\nworkers_per_gpu = %u\n%s\n"
		    "[stage.decode]\nplugin = tagger\ntag = d:\nno_gpu = 1\n%s\n"
		    "[worker]\nplugin = tagger\ntag = g:\n"
		    "[generator]\nplugin = range\nstop = %u\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		    gpu_workers, jobkeys, stage, n));
}

static unsigned long long number_after(const char *text, const char *key)
{
	const char *p = text ? strstr(text, key) : NULL;
	cr_assert(p, "no '%s' in: %s", key, text ? text : "(nothing)");
	return strtoull(p + strlen(key), NULL, 10);
}

/* The cores this process may run on, as gpud counts them. */
static long cores(void)
{
	cpu_set_t set;
	cr_assert_eq(sched_getaffinity(0, sizeof set, &set), 0);
	return CPU_COUNT(&set);
}

/* What `gpud check` says a stage named `name` gets. */
static unsigned stage_workers(const char *dir, const char *name, const char *prefix)
{
	cr_assert_eq(t_gpud(dir, "check %s '%s/job.ini'", prefix, dir), 0);
	char *out = t_read_in(dir, "out"), key[64];
	snprintf(key, sizeof key, "\n  stage %s: ", name);
	unsigned n = (unsigned)number_after(out, key);
	free(out);
	return n;
}

/* The default: every core the run may use, less a core per 4 GPU workers (which
 * mostly wait for their GPUs) and the stages that name their count; at least 1. */
Test(memory, default_stage_workers)
{
	const char *dir = t_tmpdir();
	long c = cores();
	job(dir, 5, 1, "", "");
	/* One GPU worker takes no core of the stage's: on 2 cores, 2 stage workers (it
	 * was 1, which halved a decode-bound job's throughput). */
	cr_expect_eq(stage_workers(dir, "decode", ""), (unsigned)c);
	/* Nor do more workers on that GPU: a GPU's CPU work does not grow with them (8
	 * once took 2 cores). */
	job(dir, 5, 8, "", "");
	cr_expect_eq(stage_workers(dir, "decode", ""), (unsigned)c);
	/* The run's CPU affinity (a batch system's share) is what counts. */
	job(dir, 5, 1, "", "");
	cr_expect_eq(stage_workers(dir, "decode", "--set job.workers_per_gpu=1"), (unsigned)c);
	cr_assert_eq(t_sh(dir, "taskset -c 0 \"$GPUD\" check job.ini > out 2> err"), 0);
	char *out = t_read_in(dir, "out");
	cr_expect_eq(number_after(out, "\n  stage decode: "), 1, "%s", out);
	free(out);
	/* A stage that names its count leaves the others the rest. */
	free(t_jobf(dir, "[job]\ngpus = 0\n"
			 "[stage.a]\nplugin = tagger\nno_gpu = 1\nworkers = 1\n"
			 "[stage.b]\nplugin = tagger\nno_gpu = 1\n"
			 "[worker]\nplugin = tagger\n[generator]\nplugin = range\nstop = 5\n"));
	cr_expect_eq(stage_workers(dir, "a", ""), 1);
	cr_expect_eq(stage_workers(dir, "b", ""), (unsigned)(c - 1 > 1 ? c - 1 : 1));
}

/* The figures `gpud check` prints are the sizes the run maps: its run memfd and one
 * result memfd per worker, each stage's workers and the GPU workers counted, as the
 * running host's /proc/PID/maps shows them. */
Test(memory, check_figures_are_what_a_run_maps, .timeout = 120)
{
	const char *dir = t_tmpdir();
	/* Sizes that are no round numbers, a batch and two stages' worth of workers. */
	job(dir, 400, 2, "max_task_bytes = 300K\nmax_result_bytes = 70K\nbatch_size = 3",
	    "workers = 3\nsleep_us = 2000");
	cr_assert_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	char *chk = t_read_in(dir, "out");
	unsigned long long all = number_after(chk, "  shared memory: "),
			   run_memfd = number_after(chk, "the run's memfd of "),
			   out_memfd = number_after(chk, "a result memfd per worker of ");
	/* "<human> in all, N bytes": the exact figures follow the readable ones. */
	all = number_after(strstr(chk, "  shared memory: "), " in all, ");
	run_memfd = number_after(strstr(chk, "the run's memfd of "), " (");
	out_memfd = number_after(strstr(chk, "a result memfd per worker of "), " (");
	unsigned stage = (unsigned)number_after(chk, "\n    stage decode: "),
		 gpu = (unsigned)number_after(chk, "\n    gpu: ");
	cr_expect_eq(stage, 3, "%s", chk);
	cr_expect_eq(gpu, 2, "%s", chk);
	cr_expect_eq(all, run_memfd + (stage + gpu) * out_memfd + 4096,
		     "the total is the run memfd, a result memfd per worker and the bell page");
	/* Each ring holds at least a batch of the largest tasks and results. */
	cr_expect_geq(number_after(chk, "task ring 2.0 MiB, room for "), 3, "%s", chk);
	cr_expect(strstr(chk, " tasks of max_task_bytes (300.0 KiB)"), "%s", chk);
	cr_expect_geq(number_after(chk, "results 512.0 KiB, room for "), 3, "%s", chk);
	cr_expect(strstr(chk, " of max_result_bytes (70.0 KiB) (batch_size 3)"), "%s", chk);
	cr_expect(!strstr(chk, "warning"), "results up to 70K are not large: %s", chk);
	free(chk);

	/* The run, looked at while its stage works: every gpud memfd the host maps, one
	 * line per mapping: name and size. */
	int rc = t_sh(
		dir, "\"$GPUD\" run job.ini --ui off > run.out 2> run.err & pid=$!\n"
		     "w 'grep -q gpud-out-4 /proc/$pid/maps'\n"
		     "grep memfd:gpud- /proc/$pid/maps | while read -r range p o d i name rest; do "
		     "lo=${range%%-*}; hi=${range#*-}; "
		     "echo \"${name#*memfd:} $((0x$hi - 0x$lo))\"; done > maps\n"
		     "wait $pid");
	cr_expect_eq(rc, 0, "the run: %s", t_read_in(dir, "run.err"));
	char *maps = t_read_in(dir, "maps");
	cr_assert(maps && *maps, "no memfd mappings seen");
	unsigned outs = 0;
	unsigned long long run_seen = 0;
	for (char *line = strtok(maps, "\n"); line; line = strtok(NULL, "\n")) {
		char name[64];
		unsigned long long size;
		cr_assert_eq(sscanf(line, "%63s %llu", name, &size), 2, "%s", line);
		if (strcmp(name, "gpud-run") == 0) {
			run_seen += size;
		} else if (strncmp(name, "gpud-out-", 9) == 0) {
			outs++;
			cr_expect_eq(size, out_memfd, "%s: check said %llu", line, out_memfd);
		}
	}
	cr_expect_eq(run_seen, run_memfd, "the run memfd: mapped %llu, check said %llu", run_seen,
		     run_memfd);
	cr_expect_eq(outs, stage + gpu, "a result memfd per worker");
	free(maps);
}

/* Results that may be large (max_task_bytes over 1 MiB with a stage): check warns,
 * naming the stage, where its results go and the key. */
Test(memory, check_warns_of_large_stage_results)
{
	const char *dir = t_tmpdir();
	job(dir, 5, 1, "max_task_bytes = 8M\nmax_result_bytes = 8M\nbatch_size = 4", "");
	cr_assert_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	char *chk = t_read_in(dir, "out");
	cr_expect(strstr(chk, "  warning: stage decode's results may take up to 8.0 MiB each") &&
			  strstr(chk, "of the GPU workers") && strstr(chk, "max_task_bytes"),
		  "%s", chk);
	free(chk);
	/* Small enough: no warning. */
	cr_assert_eq(t_gpud(dir, "check '%s/job.ini' --set job.max_task_bytes=1M", dir), 0);
	chk = t_read_in(dir, "out");
	cr_expect(!strstr(chk, "warning"), "%s", chk);
	free(chk);
}

/* A run whose stage results were large (here 300 KB from inputs of a few bytes) says
 * so once at its end; one whose results were small does not. */
Test(memory, run_notes_large_stage_results, .timeout = 120)
{
	const char *dir = t_tmpdir();
	job(dir, 20, 1, "max_task_bytes = 400K\nmax_result_bytes = 400K",
	    "pad = 300000\nworkers = 1");
	int rc = t_gpud(dir, "run '%s/job.ini' --ui off", dir);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(rc, 0, "%s", err);
	cr_expect_eq(t_count_lines(err, "gpud: note: stage decode's results took up to "), 1, "%s",
		     err);
	cr_expect(strstr(err, "max_task_bytes"), "%s", err);
	free(err);
	job(dir, 20, 1, "", "workers = 1");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	err = t_read_in(dir, "err");
	cr_expect(!strstr(err, "note: stage"), "%s", err);
	free(err);
}

/* A run whose rings were far larger than its tasks and results needed (batch_size 16
 * with the 1 MiB defaults, tasks of a few bytes through a stage) says so once at its
 * end, with the sizes seen and keys that fit them; one whose keys fit does not, nor
 * one of batch_size 1 with the defaults (4 MiB rings: the floor). */
Test(memory, run_notes_rings_far_above_what_travelled, .timeout = 120)
{
	const char *dir = t_tmpdir();
	job(dir, 200, 1, "batch_size = 16", "workers = 1");
	int rc = t_gpud(dir, "run '%s/job.ini' --ui off", dir);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(rc, 0, "%s", err);
	cr_expect_eq(t_count_lines(err, "gpud: note: the run's shared memory took "), 1, "%s", err);
	cr_expect(strstr(err, "times what its largest task ("), "%s", err);
	cr_expect(strstr(err, "with [job] max_task_bytes = 4K and max_result_bytes = 4K"), "%s",
		  err);
	free(err);
	job(dir, 200, 1, "batch_size = 16\nmax_task_bytes = 4K\nmax_result_bytes = 4K",
	    "workers = 1");
	rc = t_gpud(dir, "run '%s/job.ini' --ui off --force", dir);
	err = t_read_in(dir, "err");
	cr_expect_eq(rc, 0, "%s", err);
	cr_expect(!strstr(err, "shared memory took"), "%s", err);
	free(err);
	job(dir, 200, 1, "", "workers = 1");
	rc = t_gpud(dir, "run '%s/job.ini' --ui off --force", dir);
	err = t_read_in(dir, "err");
	cr_expect_eq(rc, 0, "%s", err);
	cr_expect(!strstr(err, "shared memory took"), "%s", err);
	free(err);
}
