/* SPDX-License-Identifier: MIT */
/* Many ranks, one job: rank detection (--rank, [job], Slurm, Open MPI, PMI), shares
 * that add up to every task exactly once, {rank} paths, per-rank resume, gpud merge,
 * and a real `mpirun` (skipped with one line where Open MPI cannot start). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>
#include <criterion/criterion.h>

#include "helpers.h"

/* Reads out-0.jsonl .. out-(n-1).jsonl in dir; expects every id below `total` exactly
 * once over all of them, each ok with its input as result; with `each`, every rank's
 * file to hold some (static shares: each rank has its share). */
static void union_of(const char *dir, unsigned ranks, unsigned long total, bool each)
{
	unsigned char *seen = calloc(total, 1);
	unsigned long lines = 0, bad = 0;
	for (unsigned k = 0; k < ranks; k++) {
		char name[32];
		snprintf(name, sizeof name, "out-%u.jsonl", k);
		char *out = t_read_in(dir, name);
		cr_assert(out, "no %s", name);
		cr_expect(!each || t_count_lines(out, "{") > 0, "rank %u wrote nothing", k);
		for (const char *p = out; p && *p;) {
			/* Each line on its own: sscanf and strstr over the rest of the file
			 * would scan all of it per line (quadratic, minutes under ASan). */
			const char *e = strchr(p, '\n');
			size_t n = e ? (size_t)(e - p) : strlen(p);
			char line[256];
			unsigned long id;
			char want[48];
			if (n < sizeof line) {
				memcpy(line, p, n);
				line[n] = '\0';
			} else {
				line[0] = '\0';
			}
			if (sscanf(line, "{\"task_id\": %lu, \"status\": \"ok\"", &id) == 1 &&
			    id < total) {
				snprintf(want, sizeof want, "\"result\": \"%lu\"", id);
				if (!strstr(line, want))
					bad++;
				seen[id]++;
			} else {
				bad++;
			}
			lines++;
			p = e ? e + 1 : NULL;
		}
		free(out);
	}
	unsigned long missing = 0, twice = 0;
	for (unsigned long i = 0; i < total; i++) {
		missing += !seen[i];
		twice += seen[i] > 1;
	}
	cr_expect_eq(bad, 0);
	cr_expect_eq(missing, 0, "%lu ids missing", missing);
	cr_expect_eq(twice, 0, "%lu ids more than once", twice);
	cr_expect_eq(lines, total);
	free(seen);
}

static void union_once(const char *dir, unsigned ranks, unsigned long total)
{
	union_of(dir, ranks, total, true);
}

/* The same with dynamic shares, where a rank may claim nothing (on a loaded machine
 * one can start after the others claimed all). */
static void union_dynamic(const char *dir, unsigned ranks, unsigned long total)
{
	union_of(dir, ranks, total, false);
}

static void job(const char *dir, unsigned long n, const char *gen)
{
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = echo\n[generator]\n%s%lu\n"
	       "[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n",
	       gen, n);
}

Test(ranks, rank_by_hand_shares_add_up_and_merge_adds_up, .timeout = 120)
{
	const char *dir = t_tmpdir();
	job(dir, 100000, "plugin = range\nstop = ");
	cr_assert_eq(t_sh(dir, "for k in 0 1 2; do \"$GPUD\" run job.ini --rank $k/3 --ui off "
			       "--stats-json s-{rank}.json 2>>err & done; wait"),
		     0);
	union_once(dir, 3, 100000);
	cr_expect_eq(t_sh(dir, "ls job.rank0.journal job.rank1.journal job.rank2.journal "
			       ">/dev/null"),
		     0, "one journal per rank");
	/* The share of each is its share of the total, and merge adds them up. */
	char *s1 = t_read_in(dir, "s-1.json");
	cr_expect(strstr(s1, "\"total\": 33344,") || strstr(s1, "\"total\": 33312,"), "%s", s1);
	free(s1);
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/s-1.json %s/s-2.json", dir, dir, dir), 0);
	char *m = t_read_in(dir, "out");
	cr_expect(strstr(m, "{\"ranks\": 3, \"generated\": 100000, \"ok\": 100000, \"failed\": 0,"),
		  "%s", m);
	cr_expect(strstr(m, "\"total\": 100000,") && strstr(m, "\"exit_status\": 0,"), "%s", m);
	free(m);
	/* A generator that cannot jump (blob is not built here: lines can; use files of
	 * numbers through lines, which jumps, and range, which does). */
	cr_assert_eq(t_sh(dir, "seq 0 9999 > in.txt"), 0);
	job(dir, 0, "plugin = lines\npath = in.txt\n;");
	cr_assert_eq(t_sh(dir, "rm -f out-*.jsonl; for k in 0 1 2 3; do \"$GPUD\" run job.ini "
			       "--rank $k/4 --ui off 2>>err & done; wait"),
		     0);
	union_once(dir, 4, 10000);
}

Test(ranks, the_launchers_environment_decides_and_check_says_which, .timeout = 60)
{
	const char *dir = t_tmpdir();
	job(dir, 1000, "plugin = range\nstop = ");
	struct {
		const char *env, *want;
	} cases[] = {
		{"", "OK"},
		{"OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4", "rank 2 of 4 (from Open MPI)"},
		{"PMI_RANK=1 PMI_SIZE=3", "rank 1 of 3 (from PMI)"},
		{"SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1", "rank 1 of 2 (from Slurm (srun))"},
		/* An array of 3 (ids 4, 6, 8: step 2), each a step of 2 tasks: task 8's second
		 * is rank 2 * 2 + 1 = 5 of 6. */
		{"SLURM_ARRAY_TASK_ID=8 SLURM_ARRAY_TASK_MIN=4 SLURM_ARRAY_TASK_STEP=2 "
		 "SLURM_ARRAY_TASK_COUNT=3 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1",
		 "rank 5 of 6 (from Slurm array, srun step)"},
		{"SLURM_ARRAY_TASK_ID=1 SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_COUNT=3",
		 "rank 1 of 3 (from Slurm array)"},
		/* In a batch script outside srun, SLURM_PROCID/NTASKS describe the allocation:
		 * one rank. */
		{"SLURM_PROCID=0 SLURM_NTASKS=4", "OK"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char cmd[600];
		snprintf(cmd, sizeof cmd, "env %s \"$GPUD\" check job.ini > out 2>&1",
			 cases[i].env);
		t_sh(dir, cmd);
		char *out = t_read_in(dir, "out");
		cr_expect(strstr(out, cases[i].want), "%s: %s", cases[i].env, out);
		if (!*cases[i].env || strstr(cases[i].env, "NTASKS=4"))
			cr_expect(!strstr(out, "rank "), "%s: %s", cases[i].env, out);
		free(out);
	}
	/* --rank wins over the environment; [job] rank/ranks over the environment too. */
	t_sh(dir, "env OMPI_COMM_WORLD_RANK=2 OMPI_COMM_WORLD_SIZE=4 \"$GPUD\" check job.ini "
		  "--rank 0/2 > out 2>&1");
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "rank 0 of 2 (from --rank)"), "%s", out);
	free(out);
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --rank 3/3", dir), 2);
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --rank x", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--rank x: expected K/N"), "%s", err);
	free(err);
}

Test(ranks, shared_outputs_are_refused_naming_the_key, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 10\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --rank 1/2", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(
		strstr(err, "job.ini:10: [sink] path = ") &&
			strstr(err, "out.jsonl: 2 ranks would write it together; put {rank} in it"),
		"%s", err);
	free(err);
	/* A plugin's file named by a key ending in _out (the tar generator's keys_out): the
	 * same rule, wherever the key is. */
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --rank 1/2 --set sink.path=o{rank} "
			    "--set worker.trace_out=t.txt",
			    dir),
		     2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--set worker.trace_out=t.txt: trace_out = ") &&
			  strstr(err, "t.txt: 2 ranks would write it together; put {rank} in it"),
		  "%s", err);
	free(err);
	/* Standard output is each rank's own. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --rank 1/2 --set sink.path=-", dir), 0);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --rank 1/2 --set sink.path=-", dir), 0);
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --rank 1/2 --set sink.path=o{rank} "
			    "--stats-json %s/s.json",
			    dir, dir),
		     2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--stats-json ") && strstr(err, "2 ranks would write it together"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --rank 1/2 --set sink.path=o{rank} "
			    "--set job.journal=j.journal",
			    dir),
		     2);
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --rank 1/2 --set sink.path=o{rank} "
			    "--set job.ordered=true",
			    dir),
		     2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "ordered = true and 2 ranks"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --rank 1/2 --set sink.path=%s/o{rank}of{ranks} "
			    "--set job.journal=%s/j{rank}.journal",
			    dir, dir, dir),
		     0);
	/* Rank 1 of 2 has no task among ids 0-9 (chunk 0 is rank 0's): an empty share ends
	 * cleanly, its files made. */
	cr_expect_eq(t_sh(dir, "test -e o1of2 && test -s j1.journal"), 0);
	char *out = t_read_in(dir, "err");
	cr_expect(strstr(out, "gpud: 0 tasks: 0 ok"), "%s", out);
	free(out);
}

Test(ranks, one_rank_killed_and_resumed_finishes_its_share, .timeout = 120)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 500\n"
		    "[generator]\nplugin = range\nstop = 12000\n"
		    "[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir,
	     WAIT_FOR "\"$GPUD\" run job.ini --rank 0/3 --ui off 2>>err & a=$!\n"
		      "\"$GPUD\" run job.ini --rank 1/3 --ui off 2>>err & b=$!\n"
		      "\"$GPUD\" run job.ini --rank 2/3 --ui off 2>>err & c=$!\n"
		      "w '[ -s out-1.jsonl ]'; sleep 0.3; kill -9 $b\n"
		      "wait $a $c\n"
		      "\"$GPUD\" run job.ini --rank 1/3 --ui off --resume 2>>err; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	union_once(dir, 3, 12000);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "tasks were already done"), "%s", err);
	free(err);
}

Test(ranks, mpirun_np_3_and_4_over_100000_tasks, .timeout = 180)
{
	const char *dir = t_tmpdir();
	if (t_sh(dir, "command -v mpirun >/dev/null && mpirun --allow-run-as-root --oversubscribe "
		      "-np 2 true >/dev/null 2>&1") != 0)
		cr_skip_test("Open MPI's mpirun is not installed or cannot start here "
			     "(Debian: openmpi-bin)");
	job(dir, 100000, "plugin = range\nstop = ");
	for (int np = 3; np <= 4; np++) {
		char cmd[400];
		/* Each rank's standard error to a file of its own: mpirun forwards them as
		 * they come, and two ranks' lines can run into each other anywhere. */
		snprintf(cmd, sizeof cmd,
			 "rm -f out-*.jsonl s-*.json; mpirun --allow-run-as-root "
			 "--oversubscribe -np %d sh -c 'exec \"$GPUD\" run job.ini --ui off "
			 "--stats-json s-{rank}.json 2>>err-%d-$OMPI_COMM_WORLD_RANK'; "
			 "echo $? > rc",
			 np, np);
		t_sh(dir, cmd);
		cr_expect_eq(t_read_long(dir, "rc"), 0, "mpirun -np %d", np);
		union_once(dir, (unsigned)np, 100000);
		t_sh(dir, "\"$GPUD\" check job.ini > /dev/null; ls s-*.json | wc -l > n");
		cr_expect_eq(t_read_long(dir, "n"), np, "one stats file per rank");
	}
	/* One summary per rank, each in its rank's own file. */
	t_sh(dir, "cat err-3-* err-4-* > err");
	char *err = t_read_in(dir, "err");
	unsigned summaries = 0;
	for (const char *l = err; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *nl = strchr(l, '\n'), *in = strstr(l, " not run in ");
		summaries += !strncmp(l, "gpud: ", 6) && in && (!nl || in < nl);
	}
	cr_expect_eq(summaries, 3 + 4, "one summary per rank:\n%s", err);
	free(err);
}

Test(ranks, gpus_auto_takes_the_launchers_tokens_and_splits_them_per_node, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = auto\n[worker]\nplugin = probe\nsleep_us = 2000\n"
	       "[generator]\nplugin = range\nstop = 200\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	/* UUID-style tokens, as they are: worker i gets token i, and nothing else. */
	t_sh(dir, "CUDA_VISIBLE_DEVICES=GPU-1a2b-aaaa,GPU-3c4d-bbbb \"$GPUD\" run job.ini --ui off "
		  "2>err; grep -o 'gpu=[0-9]* cvd=[^ ]*' out.jsonl | sort -u > seen");
	char *seen = t_read_in(dir, "seen");
	cr_expect_str_eq(seen, "gpu=0 cvd=GPU-1a2b-aaaa\ngpu=1 cvd=GPU-3c4d-bbbb\n");
	free(seen);
	/* Two ranks on a node that both see 0,1,2,3 (mpirun, srun --gres): local rank 1
	 * takes 2 and 3. (--rank 0/1 keeps every task here.) */
	t_sh(dir,
	     "CUDA_VISIBLE_DEVICES=0,1,2,3 OMPI_COMM_WORLD_LOCAL_RANK=1 "
	     "OMPI_COMM_WORLD_LOCAL_SIZE=2 \"$GPUD\" run job.ini --ui off --force --rank 0/1 2>err; "
	     "grep -o 'cvd=[^ ]*' out.jsonl | sort -u > seen");
	seen = t_read_in(dir, "seen");
	cr_expect_str_eq(seen, "cvd=2\ncvd=3\n");
	free(seen);
	/* A task Slurm gave GPUs of its own keeps them all. */
	t_sh(dir,
	     "CUDA_VISIBLE_DEVICES=5,7 SLURM_GPUS_PER_TASK=2 SLURM_STEP_NUM_TASKS=2 "
	     "SLURM_PROCID=0 SLURM_LOCALID=1 SLURM_STEP_TASKS_PER_NODE=2 \"$GPUD\" run job.ini "
	     "--ui off --force --rank 0/1 2>err; grep -o 'cvd=[^ ]*' out.jsonl | sort -u > seen");
	seen = t_read_in(dir, "seen");
	cr_expect_str_eq(seen, "cvd=5\ncvd=7\n");
	free(seen);
	/* No list, or one that cannot be split without booking a GPU twice: one line. */
	cr_expect_eq(t_sh(dir, "env -u CUDA_VISIBLE_DEVICES \"$GPUD\" run job.ini 2>err"), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpus = auto: CUDA_VISIBLE_DEVICES is not set"), "%s", err);
	free(err);
	cr_expect_eq(
		t_sh(dir,
		     "CUDA_VISIBLE_DEVICES=0,1,2 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 "
		     "OMPI_COMM_WORLD_LOCAL_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=2 "
		     "\"$GPUD\" check job.ini 2>err"),
		2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "3 GPUs (CUDA_VISIBLE_DEVICES = 0,1,2) for 2 ranks on this node"),
		  "%s", err);
	free(err);
}

/* The launcher's variables are input like the job file: a local size below 1, a local rank
 * not below it, and a CUDA_VISIBLE_DEVICES list that `gpus` itself would refuse each end
 * in exit 2 and one line naming the variable and its value (not a crash). */
Test(ranks, gpus_auto_refuses_launcher_values_naming_the_variable, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = auto\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 10\n[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	struct {
		const char *env, *want;
	} cases[] = {
		{"SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 SLURM_LOCALID=0 "
		 "SLURM_STEP_TASKS_PER_NODE=0",
		 "SLURM_STEP_TASKS_PER_NODE = '0': expected from 1 to 1000000 tasks on this node"},
		{"OMPI_COMM_WORLD_LOCAL_SIZE=0",
		 "OMPI_COMM_WORLD_LOCAL_SIZE = '0': expected from 1 to 1000000 tasks"},
		{"SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 SLURM_LOCALID=2 "
		 "SLURM_STEP_TASKS_PER_NODE=2",
		 "SLURM_LOCALID = 2: expected a local rank below SLURM_STEP_TASKS_PER_NODE = 2"},
		{"OMPI_COMM_WORLD_LOCAL_RANK=5 OMPI_COMM_WORLD_LOCAL_SIZE=2",
		 "OMPI_COMM_WORLD_LOCAL_RANK = 5: expected a local rank below "
		 "OMPI_COMM_WORLD_LOCAL_SIZE = 2"},
		{"MPI_LOCALRANKID=3 MPI_LOCALNRANKS=3",
		 "MPI_LOCALRANKID = 3: expected a local rank below MPI_LOCALNRANKS = 3"},
		{"CUDA_VISIBLE_DEVICES=0,0", "CUDA_VISIBLE_DEVICES = '0,0': GPU 0 is listed twice"},
		{"CUDA_VISIBLE_DEVICES=-1",
		 "CUDA_VISIBLE_DEVICES = '-1': expected a list of GPU ids"},
		{"CUDA_VISIBLE_DEVICES=0,1,,2",
		 "CUDA_VISIBLE_DEVICES = '0,1,,2': expected a list of GPU ids"},
		{"CUDA_VISIBLE_DEVICES=GPU-1a,GPU-1a",
		 "CUDA_VISIBLE_DEVICES = 'GPU-1a,GPU-1a': GPU GPU-1a is listed twice"},
		{"CUDA_VISIBLE_DEVICES=0,70000",
		 "CUDA_VISIBLE_DEVICES = '0,70000': GPU id too large"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char cmd[600];
		snprintf(cmd, sizeof cmd,
			 "env CUDA_VISIBLE_DEVICES=0,1 %s \"$GPUD\" check job.ini --rank 0/1 "
			 "> out 2> err",
			 cases[i].env);
		int rc = t_sh(dir, cmd);
		char *err = t_read_in(dir, "err");
		cr_expect_eq(rc, 2, "%s: exit %d: %s", cases[i].env, rc, err);
		cr_expect(strstr(err, cases[i].want), "%s: %s", cases[i].env, err);
		cr_expect_eq(t_count_lines(err, ""), 1, "%s: one line: %s", cases[i].env, err);
		free(err);
	}
	/* The same tokens written in gpus are refused with the same words. */
	const char *lists[][2] = {{"0,0", "GPU 0 is listed twice"},
				  {"-1", "expected a list of GPU ids"},
				  {"0,1,,2", "expected a list of GPU ids"}};
	for (size_t i = 0; i < 3; i++) {
		cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --set job.gpus=%s", dir, lists[i][0]),
			     2);
		char *err = t_read_in(dir, "err");
		cr_expect(strstr(err, lists[i][1]), "gpus = %s: %s", lists[i][0], err);
		free(err);
	}
	/* A launcher that says what it should is taken. */
	cr_expect_eq(t_sh(dir, "env CUDA_VISIBLE_DEVICES=GPU-1a,3 OMPI_COMM_WORLD_LOCAL_RANK=1 "
			       "OMPI_COMM_WORLD_LOCAL_SIZE=2 \"$GPUD\" check job.ini --rank 0/1 "
			       "> out 2> err"),
		     0);
}

/* The whole Slurm story in one test (one Slurm at a time on its fixed ports): srun with
 * GPUs from gres, an array, and a requeue resumed. */
Test(ranks, a_real_slurm_srun_array_and_requeue, .timeout = 300)
{
	const char *dir = t_tmpdir();
	if (t_sh(dir, "sh \"$SRCDIR/tests/slurm.sh\" start \"$PWD/slurm\" > why 2>&1") != 0) {
		char *why = t_read_in(dir, "why");
		cr_skip_test("no one-node Slurm here: %s", why ? why : "?");
	}
	/* srun -n 2 with 2 GPUs from gres: both tasks see 0,1; gpus = auto splits them. */
	t_jobf(dir, "[job]\ngpus = auto\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 30000\n[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir, "export SLURM_CONF=$PWD/slurm/slurm.conf; timeout 120 srun -n 2 --gres=gpu:2 "
		  "\"$GPUD\" run job.ini --ui off 2>>err; echo $? > rc");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	union_once(dir, 2, 30000);
	t_jobf(dir, "[job]\ngpus = auto\n[worker]\nplugin = probe\n[generator]\nplugin = range\n"
		    "stop = 400\n[sink]\nplugin = jsonl\npath = p-{rank}.jsonl\n");
	t_sh(dir,
	     "export SLURM_CONF=$PWD/slurm/slurm.conf; timeout 120 srun -n 2 --gres=gpu:2 "
	     "\"$GPUD\" run job.ini --ui off 2>>err; "
	     "grep -o 'cvd=[^ ]*' p-0.jsonl | sort -u > cvd0; grep -o 'cvd=[^ ]*' p-1.jsonl | sort -u > cvd1");
	char *c0 = t_read_in(dir, "cvd0"), *c1 = t_read_in(dir, "cvd1");
	cr_expect(c0 && c1 && !strcmp(c0, "cvd=0\n") && !strcmp(c1, "cvd=1\n"),
		  "each task's worker must see one GPU of its own: rank 0 %s, rank 1 %s", c0, c1);
	free(c0);
	free(c1);

	/* An array of 3: each array task a rank. */
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n[generator]\nplugin = range\n"
		    "stop = 30000\n[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir,
	     "rm -f out-*.jsonl; printf '#!/bin/sh\\ncd %s && \"$GPUD\" run job.ini --ui off\\n' "
	     "\"$PWD\" > array.sh; export SLURM_CONF=$PWD/slurm/slurm.conf; "
	     "timeout 120 sbatch --wait --array=0-2 -o /dev/null array.sh >/dev/null 2>>err; "
	     "echo $? > rc");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	union_once(dir, 3, 30000);

	/* Dynamic shares under Slurm: an srun step of 2 (the node has 2 CPUs), then an
	 * array of 3, claiming in one folder; every id once. */
	t_jobf(dir,
	       "[job]\ngpus = 0\nshares = dynamic\nlease = 1\nclaims = claims\n"
	       "journal = j-{rank}.journal\n[worker]\nplugin = echo\n[generator]\n"
	       "plugin = range\nstop = 30000\n[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir, "rm -rf out-*.jsonl claims j-*; export SLURM_CONF=$PWD/slurm/slurm.conf; "
		  "timeout 120 srun -n 2 \"$GPUD\" run job.ini --ui off 2>>err; echo $? > rc; "
		  "cat out-*.jsonl > all; rm out-*.jsonl; mv all out-0.jsonl");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	/* (One step may start well before the other on a loaded machine and claim all:
	 * the union is what counts, as for the array below.) */
	union_once(dir, 1, 30000);
	t_sh(dir, "rm -rf out-*.jsonl claims j-*; export SLURM_CONF=$PWD/slurm/slurm.conf; "
		  "timeout 120 sbatch --wait --array=0-2 -o /dev/null array.sh >/dev/null 2>>err; "
		  "echo $? > rc; ls claims | grep -c '^done' > n_done; "
		  "cat out-*.jsonl > all; rm out-*.jsonl; mv all out-0.jsonl");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	cr_expect_eq(t_read_long(dir, "n_done"), 3);
	/* (Array tasks may run one after another here: the first can claim it all, and
	 * the later ones then run nothing; the union is what counts.) */
	union_once(dir, 1, 30000);

	/* A requeued job resumes: what its first run finished does not run again. */
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = faulty\nsleep_us = 1000\n"
		    "[generator]\nplugin = range\nstop = 8000\n"
		    "[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir, WAIT_FOR
	     "rm -f out-*.jsonl; export SLURM_CONF=$PWD/slurm/slurm.conf\n"
	     "printf '#!/bin/sh\\ncd %s && \"$GPUD\" run job.ini --ui off --resume 2>>rq.err\\n' "
	     "\"$PWD\" > rq.sh\n"
	     "j=$(sbatch --parsable --requeue -o /dev/null rq.sh)\n"
	     "w '[ -s out-0.jsonl ]'; sleep 0.5; scontrol requeue $j\n"
	     "k=0; while [ $k -lt 120 ] && [ -n \"$(squeue -h -j $j 2>/dev/null)\" ]; do "
	     "sleep 0.5; k=$((k+1)); done\n");
	union_once(dir, 1, 8000);
	char *err = t_read_in(dir, "rq.err");
	cr_expect(err && strstr(err, "tasks were already done"), "the requeued run: %s", err);
	free(err);
	t_sh(dir, "sh \"$SRCDIR/tests/slurm.sh\" stop \"$PWD/slurm\"");
}

Test(ranks, merge_refuses_what_is_not_a_stats_file, .timeout = 30)
{
	const char *dir = t_tmpdir();
	free(t_write(dir, "x.json", "{\"something\": 1}\n"));
	cr_expect_eq(t_gpud(dir, "merge %s/x.json", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "not a gpud --stats-json file"), "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "merge %s/missing.json", dir), 2);
	cr_expect_eq(t_gpud(dir, "merge"), 2);
}

/* Standard output of the last command is one JSON document, with no NaN or Infinity. */
static void valid_json(const char *dir)
{
	cr_expect_eq(t_sh(dir, "python3 -c 'import json, sys\n"
			       "def bad(c): sys.exit(\"not JSON: \" + c)\n"
			       "json.load(sys.stdin, parse_constant=bad)' <out"),
		     0, "not JSON: %s", t_read_in(dir, "out"));
}

Test(ranks, merge_refuses_duplicates_and_other_jobs_and_names_missing_ranks, .timeout = 60)
{
	const char *dir = t_tmpdir();
	job(dir, 1000, "plugin = range\nstop = ");
	cr_assert_eq(t_sh(dir, "for k in 0 1 2; do \"$GPUD\" run job.ini --rank $k/3 --ui off "
			       "--stats-json s-{rank}.json 2>>err || exit 1; done"),
		     0);
	/* Each file records its share of which job. */
	char *s1 = t_read_in(dir, "s-1.json");
	cr_expect(strstr(s1, "\"rank\": 1, \"ranks\": 3, \"job_id\": \""), "%s", s1);
	free(s1);
	/* One file twice, or a copy of one: refused, naming both. */
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/s-0.json", dir, dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "s-0.json and ") && strstr(err, "are the same file"), "%s", err);
	free(err);
	char *out = t_read_in(dir, "out");
	cr_expect_str_empty(out, "a summary of a duplicate: %s", out);
	free(out);
	cr_assert_eq(t_sh(dir, "cp s-0.json copy.json"), 0);
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/s-1.json %s/copy.json", dir, dir, dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "s-0.json and ") && strstr(err, "copy.json are both rank 0 of 3"),
		  "%s", err);
	free(err);
	/* A missing rank is named, and the summary says it is partial. */
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/s-2.json", dir, dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "1 of the job's 3 ranks have no file: 1;"), "%s", err);
	free(err);
	out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"job_ranks\": 3, \"missing_ranks\": [1]"), "%s", out);
	free(out);
	valid_json(dir);
	/* Another number of ranks, another job (base_seed): refused. */
	cr_assert_eq(t_sh(dir,
			  "\"$GPUD\" run job.ini --rank 1/4 --ui off --stats-json four-{rank}.json "
			  "2>>err && \"$GPUD\" run job.ini --rank 1/3 --set job.base_seed=7 "
			  "--ui off --stats-json seed-{rank}.json 2>>err"),
		     0);
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/four-1.json", dir, dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "over 3 ranks") && strstr(err, "four-1.json of one over 4"), "%s",
		  err);
	free(err);
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/seed-1.json", dir, dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "seed-1.json are of different jobs"), "%s", err);
	free(err);
	/* All three: one summary, exit 0. */
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/s-1.json %s/s-2.json", dir, dir, dir), 0);
	out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"generated\": 1000,") && strstr(out, "\"missing_ranks\": []"), "%s",
		  out);
	free(out);
	/* A file from before ranks were recorded: merged, with the check said undone. */
	free(t_write(dir, "old.json",
		     "{\"generated\": 5, \"ok\": 5, \"failed\": 0, \"timed_out\": 0, "
		     "\"not_run\": 0, \"retried\": 0, \"setup_failures\": 0, "
		     "\"worker_restarts\": 0, \"host_cpu_seconds\": 0.1, \"total\": 5, "
		     "\"exit_status\": 0}\n"));
	cr_expect_eq(t_gpud(dir, "merge %s/old.json %s/s-1.json", dir, dir), 0);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "old.json says no rank") && strstr(err, "cannot be told"), "%s", err);
	free(err);
	valid_json(dir);
}

Test(ranks, merge_prints_valid_json_whatever_the_files_hold, .timeout = 60)
{
	const char *dir = t_tmpdir();
	static const char counts[] =
		"{\"generated\": 2, \"ok\": 2, \"failed\": 0, \"timed_out\": 0, "
		"\"not_run\": 0, \"retried\": 0, \"setup_failures\": 0, "
		"\"worker_restarts\": 0, \"host_cpu_seconds\": 0.5, \"total\": 2, "
		"\"exit_status\": 0";
	char text[1024];
	/* Elapsed 0, and no times at all: no division by zero, no invented times. */
	snprintf(text, sizeof text,
		 "%s, \"start_time\": 100.0, \"end_time\": 100.0, "
		 "\"elapsed\": 0}\n",
		 counts);
	free(t_write(dir, "zero.json", text));
	snprintf(text, sizeof text, "%s}\n", counts);
	free(t_write(dir, "untimed.json", text));
	cr_expect_eq(t_gpud(dir, "merge %s/untimed.json", dir), 0);
	valid_json(dir);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "\"start_time\": null, \"end_time\": null, \"elapsed\": null"), "%s",
		  out);
	free(out);
	cr_expect_eq(t_gpud(dir, "merge %s/untimed.json %s/zero.json", dir, dir), 0);
	valid_json(dir);
	/* Numbers JSON allows but a double does not hold (1e999): null, or refused when the
	 * figure is a count. */
	snprintf(text, sizeof text, "%s, \"start_time\": 1e999, \"end_time\": -1e999}\n", counts);
	free(t_write(dir, "huge.json", text));
	cr_expect_eq(t_gpud(dir, "merge %s/huge.json", dir), 0);
	valid_json(dir);
	cr_expect_eq(t_gpud(dir, "merge %s/huge.json %s/zero.json", dir, dir), 0);
	valid_json(dir);
	free(t_write(dir, "count.json",
		     "{\"generated\": 1e999, \"ok\": 2, \"failed\": 0, "
		     "\"timed_out\": 0, \"not_run\": 0, \"retried\": 0, "
		     "\"setup_failures\": 0, \"worker_restarts\": 0, "
		     "\"host_cpu_seconds\": 1e999, \"exit_status\": 0}\n"));
	cr_expect_eq(t_gpud(dir, "merge %s/count.json", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "count.json: no \"generated\" that is a count"), "%s", err);
	free(err);
}

Test(ranks, merge_refuses_devices_and_huge_files, .timeout = 60)
{
	const char *dir = t_tmpdir();
	cr_expect_eq(t_gpud(dir, "merge /dev/zero"), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "/dev/zero: not a regular file"), "%s", err);
	free(err);
	cr_assert_eq(t_sh(dir, "truncate -s 100M big.json"), 0);
	cr_expect_eq(t_gpud(dir, "merge %s/big.json", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "big.json: 104857600 bytes, more than the 8 MiB"), "%s", err);
	free(err);
}

/* ---- dynamic shares ([job] shares = dynamic, claims.h) ---- */

/* fast.ini and slow.ini: one job, the slow one's worker 4x slower a task; claims in
 * `claims`, a journal per rank. */
static void dynamic_jobs(const char *dir, unsigned long n, const char *gen)
{
	static const char body[] =
		"[job]\ngpus = 0,1\nshares = dynamic\nclaims = claims\nlease = 1\n"
		"journal = j-{rank}.journal\n[ui]\nmetrics_file = m-{rank}.prom\n"
		"[worker]\nplugin = faulty\n"
		"sleep_us = %u\n[generator]\n%s%lu\n"
		"[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n";
	char *text;
	cr_assert(asprintf(&text, body, 200u, gen, n) > 0);
	free(t_write(dir, "fast.ini", text));
	free(text);
	cr_assert(asprintf(&text, body, 800u, gen, n) > 0);
	free(t_write(dir, "slow.ini", text));
	free(text);
}

/* The "total" of rank k's --stats-json s-k.json: the tasks it ran. */
static long rank_total(const char *dir, unsigned k)
{
	char name[32];
	snprintf(name, sizeof name, "s-%u.json", k);
	char *s = t_read_in(dir, name);
	cr_assert(s, "no %s", name);
	const char *t = strstr(s, "\"total\": ");
	cr_assert(t, "%s", s);
	long v = atol(t + 9);
	cr_expect(strstr(s, "\"shares\": \"dynamic\", \"claims\": "), "%s", s);
	free(s);
	return v;
}

Test(ranks, dynamic_shares_follow_each_ranks_speed_every_id_once, .timeout = 180)
{
	const char *dir = t_tmpdir();
	dynamic_jobs(dir, 20000, "plugin = range\nstop = ");
	cr_assert_eq(t_sh(dir, "for k in 0 1; do \"$GPUD\" run fast.ini --rank $k/3 --ui off "
			       "--stats-json s-{rank}.json 2>>err & done\n"
			       "\"$GPUD\" run slow.ini --rank 2/3 --ui off --stats-json "
			       "s-{rank}.json 2>>err & wait"),
		     0);
	union_dynamic(dir, 3, 20000);
	long t0 = rank_total(dir, 0), t1 = rank_total(dir, 1), t2 = rank_total(dir, 2);
	cr_expect_eq(t0 + t1 + t2, 20000);
	/* The slow rank did fewer than either fast one (a timing: by a wide margin, 4x
	 * slower; the ratio of run times is in bench/shares.sh). */
	cr_expect(t2 < t0 && t2 < t1, "shares %ld %ld %ld", t0, t1, t2);
	/* Each rank's share in its metrics. */
	char *m = t_read_in(dir, "m-2.prom");
	cr_expect(m && strstr(m, "gpud_rank_info{rank=\"2\",ranks=\"3\",shares=\"dynamic\"} 1") &&
			  strstr(m, "gpud_share_claimed_tasks ") &&
			  strstr(m, "gpud_share_claims_total "),
		  "%s", m);
	free(m);
	/* A generator without a count (lines reads a file): claims go on until a rank
	 * finds the stream ended; 4 ranks over 10,000 lines. */
	cr_assert_eq(t_sh(dir, "seq 0 9999 > in.txt; rm -rf claims out-*.jsonl j-*"), 0);
	dynamic_jobs(dir, 0, "plugin = lines\npath = in.txt\n;");
	cr_assert_eq(t_sh(dir, "for k in 0 1 2; do \"$GPUD\" run fast.ini --rank $k/4 --ui off "
			       "2>>err & done\n"
			       "\"$GPUD\" run slow.ini --rank 3/4 --ui off 2>>err & wait"),
		     0);
	union_dynamic(dir, 4, 10000);
}

Test(ranks, dynamic_shares_checked_and_refused_naming_where, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\nshares = sometimes\n[worker]\nplugin = echo\n"
		    "[generator]\nplugin = range\nstop = 10\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "check %s/job.ini", dir), 2);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.ini:3") && strstr(err, "expected static or dynamic"), "%s", err);
	free(err);
	/* The claims folder is every rank's. */
	t_jobf(dir,
	       "[job]\ngpus = 0\nshares = dynamic\nclaims = c-{rank}\n[worker]\n"
	       "plugin = echo\n[generator]\nplugin = range\nstop = 10\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "check %s/job.ini --rank 0/2", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "job.ini:4: [job] claims") && strstr(err, "leave {rank} out"), "%s",
		  err);
	free(err);
	/* gpud check says where the claims go; the default is beside the job file. */
	t_jobf(dir, "[job]\ngpus = 0\nshares = dynamic\n[worker]\nplugin = echo\n"
		    "[generator]\nplugin = range\nstop = 1000\n"
		    "[sink]\nplugin = jsonl\npath = o{rank}.jsonl\n");
	cr_expect_eq(t_gpud(dir, "check %s/job.ini --rank 1/2", dir), 0);
	char *out = t_read_in(dir, "out");
	cr_expect(strstr(out, "shares: dynamic, claimed in ") && strstr(out, "/job.claims"), "%s",
		  out);
	free(out);
	/* Rank 1 alone (it claims every chunk, then finishes rank 0's empty share after
	 * the lease), then a fresh run of rank 1 over its own claims: refused (its output
	 * is about to be emptied); --resume goes on. */
	cr_assert_eq(t_gpud(dir, "run %s/job.ini --rank 1/2 --ui off --set job.lease=0.5", dir), 0);
	cr_expect_eq(t_gpud(dir, "run %s/job.ini --rank 1/2 --ui off --force", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "holds claims rank 1 made in an earlier run") &&
			  strstr(err, "--resume goes on from them"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_gpud(dir, "run %s/job.ini --rank 1/2 --ui off --resume", dir), 0);
	/* ordered = true cannot be kept by chunks claimed as they come. */
	t_jobf(dir, "[job]\ngpus = 0\nshares = dynamic\nordered = true\n[worker]\nplugin = echo\n"
		    "[generator]\nplugin = range\nstop = 10\n[sink]\nplugin = null\n");
	cr_expect_eq(t_gpud(dir, "check %s/job.ini", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "ordered = true and shares = dynamic"), "%s", err);
	free(err);
}

Test(ranks, dynamic_shares_a_lost_rank_is_finished_by_the_others, .timeout = 180)
{
	const char *dir = t_tmpdir();
	dynamic_jobs(dir, 12000, "plugin = range\nstop = ");
	/* One rank killed with SIGKILL part way: its alive.r1 stands still, and after the
	 * lease (1 s) one of the others resumes its share (its journal and output), so
	 * the run ends with every id once and no one starting rank 1 again. */
	t_sh(dir, "\"$GPUD\" run fast.ini --rank 0/3 --ui off --stats-json s-{rank}.json "
		  "2>>err & a=$!\n"
		  "\"$GPUD\" run fast.ini --rank 1/3 --ui off --stats-json s-{rank}.json "
		  "2>>err & b=$!\n"
		  "\"$GPUD\" run fast.ini --rank 2/3 --ui off --stats-json s-{rank}.json "
		  "2>>err & c=$!\n"
		  "w '[ -s out-1.jsonl ]'; sleep 0.2; kill -9 $b && echo 1 > killed\n"
		  "wait $a; echo $? > rc0; wait $c; echo $? > rc2\n"
		  "ls claims/done.r0 claims/done.r1 claims/done.r2 > /dev/null; echo $? > done\n");
	cr_expect_eq(t_read_long(dir, "killed"), 1, "rank 1 ended before it was killed");
	cr_expect_eq(t_read_long(dir, "rc0"), 0);
	cr_expect_eq(t_read_long(dir, "rc2"), 0);
	cr_expect_eq(t_read_long(dir, "done"), 0, "every rank's share finished");
	union_dynamic(dir, 3, 12000);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "gpud: rank 1 of 3: no sign of life for 1.0 s") &&
			  strstr(err, "finishing its share") &&
			  strstr(err, "tasks were already done"),
		  "%s", err);
	free(err);
	/* The three stats files add up: rank 1's is the takeover's. */
	long t0 = rank_total(dir, 0), t1 = rank_total(dir, 1), t2 = rank_total(dir, 2);
	cr_expect(t0 > 0 && t1 > 0 && t2 > 0, "%ld %ld %ld", t0, t1, t2);
}

Test(ranks, dynamic_shares_a_stopped_rank_that_comes_back_finishes_nothing_twice, .timeout = 180)
{
	const char *dir = t_tmpdir();
	dynamic_jobs(dir, 12000, "plugin = range\nstop = ");
	/* SIGSTOP past the lease: the others take rank 1 for lost, but the takeover is
	 * refused (rank 1 still holds its journal and outputs); after SIGCONT it finishes
	 * its own share, and nothing is in two outputs. */
	t_sh(dir, "for k in 0 1 2; do \"$GPUD\" run fast.ini --rank $k/3 --ui off 2>>err & "
		  "eval p$k=$!; done\n"
		  "w '[ -s out-1.jsonl ]'; sleep 0.2; kill -STOP $p1 && echo 1 > stopped\n"
		  "sleep 3; kill -CONT $p1\n"
		  "wait $p0; echo $? > rc0; wait $p1; echo $? > rc1; wait $p2; echo $? > rc2\n");
	cr_expect_eq(t_read_long(dir, "stopped"), 1, "rank 1 ended before it was stopped");
	cr_expect_eq(t_read_long(dir, "rc0"), 0);
	cr_expect_eq(t_read_long(dir, "rc1"), 0);
	cr_expect_eq(t_read_long(dir, "rc2"), 0);
	union_dynamic(dir, 3, 12000);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "rank 1 of 3 still holds its outputs"), "%s", err);
	free(err);
}

Test(ranks, dynamic_shares_the_whole_job_killed_then_resumed, .timeout = 180)
{
	const char *dir = t_tmpdir();
	dynamic_jobs(dir, 12000, "plugin = range\nstop = ");
	t_sh(dir, "p=; for k in 0 1 2; do \"$GPUD\" run slow.ini --rank $k/3 --ui off 2>>err & "
		  "p=\"$p $!\"; done\n"
		  "w '[ -s out-0.jsonl ] && [ -s out-1.jsonl ] && [ -s out-2.jsonl ]'; sleep 0.3\n"
		  "kill -9 $p && echo 1 > killed; wait\n"
		  "\"$GPUD\" status slow.ini > status1\n"
		  "for k in 0 1 2; do \"$GPUD\" run slow.ini --rank $k/3 --ui off --resume "
		  "2>>err & done; wait\n"
		  "\"$GPUD\" status slow.ini > status2\n");
	cr_expect_eq(t_read_long(dir, "killed"), 1, "the ranks ended before they were killed");
	union_dynamic(dir, 3, 12000);
	/* gpud status: every rank side by side, what is missing, and then nothing. */
	char *st = t_read_in(dir, "status1");
	cr_expect(strstr(st, "shares: dynamic, 3 ranks, claims in ") && strstr(st, "rank 2: ") &&
			  strstr(st, "claimed but not done: ") &&
			  !strstr(st, "claimed but not done: none"),
		  "%s", st);
	free(st);
	st = t_read_in(dir, "status2");
	for (int k = 0; k < 3; k++) {
		char want[32];
		snprintf(want, sizeof want, "rank %d: ", k);
		const char *l = strstr(st, want);
		cr_expect(l && strstr(l, "finished; journal "), "%s", st);
	}
	cr_expect(strstr(st, "claimed but not done: none"), "%s", st);
	free(st);
	/* Killed as a whole at 3 ranks, resumed with 2: ranks 0 and 1 go on from their
	 * claims, and old rank 2's share, which no rank of the new run is, is finished by
	 * one of them after the lease (as rank 2 of 3, from its journal and output). */
	t_sh(dir, "rm -rf claims out-*.jsonl j-* killed\n"
		  "p=; for k in 0 1 2; do \"$GPUD\" run slow.ini --rank $k/3 --ui off 2>>err & "
		  "p=\"$p $!\"; done\n"
		  "w '[ -s out-0.jsonl ] && [ -s out-1.jsonl ] && [ -s out-2.jsonl ]'; sleep 0.3\n"
		  "kill -9 $p && echo 1 > killed; wait\n"
		  "for k in 0 1; do \"$GPUD\" run slow.ini --rank $k/2 --ui off --resume "
		  "--stats-json s-{rank}.json 2>>err2 & done; wait\n");
	cr_expect_eq(t_read_long(dir, "killed"), 1, "the ranks ended before they were killed");
	union_dynamic(dir, 3, 12000);
	char *err = t_read_in(dir, "err2");
	cr_expect(strstr(err, "gpud: rank 2 of 3: no sign of life"), "%s", err);
	free(err);
	/* gpud merge takes the ranks of both runs (2, and rank 2 of 3 as finished by the
	 * others): the figures add up to the job. */
	cr_expect_eq(t_gpud(dir, "merge %s/s-0.json %s/s-1.json %s/s-2.json", dir, dir, dir), 0);
	char *m = t_read_in(dir, "out");
	cr_expect(strstr(m, "\"total\": 12000,") && strstr(m, "\"missing_ranks\": []"), "%s", m);
	free(m);
	/* Killed at 2 ranks, resumed with 3: the third claims what is left. */
	t_sh(dir, "rm -rf claims out-*.jsonl j-* killed err2 s-*.json\n"
		  "p=; for k in 0 1; do \"$GPUD\" run slow.ini --rank $k/2 --ui off 2>>err & "
		  "p=\"$p $!\"; done\n"
		  "w '[ -s out-0.jsonl ] && [ -s out-1.jsonl ]'; sleep 0.3\n"
		  "kill -9 $p && echo 1 > killed; wait\n"
		  "for k in 0 1 2; do \"$GPUD\" run slow.ini --rank $k/3 --ui off --resume "
		  "2>>err2 & done; wait\n");
	cr_expect_eq(t_read_long(dir, "killed"), 1, "the ranks ended before they were killed");
	union_dynamic(dir, 3, 12000);
}

/* The ids below `total` found more than once over out-0.jsonl .. out-(ranks-1).jsonl. */
static unsigned long twice_in(const char *dir, unsigned ranks, unsigned long total)
{
	unsigned char *seen = calloc(total, 1);
	unsigned long twice = 0;
	for (unsigned k = 0; k < ranks; k++) {
		char name[32];
		snprintf(name, sizeof name, "out-%u.jsonl", k);
		char *out = t_read_in(dir, name);
		for (const char *p = out; p && *p;) {
			/* Not sscanf: it takes the length of the rest of the file each time. */
			static const char key[] = "{\"task_id\": ";
			if (!strncmp(p, key, sizeof key - 1)) {
				unsigned long id = strtoul(p + sizeof key - 1, NULL, 10);
				if (id < total && seen[id]++ == 1)
					twice++;
			}
			p = strchr(p, '\n');
			p = p ? p + 1 : NULL;
		}
		free(out);
	}
	free(seen);
	return twice;
}

/* Every rank resumed one after the other: each refused (exit 2) with `want` (and
 * `or_want`, when not NULL, as another way to say it) on its standard error, its
 * output as it was. */
static void every_rank_refused(const char *dir, const char *ini, const char *want,
			       const char *or_want)
{
	char script[600];
	snprintf(script, sizeof script,
		 "for k in 0 1 2; do cp out-$k.jsonl was-$k; \"$GPUD\" run %s --rank $k/3 "
		 "--ui off --resume 2>e-$k; echo $? > rc-$k; cmp -s out-$k.jsonl was-$k; "
		 "echo $? > same-$k; done",
		 ini);
	t_sh(dir, script);
	for (int k = 0; k < 3; k++) {
		char name[16];
		snprintf(name, sizeof name, "e-%d", k);
		char *err = t_read_in(dir, name);
		snprintf(name, sizeof name, "rc-%d", k);
		cr_expect_eq(t_read_long(dir, name), 2, "rank %d: %s", k, err);
		cr_expect(err && (strstr(err, want) || (or_want && strstr(err, or_want))) &&
				  (strstr(err, "restore the claims folder") ||
				   strstr(err, "remove ")),
			  "rank %d: %s", k, err);
		free(err);
		snprintf(name, sizeof name, "same-%d", k);
		cr_expect_eq(t_read_long(dir, name), 0, "rank %d's output changed", k);
	}
}

Test(ranks, dynamic_shares_resume_without_its_claims_is_refused, .timeout = 240)
{
	const char *dir = t_tmpdir();
	dynamic_jobs(dir, 60000, "plugin = range\nstop = ");
	/* Three ranks stopped part way (SIGTERM: each drains, syncs its journal, exits 4),
	 * their claims folder kept aside. */
	t_sh(dir, "p=; for k in 0 1 2; do \"$GPUD\" run slow.ini --rank $k/3 --ui off 2>>err & "
		  "p=\"$p $!\"; done\n"
		  "w '[ -s out-0.jsonl ] && [ -s out-1.jsonl ] && [ -s out-2.jsonl ]'\n"
		  "kill -TERM $p; n=0; for q in $p; do wait $q; [ $? -eq 4 ] && n=$((n+1)); done\n"
		  "echo $n > stopped; cp -a claims kept\n");
	cr_assert_eq(t_read_long(dir, "stopped"), 3, "a rank was not stopped part way");
	/* The folder lost: every rank's journal holds done tasks no claim covers. */
	t_sh(dir, "rm -rf claims");
	every_rank_refused(dir, "slow.ini", "tasks done (e.g. task ", NULL);
	char *err = t_read_in(dir, "e-1");
	cr_expect(err && strstr(err, "rank 1's journal ") && strstr(err, "/j-1.journal holds ") &&
			  strstr(err, "no claim of rank 1 in the claims folder ") &&
			  strstr(err, "--force"),
		  "%s", err);
	free(err);
	cr_expect_eq(twice_in(dir, 3, 60000), 0);
	/* A rank with no journal yet (a resume with more ranks), started after them: the
	 * folder is marked lost, so it does not claim what the lost claims held. */
	cr_expect_eq(t_gpud(dir, "run %s/slow.ini --rank 3/4 --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "/claims is marked lost (") &&
			  strstr(err, "restore the claims folder"),
		  "%s", err);
	free(err);
	/* The folder lost with rank 2's journal (kept elsewhere): its output, read back,
	 * holds results no claim of it covers: refused too, the output as it was. */
	t_sh(dir, "rm -rf claims; mv j-2.journal j-2.elsewhere; cp out-2.jsonl was-2");
	cr_expect_eq(t_gpud(dir, "run %s/slow.ini --rank 2/3 --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "its output holds the results of ") &&
			  strstr(err, "that no claim of rank 2 in the claims folder ") &&
			  strstr(err, "restore the claims folder"),
		  "%s", err);
	free(err);
	cr_expect_eq(t_sh(dir, "cmp -s out-2.jsonl was-2 && mv j-2.elsewhere j-2.journal"), 0,
		     "rank 2's output changed");
	/* One claim of rank 1 removed: a gap after a claim made without MPI, or (its
	 * last claim) rank 1's journal past its claims, which every rank reads. */
	t_sh(dir, "rm -rf claims; cp -a kept claims\n"
		  "for f in claims/c*; do case \"$(readlink $f)\" in 'r1 '*) rm $f; break;; "
		  "esac; done");
	every_rank_refused(dir, "slow.ini", "a claim file was removed", "rank 1's journal ");
	/* A claim cut short: not a claim gpud made. */
	t_sh(dir, "rm -rf claims; cp -a kept claims\n"
		  "for f in claims/c*; do case \"$(readlink $f)\" in 'r2 '*) ln -sfn 'r2 n' $f; "
		  "break;; esac; done");
	every_rank_refused(dir, "slow.ini", "not a claim gpud made", NULL);
	/* Another job's folder (its generator's keys differ): refused, naming it. */
	t_sh(dir, "rm -rf claims; cp -a kept claims; cp out-0.jsonl was-0\n"
		  "sed 's/stop = 60000/stop = 50000/' slow.ini > other.ini");
	cr_expect_eq(t_gpud(dir, "run %s/other.ini --rank 0/3 --ui off --resume", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "is another job's") && strstr(err, "[job] claims"), "%s", err);
	free(err);
	cr_expect_eq(t_sh(dir, "cmp -s out-0.jsonl was-0"), 0, "rank 0's output changed");
	cr_expect_eq(twice_in(dir, 3, 60000), 0);
	/* The way out: the folder as it was, every rank resumed: every id once. */
	t_sh(dir, "rm -rf claims; cp -a kept claims\n"
		  "for k in 0 1 2; do \"$GPUD\" run slow.ini --rank $k/3 --ui off --resume "
		  "2>>err3 & done; wait");
	union_dynamic(dir, 3, 60000);
}

#define NO_LEAKS "export ASAN_OPTIONS=\"${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0\"; "

Test(ranks, dynamic_shares_under_mpirun_count_in_mpi_and_resume_with_fewer, .timeout = 240)
{
	const char *dir = t_tmpdir();
	if (t_sh(dir, "command -v mpirun >/dev/null && mpirun --allow-run-as-root --oversubscribe "
		      "-np 2 true >/dev/null 2>&1") != 0)
		cr_skip_test("Open MPI's mpirun is not installed or cannot start here "
			     "(Debian: openmpi-bin)");
	if (t_sh(dir, "for f in /usr/lib/*/libmpi.so.40 /usr/lib/libmpi.so.40 "
		      "/usr/lib64/libmpi.so.40; do [ -e \"$f\" ] && exit 0; done; exit 1") != 0)
		cr_skip_test("no libmpi.so.40 (Open MPI 3 or 4): the MPI counter cannot be tried");
	t_jobf(dir,
	       "[job]\ngpus = 0,1\nshares = dynamic\nlease = 1\nclaims = claims\n"
	       "journal = j-{rank}.journal\n[worker]\nplugin = echo\n[generator]\n"
	       "plugin = range\nstop = 100000\n[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	/* Four ranks: every claim starts where the counter in rank 0's window said (the
	 * claims say "mpi"; no rank ever lost a name to another). */
	/* Under AddressSanitizer, leaks are not looked for in these ranks: Open MPI never
	 * frees what MPI_Init allocates, and MPI_Finalize unloads the components that did,
	 * so their frames cannot be suppressed by name. */
	t_sh(dir, NO_LEAKS
	     "mpirun --allow-run-as-root --oversubscribe -np 4 sh -c 'exec \"$GPUD\" run "
	     "job.ini --ui off --stats-json s-{rank}.json 2>>err-$OMPI_COMM_WORLD_RANK'; "
	     "echo $? > rc\n"
	     "ls -l claims | grep -c ' mpi$' > n_mpi; ls claims | grep -c '^c' > n_claims\n"
	     "cat s-*.json | grep -c '\"claims_lost\": 0,' > n_lost0\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	union_dynamic(dir, 4, 100000);
	long n_mpi = t_read_long(dir, "n_mpi");
	cr_expect(n_mpi > 0 && n_mpi == t_read_long(dir, "n_claims"), "%ld claims by the counter",
		  n_mpi);
	cr_expect_eq(t_read_long(dir, "n_lost0"), 4);
	/* Killed as a whole (one rank's SIGKILL ends mpirun's job), then resumed under
	 * mpirun with 2 ranks: ranks 2 and 3 of the first run are finished by them. */
	t_jobf(dir, "[job]\ngpus = 0,1\nshares = dynamic\nlease = 1\nclaims = claims\n"
		    "journal = j-{rank}.journal\n[worker]\nplugin = faulty\nsleep_us = 500\n"
		    "[generator]\nplugin = range\nstop = 20000\n"
		    "[sink]\nplugin = jsonl\npath = out-{rank}.jsonl\n");
	t_sh(dir, "rm -rf claims out-* j-* s-* err-*\n" NO_LEAKS
		  "mpirun --allow-run-as-root --oversubscribe -np 4 sh -c 'echo $$ > "
		  "pid-$OMPI_COMM_WORLD_RANK; exec \"$GPUD\" run job.ini --ui off "
		  "2>>err-$OMPI_COMM_WORLD_RANK' >/dev/null 2>&1 & m=$!\n"
		  "w '[ -s out-0.jsonl ] && [ -s out-3.jsonl ]'; sleep 0.3\n"
		  "kill -9 $(cat pid-2) && echo 1 > killed; wait $m\n" NO_LEAKS
		  "mpirun --allow-run-as-root --oversubscribe -np 2 sh -c 'exec \"$GPUD\" run "
		  "job.ini --ui off --resume 2>>err2-$OMPI_COMM_WORLD_RANK'; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "killed"), 1, "the run ended before a rank was killed");
	cr_expect_eq(t_read_long(dir, "rc"), 0);
	union_dynamic(dir, 4, 20000);
}
