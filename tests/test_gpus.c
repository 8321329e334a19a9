/* SPDX-License-Identifier: MIT */
/* Workers that span GPUs (`gpus_per_worker`): every token form (listed ids, `all`
 * counted by a stand-in CUDA runtime, the launcher's `auto` tokens, a rank's share),
 * what each worker sees (CUDA_VISIBLE_DEVICES, gpud_worker_info.gpu_ids), a count that
 * does not divide, `gpud check`'s grouping, --stats-json, and a crash retiring only its
 * own group. Which worker runs which task is up to the run, so each result is checked
 * against its worker, and the grouping of every worker against check and the stats. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"

/* The job: `gpus` and gpus_per_worker as given, the `gpus` fixture worker. */
static void job(const char *dir, const char *gpus, unsigned per_worker, unsigned per_gpu)
{
	t_jobf(dir,
	       "[job]\ngpus = %s\ngpus_per_worker = %u\nworkers_per_gpu = %u\n"
	       "[worker]\nplugin = gpus\nsleep_us = 500\n"
	       "[generator]\nplugin = range\nstop = 300\n"
	       "[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       gpus, per_worker, per_gpu);
}

/* Every result line of dir/out.jsonl ok and saying one of `want` (a NULL-ended list
 * of what a worker reports); 300 of them. */
static void results_among(const char *dir, const char *const *want)
{
	char *out = t_read_in(dir, "out.jsonl");
	cr_assert(out, "no output");
	size_t lines = 0, bad = 0;
	char first_bad[512] = "";
	for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"), lines++) {
		const char *r = strstr(l, "\"result\": \"");
		bool known = false;
		if (r && strstr(l, "\"status\": \"ok\"")) {
			r += strlen("\"result\": \"");
			for (const char *const *w = want; *w && !known; w++)
				known = strncmp(r, *w, strlen(*w)) == 0 && r[strlen(*w)] == '"';
		}
		if (!known && !bad++)
			snprintf(first_bad, sizeof first_bad, "%s", l);
	}
	cr_expect_eq(bad, 0, "%zu results not ok or not what a worker should see, like %s", bad,
		     first_bad);
	cr_expect_eq(lines, 300, "every task once");
	free(out);
}

/* dir/name holds `needle`. */
static void has(const char *dir, const char *name, const char *needle)
{
	char *text = t_read_in(dir, name);
	cr_expect(text && strstr(text, needle), "%s lacks '%s':\n%s", name, needle,
		  text ? text : "(missing)");
	free(text);
}

Test(gpus, listed_ids_in_groups_of_two, .timeout = 120)
{
	const char *dir = t_tmpdir();
	job(dir, "0,1,2,3", 2, 2);
	cr_assert_eq(t_sh(dir, "\"$GPUD\" check job.ini > check 2>&1"), 0);
	has(dir, "check", ": OK: 4 GPUs in 2 groups of 2 x 2 workers; ");
	/* gpus from --set that the groups do not divide: the line says where gpus came
	 * from too. */
	cr_assert_eq(t_sh(dir, "\"$GPUD\" check job.ini --set job.gpus=0,1,2 2>nodiv"), 2);
	has(dir, "nodiv",
	    "does not divide the 3 GPUs [job] gpus lists: each worker takes 2 GPUs of its own, so "
	    "give a multiple of 2 GPUs or another gpus_per_worker (gpus from --set "
	    "job.gpus=0,1,2)\n");
	has(dir, "check", "2 GPU groups of 2 (gpus_per_worker), 2 workers each:");
	has(dir, "check", "GPU 0,1: workers 0 to 1, CUDA_VISIBLE_DEVICES=0,1\n");
	has(dir, "check", "GPU 2,3: workers 2 to 3, CUDA_VISIBLE_DEVICES=2,3\n");
	cr_assert_eq(t_sh(dir, "\"$GPUD\" run job.ini --ui off --stats-json stats.json 2>err"), 0);
	static const char *const want[] = {"wid=0 gpu=0 n=2 ids=0,1 cvd=0,1 env_ids=0,1",
					   "wid=1 gpu=0 n=2 ids=0,1 cvd=0,1 env_ids=0,1",
					   "wid=2 gpu=2 n=2 ids=2,3 cvd=2,3 env_ids=2,3",
					   "wid=3 gpu=2 n=2 ids=2,3 cvd=2,3 env_ids=2,3", NULL};
	results_among(dir, want);
	has(dir, "stats.json", "{\"worker_id\": 1, \"gpu_id\": 0, \"gpu_ids\": [0,1], ");
	has(dir, "stats.json", "{\"worker_id\": 3, \"gpu_id\": 2, \"gpu_ids\": [2,3], ");
	has(dir, "stats.json", "\"gpus\": [{\"gpu_id\": 0, \"gpu_ids\": [0,1], ");
	has(dir, "stats.json", "}, {\"gpu_id\": 2, \"gpu_ids\": [2,3], ");
	/* The metrics: a group's counters under its first GPU, with all of them. */
	cr_assert_eq(t_sh(dir,
			  "\"$GPUD\" run job.ini --ui off --force --set ui.metrics_file=m.prom "
			  "2>err"),
		     0);
	has(dir, "m.prom", "gpud_gpu_retired{gpu=\"0\",gpus=\"0,1\"} 0\n");
	has(dir, "m.prom", "gpud_gpu_retired{gpu=\"2\",gpus=\"2,3\"} 0\n");
	has(dir, "m.prom", "gpud_gpu_task_attempts_total{gpu=\"2\",gpus=\"2,3\",outcome=\"ok\"} ");
	/* A worker plugin built for ABI 1.3 runs as it did, on both GPUs of its group. */
	cr_assert_eq(t_sh(dir, "\"$GPUD\" run job.ini --ui off --set worker.plugin=gpus13 2>err"),
		     0);
	static const char *const old[] = {"wid=0 gpu=0 n=0 ids=old cvd=0,1 env_ids=0,1",
					  "wid=1 gpu=0 n=0 ids=old cvd=0,1 env_ids=0,1",
					  "wid=2 gpu=2 n=0 ids=old cvd=2,3 env_ids=2,3",
					  "wid=3 gpu=2 n=0 ids=old cvd=2,3 env_ids=2,3", NULL};
	results_among(dir, old);
	/* One GPU a worker, as before: each sees its own. */
	cr_assert_eq(t_sh(dir, "\"$GPUD\" run job.ini --ui off --set job.gpus_per_worker=1 "
			       "--set job.workers_per_gpu=1 2>err"),
		     0);
	static const char *const one[] = {"wid=0 gpu=0 n=1 ids=0 cvd=0 env_ids=0",
					  "wid=1 gpu=1 n=1 ids=1 cvd=1 env_ids=1",
					  "wid=2 gpu=2 n=1 ids=2 cvd=2 env_ids=2",
					  "wid=3 gpu=3 n=1 ids=3 cvd=3 env_ids=3", NULL};
	results_among(dir, one);
}

Test(gpus, all_counted_then_grouped_or_refused, .timeout = 120)
{
	const char *dir = t_tmpdir();
	job(dir, "all", 2, 1);
	char *env;
	cr_assert(asprintf(&env,
			   "mkdir -p cuda && ln -sf '%s' cuda/libcudart.so && "
			   "export LD_LIBRARY_PATH=\"$PWD/cuda:$LD_LIBRARY_PATH\"; ",
			   t_env("FAKECUDA")) > 0);
	char *script;
	cr_assert(asprintf(&script,
			   "%s FAKE_CUDA_DEVICES=4 \"$GPUD\" check job.ini > check 2>&1 && "
			   "FAKE_CUDA_DEVICES=4 \"$GPUD\" run job.ini --ui off 2>err",
			   env) > 0);
	cr_assert_eq(t_sh(dir, script), 0);
	free(script);
	has(dir, "check", "GPU 0,1: workers 0 to 0, CUDA_VISIBLE_DEVICES=0,1\n");
	has(dir, "check", "GPU 2,3: workers 1 to 1, CUDA_VISIBLE_DEVICES=2,3\n");
	static const char *const want[] = {"wid=0 gpu=0 n=2 ids=0,1 cvd=0,1 env_ids=0,1",
					   "wid=1 gpu=2 n=2 ids=2,3 cvd=2,3 env_ids=2,3", NULL};
	results_among(dir, want);
	/* Three GPUs found: refused at run start, in one line, before anything runs. */
	cr_assert(asprintf(&script, "%s FAKE_CUDA_DEVICES=3 \"$GPUD\" run job.ini 2>err", env) > 0);
	cr_expect_eq(t_sh(dir, script), 2);
	free(script);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(err, ""), 1, "%s", err);
	cr_expect(strstr(err, "job.ini:3: [job] gpus_per_worker = 2 does not divide the 3 GPUs "
			      "gpus = all found (the CUDA devices)"),
		  "%s", err);
	free(err);
	free(env);
}

Test(gpus, auto_takes_the_launchers_uuid_tokens_in_groups, .timeout = 120)
{
	const char *dir = t_tmpdir();
	job(dir, "auto", 2, 1);
	cr_assert_eq(t_sh(dir, "export CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb,GPU-ccc,GPU-ddd; "
			       "\"$GPUD\" check job.ini > check 2>&1 && "
			       "\"$GPUD\" run job.ini --ui off --stats-json stats.json 2>err"),
		     0);
	has(dir, "check", "GPU 0,1: workers 0 to 0, CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb\n");
	has(dir, "check", "GPU 2,3: workers 1 to 1, CUDA_VISIBLE_DEVICES=GPU-ccc,GPU-ddd\n");
	static const char *const want[] = {
		"wid=0 gpu=0 n=2 ids=0,1 cvd=GPU-aaa,GPU-bbb env_ids=0,1",
		"wid=1 gpu=2 n=2 ids=2,3 cvd=GPU-ccc,GPU-ddd env_ids=2,3", NULL};
	results_among(dir, want);
	has(dir, "stats.json", "{\"worker_id\": 1, \"gpu_id\": 2, \"gpu_ids\": [2,3], ");

	/* Two ranks on a node that both see the four: local rank 1's share is one group. */
	cr_assert_eq(t_sh(dir, "CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb,GPU-ccc,GPU-ddd "
			       "OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2 "
			       "\"$GPUD\" run job.ini --ui off --force --rank 0/1 2>err"),
		     0);
	static const char *const share[] = {
		"wid=0 gpu=0 n=2 ids=0,1 cvd=GPU-ccc,GPU-ddd env_ids=0,1", NULL};
	results_among(dir, share);

	/* A count the groups do not divide: the launcher's, or a rank's share of it. */
	cr_expect_eq(t_sh(dir, "CUDA_VISIBLE_DEVICES=GPU-aaa,GPU-bbb,GPU-ccc "
			       "\"$GPUD\" run job.ini 2>err"),
		     2);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(err, ""), 1, "%s", err);
	cr_expect(strstr(err, "job.ini:3: [job] gpus_per_worker = 2 does not divide the 3 GPUs "
			      "gpus = auto gave this rank (CUDA_VISIBLE_DEVICES tokens 1 to 3"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_sh(dir, "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 OMPI_COMM_WORLD_LOCAL_RANK=1 "
			       "OMPI_COMM_WORLD_LOCAL_SIZE=2 \"$GPUD\" check job.ini --rank 0/1 "
			       "2>err"),
		     2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "does not divide the 3 GPUs gpus = auto gave this rank "
			      "(CUDA_VISIBLE_DEVICES tokens 4 to 6 of the launcher's list)"),
		  "%s", err);
	free(err);
}

/* A group whose workers keep crashing is retired alone: the other group finishes every
 * task, and the messages and the stats name the whole group. */
Test(gpus, a_crash_retires_its_group_only, .timeout = 120)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0,1,2,3\ngpus_per_worker = 2\nmax_worker_restarts = 1\n"
		    "max_retries = 5\n"
		    "[worker]\nplugin = faulty\ncrash_all = 1\nonly_gpu = 2\nsleep_us = 200\n"
		    "[generator]\nplugin = range\nstop = 300\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	int rc = t_sh(dir, "\"$GPUD\" run job.ini --ui plain --stats-json stats.json 2>err");
	cr_expect(rc == 0 || rc == 1, "exit %d", rc);
	has(dir, "err", "(GPU 2,3) killed by SIGSEGV");
	has(dir, "err", "GPU 2,3 retired: its workers were restarted 1 times");
	char *err = t_read_in(dir, "err");
	cr_expect(!strstr(err, "GPU 0,1 retired"), "%s", err);
	free(err);
	has(dir, "stats.json", "{\"gpu_id\": 0, \"gpu_ids\": [0,1], ");
	has(dir, "stats.json", "\"retired\": false}, {\"gpu_id\": 2, \"gpu_ids\": [2,3], ");
	has(dir, "stats.json", "\"retired\": true}]");
	char *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 300, "every task one outcome");
	free(out);
}
