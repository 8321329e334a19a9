/* SPDX-License-Identifier: MIT */
/* The array sinks (npy, hdf5) and `gpud merge-arrays`: rows read back with NumPy and
 * h5py (Debian's /usr/bin/python3), a result of the wrong size failing its task alone,
 * kill -9 and --resume giving every row once, ranks merged equal to one run, merges
 * refused for a gap and a duplicate. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

#define PY "/usr/bin/python3"

/* NumPy (and h5py with `h5`) in Debian's Python, or the test is skipped in one line. */
static void need_python(const char *dir, bool h5)
{
	char script[256];
	snprintf(script, sizeof script, "%s -c 'import numpy%s' 2>/dev/null; echo $? > have_py", PY,
		 h5 ? ", h5py" : "");
	t_sh(dir, script);
	if (t_read_long(dir, "have_py") != 0)
		cr_skip_test("%s has no numpy%s: the arrays cannot be read back", PY,
			     h5 ? " or h5py" : "");
}

static bool have_hdf5(void)
{
	const char *v = getenv("HAVE_HDF5");
	return v && strcmp(v, "1") == 0;
}

/* Runs a Python check (its text) in dir; its standard output and error in dir/py.
 * Returns its exit status: the checks assert. */
static int py(const char *dir, const char *code)
{
	char *path = t_write(dir, "check.py", code);
	char script[512];
	snprintf(script, sizeof script, "%s check.py > py 2>&1; echo $? > py_rc", PY);
	t_sh(dir, script);
	free(path);
	return (int)t_read_long(dir, "py_rc");
}

#define PY_ROWS                                                                                    \
	"import numpy as np, struct, sys\n"                                                        \
	"def want(n):\n"                                                                           \
	"    x = np.arange(n, dtype=np.float32)[:, None]\n"                                        \
	"    return x + np.array([0, 0.5, 1], dtype=np.float32)\n"

static const char job_npy[] = "[job]\ngpus = 0,1\n[worker]\nplugin = rows\n%s\n"
			      "[generator]\nplugin = range\nstop = %d\n"
			      "[sink]\nplugin = npy\npath = %s\ndtype = float32\nshape = 3\n%s";

Test(arrays, npy_rows_at_their_ids_with_the_right_shape_dtype_and_header, .timeout = 60)
{
	const char *dir = t_tmpdir();
	need_python(dir, false);
	t_jobf(dir, job_npy, "", 1000, "out.npy", "");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0, "%s", t_read_in(dir, "err"));
	int rc = py(dir,
		    PY_ROWS "a = np.load('out.npy')\n"
			    "assert a.shape == (1000, 3) and a.dtype == np.float32, (a.shape, "
			    "a.dtype)\n"
			    "assert (a == want(1000)).all()\n"
			    "d = np.load('out.npy.done')\n"
			    "assert d.shape == (1000,) and d.dtype == np.uint8 and (d == 1).all()\n"
			    "h = open('out.npy', 'rb').read(10)\n"
			    "n = struct.unpack('<H', h[8:10])[0]\n"
			    "assert h[:8] == b'\\x93NUMPY\\x01\\x00' and (10 + n) % 64 == 0, n\n"
			    "print('ok')\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
}

Test(arrays, npy_a_result_of_the_wrong_size_fails_its_task_alone, .timeout = 60)
{
	const char *dir = t_tmpdir();
	need_python(dir, false);
	t_jobf(dir, job_npy, "short_id = 7", 500, "out.npy", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "task 7 failed: sink: npy: the result is 8 bytes, a row of "), "%s",
		  err);
	cr_expect(strstr(err, "is 12 bytes (shape (3,) of <f4)"), "%s", err);
	cr_expect(strstr(err, "499 ok, 1 failed"), "%s", err);
	int rc = py(dir, PY_ROWS "a = np.load('out.npy'); d = np.load('out.npy.done')\n"
				 "w = want(500); w[7] = 0\n"
				 "assert (a == w).all()\n"
				 "assert d[7] == 2 and (np.delete(d, 7) == 1).all(), d[:10]\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
	/* The journal has it as an error: --resume runs nothing (and says an earlier attempt
	 * failed); --retry-failed runs task 7 alone, which now fits. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 1);
	cr_expect(strstr(t_read_in(dir, "err"), "500 tasks were already done") ||
			  strstr(t_read_in(dir, "err"), "already finished"),
		  "%s", t_read_in(dir, "err"));
	cr_expect_eq(t_gpud(dir,
			    "run '%s/job.ini' --ui off --resume --retry-failed --force "
			    "--set worker.short_id=-1",
			    dir),
		     0, "%s", t_read_in(dir, "err"));
	cr_expect(strstr(t_read_in(dir, "err"), "1 tasks: 1 ok"), "%s", t_read_in(dir, "err"));
	rc = py(dir, PY_ROWS "a = np.load('out.npy'); d = np.load('out.npy.done')\n"
			     "assert (a == want(500)).all() and (d == 1).all()\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
	free(err);
}

/* The count: the generator's (range and lines of a file say it), or `tasks`; a stream
 * of unknown length without `tasks` is refused before anything runs, and `tasks` that
 * disagrees with the generator's count too. */
Test(arrays, npy_rows_from_the_generator_or_tasks, .timeout = 60)
{
	const char *dir = t_tmpdir();
	need_python(dir, false);
	t_jobf(dir,
	       "[job]\ngpus = 0\n[worker]\nplugin = rows\n[generator]\nplugin = lines\npath = -\n"
	       "[sink]\nplugin = npy\npath = out.npy\ndtype = <f4\nshape = (3)\n");
	t_sh(dir, "seq 0 99 | \"$GPUD\" run job.ini --ui off 2>err1; echo $? > rc1\n"
		  "seq 0 99 | \"$GPUD\" run job.ini --ui off --set sink.tasks=100 2>err2; "
		  "echo $? > rc2\n"
		  "seq 0 99 > in.txt\n"
		  "\"$GPUD\" run job.ini --ui off --set generator.path=in.txt --set sink.tasks=50 "
		  "2>err3; echo $? > rc3\n");
	cr_expect_eq(t_read_long(dir, "rc1"), 2);
	cr_expect(strstr(t_read_in(dir, "err1"), "the generator does not say how many tasks the "
						 "job has: set tasks = N in [sink]"),
		  "%s", t_read_in(dir, "err1"));
	cr_expect_eq(t_read_long(dir, "rc2"), 0, "%s", t_read_in(dir, "err2"));
	cr_expect_eq(t_read_long(dir, "rc3"), 2);
	cr_expect(strstr(t_read_in(dir, "err3"),
			 "tasks = 50, but the generator says the job has 100 tasks"),
		  "%s", t_read_in(dir, "err3"));
	cr_expect_eq(py(dir, PY_ROWS "a = np.load('out.npy')\nassert (a == want(100)).all()\n"), 0,
		     "%s", t_read_in(dir, "py"));
}

Test(arrays, npy_check_names_the_file_and_line_of_a_bad_key, .timeout = 30)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, job_npy, "", 10, "out.npy", "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --set sink.dtype=float33", dir), 2);
	cr_expect(strstr(t_read_in(dir, "err"),
			 "--set sink.dtype=float33: sink npy: npy: dtype = 'float33': not a "
			 "NumPy dtype"),
		  "%s", t_read_in(dir, "err"));
	t_jobf(dir, job_npy, "", 10, "out.npy", "");
	char *job = t_read_in(dir, "job.ini");
	char *bad = strstr(job, "shape = 3");
	cr_assert(bad);
	memcpy(bad, "shape = 0", 9);
	free(t_write(dir, "job.ini", job));
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 2);
	cr_expect(strstr(t_read_in(dir, "err"), "job.ini:13: sink npy: npy: shape = '0'"), "%s",
		  t_read_in(dir, "err"));
	char *made = NULL;
	cr_assert(asprintf(&made, "%s/out.npy", dir) > 0);
	cr_expect(access(made, F_OK) != 0, "check creates nothing");
	free(made);
	free(job);
}

/* kill -9 of the host at about half way (by the done record's count), then --resume:
 * the same file, every row right and marked once, the done half not run again. */
Test(arrays, npy_kill_9_half_way_then_resume_gives_every_row_once, .timeout = 180)
{
	const char *dir = t_tmpdir();
	need_python(dir, false);
	t_jobf(dir, job_npy, "sleep_us = 200", 20000, "out.npy", "");
	t_sh(dir, WAIT_FOR "\"$GPUD\" run job.ini --ui off 2>err1 & p=$!\n"
			   "w '[ -f out.npy.done ] && [ $(tr -cd \"\\001\" < out.npy.done | wc -c) "
			   "-ge 10000 ]'\n"
			   "kill -9 $p; wait $p 2>/dev/null\n"
			   /* less the 1 of the header's version */
			   "echo $(( $(tr -cd '\\001' < out.npy.done | wc -c) - 1 )) > half\n"
			   "ls -i out.npy | cut -d' ' -f1 > ino1\n"
			   "w '! pgrep -f \"gpud-worker --run [0-9]* $p$\" >/dev/null'\n"
			   "\"$GPUD\" run job.ini --ui off --resume 2>err2; echo $? > rc\n"
			   "ls -i out.npy | cut -d' ' -f1 > ino2\n");
	long half = t_read_long(dir, "half");
	cr_expect(half >= 10000 && half < 20000, "killed at %ld of 20000", half);
	cr_expect_eq(t_read_long(dir, "rc"), 0, "%s", t_read_in(dir, "err2"));
	cr_expect_eq(t_read_long(dir, "ino1"), t_read_long(dir, "ino2"), "the same file");
	char *err2 = t_read_in(dir, "err2");
	long skipped = 0;
	const char *s = strstr(err2, "resumed: ");
	cr_expect(s && sscanf(s, "resumed: %ld tasks were already done", &skipped) == 1, "%s",
		  err2);
	cr_expect(skipped >= half, "%ld skipped, %ld were done", skipped, half);
	int rc = py(dir, PY_ROWS "a = np.load('out.npy'); d = np.load('out.npy.done')\n"
				 "assert a.shape == (20000, 3)\n"
				 "bad = np.nonzero((a != want(20000)).any(axis=1))[0]\n"
				 "assert len(bad) == 0, bad[:10]\n"
				 "assert (d == 1).all(), np.bincount(d)\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
	free(err2);
}

/* A resumed run refuses an array of another shape, and one without its done record. */
Test(arrays, npy_resume_refuses_another_jobs_file, .timeout = 60)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, job_npy, "", 100, "out.npy", "");
	cr_assert_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	cr_expect_eq(
		t_gpud(dir, "run '%s/job.ini' --ui off --resume --force --set sink.shape=4", dir),
		2);
	cr_expect(strstr(t_read_in(dir, "err"),
			 "holds rows of (3,) <f4, the job writes rows of (4,) <f4"),
		  "%s", t_read_in(dir, "err"));
	t_sh(dir, "rm out.npy.done");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 2);
	cr_expect(strstr(t_read_in(dir, "err"), "but its done record"), "%s",
		  t_read_in(dir, "err"));
}

/* Two ranks, each its own full-size file, merged: equal to one run's; a merge with a
 * rank missing names the first id it lacks and the files, one with a rank twice the
 * id and both files; nothing is written by a refused merge. */
static void ranks_and_merge(const char *plugin, const char *ext, const char *reader)
{
	const char *dir = t_tmpdir();
	char sink[256];
	snprintf(sink, sizeof sink,
		 "[sink]\nplugin = %s\npath = out-{rank}.%s\ndtype = float32\n"
		 "shape = 3\n",
		 plugin, ext);
	/* Task 70 (rank 1's) fails: its row is zero everywhere, the rows after it are not. */
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n[worker]\nplugin = rows\nshort_id = 70\n"
	       "[generator]\nplugin = range\nstop = 1000\n%s",
	       sink);
	char script[2048];
	snprintf(script, sizeof script,
		 "\"$GPUD\" run job.ini --ui off --rank 0/2 2>e0; echo $? > rc\n"
		 "\"$GPUD\" run job.ini --ui off --rank 1/2 2>e1; echo $? >> rc\n"
		 "\"$GPUD\" run job.ini --ui off --set sink.path=one.%s 2>e2; echo $? >> rc\n"
		 "\"$GPUD\" merge-arrays all.%s out-0.%s out-1.%s 2>m0; echo $? >> rc\n"
		 "\"$GPUD\" merge-arrays gap.%s out-0.%s 2>m1; echo $? >> rc\n"
		 "cp out-0.%s dup.%s; cp out-0.%s.done dup.%s.done 2>/dev/null\n"
		 "\"$GPUD\" merge-arrays twice.%s out-0.%s out-1.%s dup.%s 2>m2; echo $? >> rc\n"
		 "ls gap.* twice.* 2>/dev/null | wc -l > left\n",
		 ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext);
	t_sh(dir, script);
	char *rc = t_read_in(dir, "rc");
	cr_expect_str_eq(rc, "0\n1\n1\n1\n2\n2\n", "%s\n%s\n%s", t_read_in(dir, "e0"),
			 t_read_in(dir, "m0"), t_read_in(dir, "m1"));
	char want[256];
	snprintf(want, sizeof want, "task 64 is in none of out-0.%s (488 tasks missing in all)",
		 ext);
	cr_expect(strstr(t_read_in(dir, "m1"), want), "%s", t_read_in(dir, "m1"));
	snprintf(want, sizeof want, "task 0 is in two shards: out-0.%s and dup.%s", ext, ext);
	cr_expect(strstr(t_read_in(dir, "m2"), want), "%s", t_read_in(dir, "m2"));
	cr_expect(strstr(t_read_in(dir, "m0"), "1000 rows from 2 shards (out-0."), "%s",
		  t_read_in(dir, "m0"));
	cr_expect(strstr(t_read_in(dir, "m0"), "; 1 tasks failed: their rows are zero"), "%s",
		  t_read_in(dir, "m0"));
	cr_expect_eq(t_read_long(dir, "left"), 0, "a refused merge writes nothing");
	char code[2048];
	snprintf(code, sizeof code,
		 PY_ROWS "%s\n"
			 "all, d = load('all.%s'); one, _ = load('one.%s')\n"
			 "r0, d0 = load('out-0.%s')\n"
			 "assert all.shape == (1000, 3) and all.dtype == np.float32\n"
			 "w = want(1000); w[70] = 0\n"
			 "assert (all == one).all() and (all == w).all()\n"
			 "assert d[70] == 2 and (np.delete(d, 70) == 1).all()\n"
			 "mine = (np.arange(1000) // 64) %% 2 == 0\n"
			 "assert (d0 == mine).all() and (r0[~mine] == 0).all()\n",
		 reader, ext, ext, ext);
	cr_expect_eq(py(dir, code), 0, "%s", t_read_in(dir, "py"));
	free(rc);
}

Test(arrays, npy_two_ranks_merged_equal_one_run_and_gaps_and_duplicates_refused, .timeout = 120)
{
	const char *dir = t_tmpdir();
	need_python(dir, false);
	ranks_and_merge("npy", "npy", "def load(p): return np.load(p), np.load(p + '.done')\n");
}

Test(arrays, hdf5_rows_at_their_ids, .timeout = 60)
{
	const char *dir = t_tmpdir();
	if (!have_hdf5())
		cr_skip_test("gpud was built without libhdf5: no hdf5 sink");
	need_python(dir, true);
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = rows\nshort_id = 5\n"
		    "[generator]\nplugin = range\nstop = 3000\n[sink]\nplugin = hdf5\n"
		    "path = out.h5\ndataset = emb\ndtype = float32\nshape = 3\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	cr_expect(strstr(t_read_in(dir, "err"), "task 5 failed: sink: hdf5: the result is 8 "
						"bytes, a row of "),
		  "%s", t_read_in(dir, "err"));
	int rc = py(dir,
		    PY_ROWS "import h5py\n"
			    "f = h5py.File('out.h5', 'r'); a = f['emb'][:]; d = f['emb_done'][:]\n"
			    "w = want(3000); w[5] = 0\n"
			    "assert a.shape == (3000, 3) and a.dtype == np.float32\n"
			    "assert (a == w).all()\n"
			    "assert d[5] == 2 and (np.delete(d, 5) == 1).all()\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
}

Test(arrays, hdf5_kill_9_half_way_then_resume_gives_every_row_once, .timeout = 180)
{
	const char *dir = t_tmpdir();
	if (!have_hdf5())
		cr_skip_test("gpud was built without libhdf5: no hdf5 sink");
	need_python(dir, true);
	t_jobf(dir, "[job]\ngpus = 0,1\n[worker]\nplugin = rows\nsleep_us = 200\n"
		    "[generator]\nplugin = range\nstop = 20000\n[sink]\nplugin = hdf5\n"
		    "path = out.h5\ndtype = float32\nshape = 3\n");
	/* Killed once the file's done record marks a row (what the file holds decides what
	 * a resume skips), not a fixed 1.5 s after the file was made: a slow machine had
	 * written none by then. */
	free(t_write(dir, "held.py",
		     "import h5py, sys\n"
		     "with h5py.File('out.h5', 'r') as f:\n"
		     "    sys.exit(0 if f['data_done'][:].any() else 1)\n"));
	t_sh(dir, WAIT_FOR "\"$GPUD\" run job.ini --ui off 2>err1 & p=$!\n"
			   "w 'HDF5_USE_FILE_LOCKING=FALSE " PY " held.py 2>/dev/null'\n"
			   "kill -9 $p; wait $p 2>/dev/null\n"
			   "w '! pgrep -f \"gpud-worker --run [0-9]* $p$\" >/dev/null'\n"
			   "\"$GPUD\" run job.ini --ui off --resume 2>err2; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 0, "%s", t_read_in(dir, "err2"));
	cr_expect(strstr(t_read_in(dir, "err2"), "tasks were already done"), "%s",
		  t_read_in(dir, "err2"));
	int rc = py(dir, PY_ROWS
		    "import h5py\n"
		    "f = h5py.File('out.h5', 'r'); a = f['data'][:]; d = f['data_done'][:]\n"
		    "assert (a == want(20000)).all()\n"
		    "assert (d == 1).all(), np.bincount(d)\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
}

Test(arrays, hdf5_two_ranks_merged_equal_one_run_and_gaps_and_duplicates_refused, .timeout = 120)
{
	const char *dir = t_tmpdir();
	if (!have_hdf5())
		cr_skip_test("gpud was built without libhdf5: no hdf5 sink");
	need_python(dir, true);
	ranks_and_merge("hdf5", "h5",
			"import h5py\n"
			"def load(p):\n"
			"    f = h5py.File(p, 'r'); return f['data'][:], f['data_done'][:]\n");
}

/* The output named as a shard (the third, or through a symlink or another path) is
 * refused with nothing written; shards of two jobs are refused naming both files; a
 * shard without a job id (an older gpud's) merges, with a note. */
static void merge_refusals(const char *plugin, const char *ext, const char *strip_id)
{
	const char *dir = t_tmpdir();
	t_jobf(dir,
	       "[job]\ngpus = 0\n[worker]\nplugin = rows\n[generator]\nplugin = range\n"
	       "stop = 300\n[sink]\nplugin = %s\npath = out-{rank}.%s\ndtype = float32\n"
	       "shape = 3\n",
	       plugin, ext);
	char script[4096];
	snprintf(script, sizeof script,
		 "for r in 0 1 2; do \"$GPUD\" run job.ini --ui off --rank $r/3 2>e$r; "
		 "echo $? >> rc; done\n"
		 "mkdir keep sub; cp out-2.%s* keep/; ln -s out-2.%s link.%s\n"
		 "\"$GPUD\" merge-arrays out-2.%s out-0.%s out-1.%s out-2.%s 2>m0; echo $? >> rc\n"
		 "\"$GPUD\" merge-arrays link.%s out-0.%s out-1.%s out-2.%s 2>m1; echo $? >> rc\n"
		 "\"$GPUD\" merge-arrays sub/../out-2.%s out-0.%s out-1.%s out-2.%s 2>m2; "
		 "echo $? >> rc\n"
		 "for f in keep/*; do cmp -s $f ${f#keep/} || echo changed $f; done > changed\n"
		 "ls *.tmp-* 2>/dev/null >> changed\n"
		 /* job B: another worker key, so another job */
		 "\"$GPUD\" run job.ini --ui off --rank 1/3 --set worker.sleep_us=0 "
		 "--set sink.path=b-{rank}.%s 2>eb; echo $? >> rc\n"
		 "\"$GPUD\" merge-arrays ab.%s out-0.%s b-1.%s out-2.%s 2>m3; echo $? >> rc\n"
		 "ls ab.* 2>/dev/null >> changed\n"
		 "%s\n"
		 "\"$GPUD\" merge-arrays all.%s out-0.%s out-1.%s out-2.%s 2>m4; echo $? >> rc\n",
		 ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext, ext,
		 ext, ext, ext, ext, strip_id, ext, ext, ext, ext);
	t_sh(dir, script);
	cr_expect_str_eq(t_read_in(dir, "rc"), "0\n0\n0\n2\n2\n2\n0\n2\n0\n", "%s\n%s\n%s\n%s",
			 t_read_in(dir, "m0"), t_read_in(dir, "m1"), t_read_in(dir, "m3"),
			 t_read_in(dir, "m4"));
	char want[256];
	const char *m[] = {"m0", "m1", "m2"};
	const char *out[] = {"out-2", "link", "sub/../out-2"};
	for (int i = 0; i < 3; i++) {
		snprintf(want, sizeof want, "%s.%s is the output and the shard out-2.%s", out[i],
			 ext, ext);
		cr_expect(strstr(t_read_in(dir, m[i]), want), "%s", t_read_in(dir, m[i]));
	}
	cr_expect_str_eq(t_read_in(dir, "changed"), "", "a refused merge writes nothing");
	snprintf(want, sizeof want, "out-0.%s and b-1.%s are shards of different jobs (job_id ",
		 ext, ext);
	cr_expect(strstr(t_read_in(dir, "m3"), want), "%s", t_read_in(dir, "m3"));
	snprintf(want, sizeof want, "out-1.%s carries no job id", ext);
	cr_expect(strstr(t_read_in(dir, "m4"), want), "%s", t_read_in(dir, "m4"));
	cr_expect(strstr(t_read_in(dir, "m4"), "300 rows from 3 shards"), "%s",
		  t_read_in(dir, "m4"));
}

Test(arrays, npy_merge_refuses_its_output_as_a_shard_and_shards_of_two_jobs, .timeout = 120)
{
	/* An older gpud's done record: the rows' bytes and nothing after them. */
	merge_refusals("npy", "npy",
		       "python3 -c \"import sys; p = 'out-1.npy.done'; b = open(p, 'rb').read(); "
		       "n = 10 + b[8] + 256 * b[9] + 300; open(p, 'wb').write(b[:n])\"");
}

/* The output named as a shard's done record (out-0.npy.done, which the merge reads):
 * refused, the record unchanged (it was written over by the merged array). */
Test(arrays, npy_merge_refuses_a_shards_done_record_as_its_output, .timeout = 120)
{
	const char *dir = t_tmpdir();
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = rows\n[generator]\nplugin = range\n"
		    "stop = 40\n[sink]\nplugin = npy\npath = out-{rank}.npy\ndtype = float32\n"
		    "shape = 3\n");
	t_sh(dir, "for r in 0 1; do \"$GPUD\" run job.ini --ui off --rank $r/2 2>e$r; "
		  "echo $? >> rc; done\n"
		  "cp out-0.npy.done keep\n"
		  "\"$GPUD\" merge-arrays out-0.npy.done out-0.npy out-1.npy 2>m; echo $? >> rc\n"
		  "cmp -s keep out-0.npy.done || echo changed > changed\n"
		  "\"$GPUD\" merge-arrays all.npy out-0.npy out-1.npy 2>m2; echo $? >> rc\n");
	cr_expect_str_eq(t_read_in(dir, "rc"), "0\n0\n2\n0\n", "%s\n%s", t_read_in(dir, "m"),
			 t_read_in(dir, "m2"));
	cr_expect(strstr(t_read_in(dir, "m"), "out-0.npy.done is the output and the done record "
					      "of the shard out-0.npy"),
		  "%s", t_read_in(dir, "m"));
	cr_expect_null(t_read_in(dir, "changed"), "the done record was written over");
}

Test(arrays, hdf5_merge_refuses_its_output_as_a_shard_and_shards_of_two_jobs, .timeout = 120)
{
	if (!have_hdf5())
		cr_skip_test("gpud was built without libhdf5: no hdf5 sink");
	const char *dir = t_tmpdir();
	need_python(dir, true);
	merge_refusals("hdf5", "h5",
		       PY " -c \"import h5py; f = h5py.File('out-1.h5', 'r+'); "
			  "del f['data_done'].attrs['gpud_job_id']\"");
}

/* An npy input cut short while the generator reads it: the tasks of the rows it lost
 * fail naming the file (no SIGBUS: the rows are read, not mapped), every other task
 * ends ok, every task has one outcome. */
Test(arrays, npy_input_cut_short_while_read_fails_the_lost_rows_alone, .timeout = 120)
{
	const char *dir = t_tmpdir();
	need_python(dir, false);
	t_jobf(dir, "[job]\ngpus = 0\nqueue_size = 64\njournal = off\n[worker]\nplugin = means\n"
		    "sleep_us = 300\n[generator]\nplugin = npy\npath = in.npy\n"
		    "[sink]\nplugin = npy\npath = out.npy\ndtype = float32\nshape = 3\n");
	t_sh(dir,
	     WAIT_FOR PY " -c \"import numpy as np; a = (np.arange(6000 * 3072) % 251)"
			 ".astype(np.uint8).reshape(6000, 3072); np.save('in.npy', a); "
			 "print(len(open('in.npy', 'rb').read()) - a.nbytes)\" > off\n"
			 "\"$GPUD\" run job.ini --ui plain 2>err & p=$!\n"
			 "w '[ -f out.npy.done ] && [ $(tr -cd \"\\001\" < out.npy.done | wc -c) "
			 "-ge 101 ]'\n"
			 "truncate -s $(( $(cat off) + 3000 * 3072 + 100 )) in.npy\n"
			 "wait $p; echo $? > rc\n");
	cr_expect_eq(t_read_long(dir, "rc"), 1, "%s", t_read_in(dir, "err"));
	cr_expect(strstr(t_read_in(dir, "err"), "in.npy was cut short while read: "), "%s",
		  t_read_in(dir, "err"));
	int rc = py(dir,
		    "import numpy as np, re\n"
		    "d = np.load('out.npy.done'); a = np.load('out.npy')\n"
		    "assert (d[:3000] == 1).all(), np.bincount(d[:3000])\n"
		    "assert set(np.unique(d[3000:])) <= {1, 2} and (d == 2).sum() > 0, "
		    "np.bincount(d)\n"
		    "src = (np.arange(6000 * 3072) % 251).astype(np.uint8).reshape(6000, 1024, 3)\n"
		    "ok = d == 1\n"
		    "assert np.allclose(a[ok], src[ok].mean(axis=1), atol=1e-3)\n"
		    "err = open('err').read()\n"
		    "m = re.search(r'(\\d+) ok, (\\d+) failed', err)\n"
		    "assert m and int(m[1]) == ok.sum() and int(m[2]) == (d == 2).sum(), err\n");
	cr_expect_eq(rc, 0, "%s", t_read_in(dir, "py"));
}

/* The hdf5 sink on a disk that fills part way (a 10 MiB tmpfs, mounted in a mount
 * namespace of its own): the run stops naming the system's error, and the results it
 * says it took but are not in the file, with those the host says were not written,
 * are every ok result the file does not mark done. Skipped in one line where no tmpfs
 * can be mounted. */
Test(arrays, hdf5_full_disk_names_the_error_and_the_results_lost, .timeout = 120)
{
	if (!have_hdf5())
		cr_skip_test("gpud was built without libhdf5: no hdf5 sink");
	const char *dir = t_tmpdir();
	need_python(dir, true);
	t_jobf(dir, "[job]\ngpus = 0\njournal = off\n[worker]\nplugin = rows\nfloats = 1024\n"
		    "[generator]\nplugin = range\nstop = 20000\n[sink]\nplugin = hdf5\n"
		    "path = mnt/out.h5\ndtype = float32\nshape = 1024\n");
	t_sh(dir,
	     "mkdir mnt; unshare -m sh -c 'mount -t tmpfs -o size=10m tmpfs mnt 2>/dev/null "
	     "|| exit 0; touch mounted; \"$GPUD\" run job.ini --ui off 2>err; echo $? > rc; " PY
	     " -c \"import h5py; f = h5py.File(\\\"mnt/out.h5\\\", \\\"r\\\"); "
	     "print(int((f[\\\"data_done\\\"][:] == 1).sum()))\" > marked 2>&1' 2>/dev/null\n");
	char *mounted = NULL;
	cr_assert(asprintf(&mounted, "%s/mounted", dir) > 0);
	if (access(mounted, F_OK) != 0)
		cr_skip_test("cannot mount a 10 MiB tmpfs in a mount namespace (unshare -m needs "
			     "root or user namespaces): no full disk to write on");
	free(mounted);
	char *err = t_read_in(dir, "err");
	cr_expect_eq(t_read_long(dir, "rc"), 3, "%s", err);
	cr_expect(strstr(err, "of data in "), "%s", err);
	cr_expect(strstr(err, "mnt/out.h5: No space left on device; "), "%s", err);
	long ok = -1, lost = -1, marked = t_read_long(dir, "marked");
	const char *s = strstr(err, " tasks: ");
	cr_expect(s && sscanf(s, " tasks: %ld ok", &ok) == 1, "%s", err);
	s = strstr(err, "No space left on device; ");
	cr_expect(s && sscanf(s, "No space left on device; %ld results taken before", &lost) == 1,
		  "%s", err);
	/* Every result taken as ok is in the file, or among those the sink says it had
	 * taken and lost, or among those the host says the failed sink never wrote. */
	long unwritten = 0;
	s = strstr(err, " results could not be written");
	while (s && s > err && s[-1] >= '0' && s[-1] <= '9')
		s--;
	cr_expect(s && sscanf(s, "%ld results could not be written", &unwritten) == 1, "%s", err);
	cr_expect(marked > 0 && lost > 0, "%ld rows marked done, %ld lost: %s", marked, lost, err);
	cr_expect_eq(ok, marked + lost + unwritten, "%ld ok: %ld marked done, %ld lost: %s", ok,
		     marked, lost, err);
	free(err);
}
