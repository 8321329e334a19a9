/* SPDX-License-Identifier: MIT */
/* The python worker plugin: a Python worker class on embedded CPython. Every test
 * skips with one line where the plugin was not built (no python3-embed). */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "helpers.h"

static void need_python(void)
{
	if (strcmp(t_env("HAVE_PYTHON"), "1") != 0)
		cr_skip_test(
			"the python worker plugin was not built (meson found no python3-embed; "
			"Debian: libpython3.11-dev)");
}

/* Writes w.py and a job running its class W over range 0..n-1 with the jsonl sink
 * (out.jsonl); `job_extra` goes in [job], `worker_extra` in [worker]. */
static void py_job(const char *dir, const char *script, int n, const char *job_extra,
		   const char *worker_extra)
{
	free(t_write(dir, "w.py", script));
	t_jobf(dir,
	       "[job]\ngpus = 0,1\n%s\n[worker]\nplugin = python\nscript = w.py\nclass = W\n%s\n"
	       "[generator]\nplugin = range\nstop = %d\n[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       job_extra, worker_extra, n);
}

/* The jsonl line of task `id` (malloc'd), or NULL. */
static char *line_of(const char *out, int id)
{
	char want[48];
	snprintf(want, sizeof want, "{\"task_id\": %d, ", id);
	const char *p = strstr(out, want);
	if (!p)
		return NULL;
	const char *e = strchr(p, '\n');
	return strndup(p, e ? (size_t)(e - p) : strlen(p));
}

#define EXPECT_LINE(out, id, needle)                                                               \
	do {                                                                                       \
		char *l_ = line_of(out, id);                                                       \
		cr_expect(l_ &&strstr(l_, needle), "task %d: want %s in %s", id, needle,           \
			  l_ ? l_ : "(none)");                                                     \
		free(l_);                                                                          \
	} while (0)

Test(python, results_of_every_type_and_exceptions_per_task, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	py_job(dir,
	       "import gpud\n"
	       "class W(gpud.BaseWorker):\n"
	       "    def setup(self, gpu_id, seed, **kw):\n"
	       "        self.tag = kw['tag']\n"
	       "        print('setup', gpu_id, kw)\n"
	       "    def process(self, data):\n"
	       "        n = int(bytes(data))\n"
	       "        if n == 1: return bytearray(b'ba')\n"
	       "        if n == 2: return 'str-' + self.tag\n"
	       "        if n == 3: return None\n"
	       "        if n == 4: return {'n': n, 'sq': n * n}\n"
	       "        if n == 5: raise ValueError('five is bad')\n"
	       "        if n == 6: gpud.reject('six is malformed')\n"
	       "        if n == 7: return b'x' * 5000\n"
	       "        if n == 8: raise SystemExit(3)\n"
	       "        if n == 9: return object()\n"
	       "        if n == 10: return data\n"
	       "        return memoryview(b'mv' + bytes(data))\n",
	       12, "max_result_bytes = 4K\nmax_retries = 1", "tag = T");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_assert(out, "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 12, "%s", out);
	EXPECT_LINE(out, 0, "\"status\": \"ok\"");
	EXPECT_LINE(out, 0, "\"result\": \"mv0\"");
	EXPECT_LINE(out, 1, "\"result\": \"ba\"");
	EXPECT_LINE(out, 2, "\"result\": \"str-T\"");
	EXPECT_LINE(out, 3, "\"result\": \"\"");
	EXPECT_LINE(out, 4, "\"result\": \"{\\\"n\\\": 4, \\\"sq\\\": 16}\"");
	EXPECT_LINE(out, 5, "\"error\": \"ValueError: five is bad (at ");
	EXPECT_LINE(out, 5, "w.py:12 in process)");
	EXPECT_LINE(out, 5, "\"attempt\": 1");
	EXPECT_LINE(out, 6, "TaskRejected: six is malformed");
	EXPECT_LINE(out, 6, "\"attempt\": 0"); /* rejected: not retried */
	EXPECT_LINE(out, 7, "result of 5000 bytes exceeds max_result_bytes (4096)");
	EXPECT_LINE(out, 8, "SystemExit: 3");
	EXPECT_LINE(out, 9, "python: W.process() (");
	EXPECT_LINE(
		out, 9,
		"w.py:6) returned a object that JSON cannot hold (result = auto): result is a builtins.object");
	EXPECT_LINE(out, 10, "\"result\": \"10\""); /* the input itself, returned */
	EXPECT_LINE(out, 11, "\"result\": \"mv11\"");
	/* print() goes where worker output goes: prefixed in plain mode. */
	cr_expect(strstr(err, "] setup 0 {'tag': 'T'}") || strstr(err, "] setup 1 {'tag': 'T'}"),
		  "%s", err);
	cr_expect(!strstr(err, "restarted"), "an exception must not cost the worker:\n%s", err);
	free(out);
	free(err);
}

/* Empty results (None, b"", "") are ok results with an empty result, beside results
 * that are not empty in the same call: from process() one task a call and eight, and
 * from a class's own process_batch(). */
Test(python, empty_results_are_ok_results_in_every_call, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	enum { N = 200 };
	free(t_write(dir, "w.py",
		     "import gpud\n"
		     "def result(n):\n"
		     "    return (None, b'', '', 'x%d' % n)[n % 4]\n"
		     "class W(gpud.BaseWorker):\n"
		     "    def process(self, data):\n"
		     "        return result(int(bytes(data)))\n"
		     "class B(gpud.BaseWorker):\n"
		     "    def process_batch(self, items):\n"
		     "        return [result(int(bytes(x))) for x in items]\n"));
	static const char *const cases[][2] = {
		{"W", "batch_size = 1"}, {"W", "batch_size = 8"}, {"B", "batch_size = 8"}};
	for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
		t_jobf(dir,
		       "[job]\ngpus = 0,1\n%s\n[worker]\nplugin = python\nscript = w.py\n"
		       "class = %s\n[generator]\nplugin = range\nstop = %d\n"
		       "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		       cases[c][1], cases[c][0], N);
		int rc = t_gpud(dir, "run '%s/job.ini' --ui plain --force", dir);
		char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
		cr_expect_eq(rc, 0, "%s %s: %s", cases[c][0], cases[c][1], err);
		cr_expect(!strstr(err, "corrupted") && !strstr(err, "restart"), "%s %s: %s",
			  cases[c][0], cases[c][1], err);
		cr_assert(out, "%s", err);
		cr_expect_eq(t_count_lines(out, "{\"task_id\": "), N, "%s", out);
		for (int i = 0; i < N; i++) {
			char want[32];
			if (i % 4 == 3)
				snprintf(want, sizeof want, "\"result\": \"x%d\"}", i);
			else
				snprintf(want, sizeof want, "\"result\": \"\"}");
			EXPECT_LINE(out, i, "\"status\": \"ok\"");
			EXPECT_LINE(out, i, want);
		}
		free(out);
		free(err);
	}
}

Test(python, input_modes, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	const char *script =
		"class W:\n"
		"    def setup(self, gpu_id, seed, **kw): pass\n"
		"    def process(self, data):\n"
		"        return type(data).__name__ + ':' + repr(data if not isinstance(data, memoryview) else bytes(data))\n";
	py_job(dir, script, 3, "", "input = bytes");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 2, "\"result\": \"bytes:b'2'\"");
	free(out);
	py_job(dir, script, 3, "", "input = str");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 2, "\"result\": \"str:'2'\"");
	free(out);
	py_job(dir, script, 3, "", "input = json");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 2, "\"result\": \"int:2\"");
	free(out);
	py_job(dir, script, 3, "", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 2, "\"result\": \"memoryview:b'2'\"");
	free(out);
	/* Not UTF-8 under input = str: that task fails, for good. */
	free(t_write(dir, "in.txt", "ok\n\xff\xfe\n"));
	t_jobf(dir, "[job]\ngpus = 0\nmax_retries = 2\n[worker]\nplugin = python\nscript = w.py\n"
		    "class = W\ninput = str\n[generator]\nplugin = lines\npath = in.txt\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 0, "\"result\": \"str:'ok'\"");
	EXPECT_LINE(out, 1, "input is not valid UTF-8 (input = str)");
	EXPECT_LINE(out, 1, "\"attempt\": 0");
	free(out);
}

Test(python, a_kept_view_is_caught_and_the_worker_replaced, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	py_job(dir,
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw): self.kept = []\n"
	       "    def process(self, data):\n"
	       "        if bytes(data) == b'4': self.kept.append(memoryview(data))\n"
	       "        if bytes(data) == b'6': self.kept.append(data[0:1])\n"
	       "        return bytes(data)\n",
	       10, "", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	EXPECT_LINE(out, 4, "kept a view of its input past the call");
	EXPECT_LINE(out, 6, "kept a view of its input past the call");
	EXPECT_LINE(out, 5, "\"result\": \"5\"");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 10);
	cr_expect(strstr(err, "restarted at its plugin's request"), "%s", err);
	free(out);
	free(err);
}

Test(python, setup_errors_fatal_batches_and_modules, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	/* An exception in setup is a setup failure with its type, message and place. */
	py_job(dir,
	       "class W:\n    def setup(self, gpu_id, seed, **kw):\n"
	       "        raise RuntimeError('no model on ' + str(gpu_id))\n"
	       "    def process(self, d): return d\n",
	       3, "", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 3);
	char *err = t_read_in(dir, "err");
	cr_expect(strstr(err, "setup failed: python: W.setup() failed: RuntimeError: no model on 0 "
			      "(at "),
		  "%s", err);
	free(err);
	/* gpud.fatal(): the task fails, a fresh worker takes over. */
	py_job(dir,
	       "import gpud\nclass W(gpud.BaseWorker):\n    def process(self, d):\n"
	       "        if bytes(d) == b'2': gpud.fatal('context lost')\n"
	       "        return bytes(d)\n",
	       6, "", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *out = t_read_in(dir, "out.jsonl");
	err = t_read_in(dir, "err");
	EXPECT_LINE(out, 2, "WorkerFatal: context lost");
	EXPECT_LINE(out, 3, "\"status\": \"ok\"");
	cr_expect(strstr(err, "restarted at its plugin's request: WorkerFatal: context lost"), "%s",
		  err);
	free(out);
	free(err);
	/* process_batch: a list in, a list out; an exception in a place fails that task. */
	py_job(dir,
	       "class W:\n    def setup(self, gpu_id, seed, **kw): pass\n"
	       "    def process_batch(self, items):\n"
	       "        return [ValueError('bad') if bytes(i) == b'3' else b'%d' % len(items)"
	       " for i in items]\n",
	       40, "batch_size = 8\nbatch_wait_ms = 50", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 3, "ValueError: bad");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 40);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": 3, "), 1);
	free(out);
	/* module = with python_path. */
	t_sh(dir, "mkdir -p src/pkg && touch src/pkg/__init__.py && "
		  "printf 'class W:\\n    def setup(self, g, s, **k): pass\\n"
		  "    def process(self, d): return b\"m\" + bytes(d)\\n' > src/pkg/mod.py");
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = python\nmodule = pkg.mod\nclass = W\n"
		    "python_path = ./src\n[generator]\nplugin = range\nstop = 2\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 1, "\"result\": \"m1\"");
	free(out);
}

/* task_timeout leaves a worker that exits (task 7) time to be seen dead before its task
 * could count as timed out: under ThreadSanitizer a process's exit alone can take over a
 * second on a loaded machine. */
Test(python, hangs_time_out_and_crashes_are_replaced, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	py_job(dir,
	       "import ctypes, os\n"
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw): pass\n"
	       "    def process(self, data):\n"
	       "        n = int(bytes(data))\n"
	       "        if n == 3:\n"
	       "            while True: pass\n"
	       "        if n == 5: ctypes.string_at(0)\n"
	       "        if n == 7: os._exit(4)\n"
	       "        return bytes(data)\n",
	       10, "task_timeout = 3\nmax_worker_restarts = 10", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 10, "%s", err);
	EXPECT_LINE(out, 3, "\"status\": \"timeout\"");
	EXPECT_LINE(out, 5, "killed by SIGSEGV while running task 5");
	EXPECT_LINE(out, 7, "exited with status 4 while running task 7");
	EXPECT_LINE(out, 9, "\"status\": \"ok\"");
	free(out);
	free(err);
}

/* A call past task_timeout is interrupted in place: gpud.TaskTimeout (a TimeoutError)
 * inside process(), even in a sleep; the task times out, and the worker, with what setup()
 * made, goes on: no restart. A call that does not return (every signal blocked, as C code
 * that never gives Python a turn) is killed timeout_grace later and its worker replaced,
 * as before. */
Test(python, a_timeout_interrupts_the_call_and_keeps_the_worker, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(
		dir, "w.py",
		"import os, signal, time\n"
		"class W:\n"
		"    def setup(self, gpu_id, seed, setups):\n"
		"        with open(setups, 'a') as f: f.write('%d\\n' % os.getpid())\n"
		"        self.caught = 0\n"
		"    def process(self, data):\n"
		"        n = int(bytes(data))\n"
		"        if n == 2:\n"
		"            try:\n"
		"                time.sleep(30)\n"
		"            except TimeoutError:\n"
		"                self.caught += 1\n"
		"                raise\n"
		"        if n == 5:\n"
		"            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())\n"
		"            time.sleep(30)\n"
		"        return b'%d caught %d' % (n, self.caught)\n"));
	t_jobf(dir,
	       "[job]\ngpus = 0\ntask_timeout = 1\ntimeout_grace = 1\n"
	       "[worker]\nplugin = python\nscript = w.py\nclass = W\nsetups = %s/setups\n"
	       "[generator]\nplugin = range\nstop = 8\n[sink]\nplugin = jsonl\npath = out.jsonl\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain --stats-json '%s/s.json'", dir, dir),
		     1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err"),
	     *setups = t_read_in(dir, "setups"), *st = t_read_in(dir, "s.json");
	cr_assert(out && setups && st, "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 8, "%s", err);
	EXPECT_LINE(out, 2, "\"status\": \"timeout\"");
	/* The same worker, its state kept: it caught the TaskTimeout of task 2. */
	EXPECT_LINE(out, 3, "\"result\": \"3 caught 1\"");
	EXPECT_LINE(out, 5, "\"status\": \"timeout\"");
	/* A fresh worker after the kill: setup() ran again. */
	EXPECT_LINE(out, 6, "\"result\": \"6 caught 0\"");
	cr_expect(strstr(err, "timed out after 1 s on worker 0 (GPU 0), interrupted in place"),
		  "%s", err);
	cr_expect_eq(t_count_lines(setups, ""), 2, "one setup, then one for the kill: %s", setups);
	cr_expect(strstr(st, "\"worker_restarts\": 1,"), "%s", st);
	free(out);
	free(err);
	free(setups);
	free(st);
}

/* A call past task_timeout times out whatever its code did with TaskTimeout: caught and
 * a result returned, caught and another exception raised, caught by a bare except; in a
 * class's own process_batch, the whole call. The result is not kept, the timeout is
 * counted and the worker goes on (no restart). */
Test(python, a_caught_timeout_is_still_a_timeout, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "w.py",
		     "import time\n"
		     "class W:\n"
		     "    def setup(self, gpu_id, seed):\n"
		     "        pass\n"
		     "    def process(self, data):\n"
		     "        n = int(bytes(data))\n"
		     "        if n == 3:\n"
		     "            try: time.sleep(30)\n"
		     "            except: pass\n"
		     "            return 'late'\n"
		     "        try:\n"
		     "            if n in (1, 2): time.sleep(30)\n"
		     "        except Exception:\n"
		     "            if n == 1: return 'fallback'\n"
		     "            raise ValueError('not a timeout')\n"
		     "        return 'r%d' % n\n"
		     "class B:\n"
		     "    def setup(self, gpu_id, seed):\n"
		     "        pass\n"
		     "    def process_batch(self, items):\n"
		     "        try:\n"
		     "            time.sleep(30)\n"
		     "        except TimeoutError:\n"
		     "            pass\n"
		     "        return ['fallback'] * len(items)\n"));
	t_jobf(dir,
	       "[job]\ngpus = 0\ntask_timeout = 0.5\ntimeout_grace = 20\n"
	       "[worker]\nplugin = python\nscript = w.py\nclass = W\n"
	       "[generator]\nplugin = range\nstop = 6\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain --stats-json '%s/s.json'", dir, dir),
		     1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err"),
	     *st = t_read_in(dir, "s.json");
	cr_assert(out && st, "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 6, "%s", err);
	for (int i = 0; i < 6; i++) {
		if (i >= 1 && i <= 3) {
			EXPECT_LINE(out, i, "\"status\": \"timeout\"");
		} else {
			char want[32];
			snprintf(want, sizeof want, "\"result\": \"r%d\"", i);
			EXPECT_LINE(out, i, want);
		}
	}
	cr_expect(!strstr(out, "fallback") && !strstr(out, "not a timeout") && !strstr(out, "late"),
		  "%s", out);
	cr_expect(strstr(st, "\"ok\": 3, \"failed\": 0, \"timed_out\": 3,"), "%s", st);
	cr_expect(strstr(st, "\"worker_restarts\": 0,"), "%s", st);
	free(out);
	free(err);
	free(st);

	/* A process_batch that catches it: every task of the call times out. */
	t_jobf(dir,
	       "[job]\ngpus = 0\ntask_timeout = 0.5\ntimeout_grace = 20\nbatch_size = 4\n"
	       "[worker]\nplugin = python\nscript = w.py\nclass = B\n"
	       "[generator]\nplugin = range\nstop = 4\n[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain --force --stats-json '%s/s.json'",
			    dir, dir),
		     1);
	out = t_read_in(dir, "out.jsonl");
	err = t_read_in(dir, "err");
	st = t_read_in(dir, "s.json");
	cr_assert(out && st, "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 4, "%s", err);
	cr_expect_eq(t_count_lines(out, ""), 4, "%s", out);
	cr_expect(!strstr(out, "fallback"), "%s", out);
	cr_expect(strstr(st, "\"ok\": 0, \"failed\": 0, \"timed_out\": 4,"), "%s", st);
	cr_expect(strstr(st, "\"worker_restarts\": 0,"), "%s", st);
	free(out);
	free(err);
	free(st);
}

Test(python, numpy_inside_a_worker_and_a_kept_numpy_view, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	if (t_sh(dir, "/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
		cr_skip_test(
			"NumPy is not installed for Debian's /usr/bin/python3 (python3-numpy)");
	/* Extension modules need libpython's symbols global: `import numpy` in a plugin
	 * loaded RTLD_LOCAL fails with an undefined symbol unless the plugin sees to it. */
	py_job(dir,
	       "import numpy as np\n"
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw): self.keep = None\n"
	       "    def process(self, data):\n"
	       "        a = np.frombuffer(data, dtype=np.uint8)\n"
	       "        if bytes(data) == b'77': self.keep = a\n"
	       "        if bytes(data) == b'78': return np.arange(6, dtype=np.uint8)[::2] + 65\n"
	       "        return str(int(a.astype(np.int64).sum()))\n",
	       100, "max_worker_restarts = 10\npython = /usr/bin/python3", "input = memoryview");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 100, "%s", err);
	/* Each result is the sum of the input's bytes ("12" -> 49 + 50). */
	for (int id = 0; id < 100; id++) {
		if (id == 77 || id == 78)
			continue;
		char digits[8], want[32];
		int sum = 0;
		snprintf(digits, sizeof digits, "%d", id);
		for (char *c = digits; *c; c++)
			sum += *c;
		snprintf(want, sizeof want, "\"result\": \"%d\"", sum);
		EXPECT_LINE(out, id, want);
	}
	EXPECT_LINE(out, 77, "kept a view of its input past the call");
	EXPECT_LINE(out, 78, "\"result\": \"ACE\""); /* a strided array, laid out */
	free(out);
	free(err);
}

/* Writes w.py: a class W whose results JSON cannot hold (a NumPy array in a dict, a set, a
 * tuple holding an array). */
static void write_unjsonable_worker(const char *dir)
{
	free(t_write(dir, "w.py",
		     "import numpy as np\n"
		     "class W:\n"
		     "    def setup(self, gpu_id, seed, **kw): pass\n"
		     "    def process(self, data):\n"
		     "        n = int(bytes(data))\n"
		     "        if n == 0: return {'emb': np.arange(3, dtype=np.float32), 'n': n}\n"
		     "        if n == 1: return {1, 2, 3}\n"
		     "        if n == 2: return None\n"
		     "        return (n, np.full((2, 2), n, dtype=np.int64))\n"));
}

Test(python, results_that_json_cannot_hold_are_pickled_or_named, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	if (t_sh(dir, "/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
		cr_skip_test(
			"NumPy is not installed for Debian's /usr/bin/python3 (python3-numpy)");
	write_unjsonable_worker(dir);
	/* result = pickle in both: the sink gets the objects process() returned. */
	free(t_write(
		dir, "cb.py",
		"import json, os\n"
		"f = open(os.path.join(os.path.dirname(__file__), 'log'), 'w')\n"
		"def on_success(task_id, result, worker_id):\n"
		"    if task_id == 0: r = [type(result['emb']).__name__,\n"
		"                         str(result['emb'].dtype), result['emb'].tolist(), result['n']]\n"
		"    elif task_id == 1: r = [type(result).__name__, sorted(result)]\n"
		"    elif task_id == 2: r = [repr(result)]\n"
		"    else: r = [type(result).__name__, result[0], result[1].tolist()]\n"
		"    f.write(json.dumps([task_id] + r) + '\\n')\n"
		"def on_exit():\n"
		"    f.close()\n"));
	t_jobf(dir, "[job]\ngpus = 0,1\npython = /usr/bin/python3\n"
		    "[worker]\nplugin = python\nscript = w.py\nclass = W\nresult = pickle\n"
		    "[generator]\nplugin = range\nstop = 5\n"
		    "[sink]\nplugin = python\nscript = cb.py\nresult = pickle\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *log = t_read_in(dir, "log"), *err = t_read_in(dir, "err");
	cr_assert(log, "%s", err);
	cr_expect(strstr(log, "[0, \"ndarray\", \"float32\", [0.0, 1.0, 2.0], 0]\n"), "%s", log);
	cr_expect(strstr(log, "[1, \"set\", [1, 2, 3]]\n"), "%s", log);
	cr_expect(strstr(log, "[2, \"None\"]\n"), "%s", log);
	cr_expect(strstr(log, "[4, \"tuple\", 4, [[4, 4], [4, 4]]]\n"), "%s", log);
	free(log);
	free(err);

	/* As JSON (the default, auto, and result = json): each fails naming W.process, where
	 * in the result the culprit is, and what to return instead; no json/encoder.py. */
	const char *modes[] = {"auto", "json"};
	for (int m = 0; m < 2; m++) {
		t_jobf(dir,
		       "[job]\ngpus = 0\npython = /usr/bin/python3\n"
		       "[worker]\nplugin = python\nscript = w.py\nclass = W\nresult = %s\n"
		       "[generator]\nplugin = range\nstop = 4\n"
		       "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		       modes[m]);
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
		char *out = t_read_in(dir, "out.jsonl");
		cr_assert(out);
		char want[200];
		snprintf(want, sizeof want,
			 "python: W.process() (%s/w.py:4) returned a dict that JSON cannot hold "
			 "(result = %s): result['emb'] is a numpy.ndarray",
			 dir, modes[m]);
		EXPECT_LINE(out, 0, want);
		EXPECT_LINE(out, 0, "or set [worker] result = pickle");
		EXPECT_LINE(out, 1, "returned a set that JSON cannot hold");
		EXPECT_LINE(out, 1, "result is a builtins.set");
		EXPECT_LINE(out, 3, "result[1] is a numpy.ndarray");
		EXPECT_LINE(out, 2, m == 0 ? "\"result\": \"\"" : "\"result\": \"null\"");
		cr_expect(!strstr(out, "encoder.py"), "%s", out);
		free(out);
	}
	/* result = bytes says what it takes; an unknown mode is refused before tasks run. */
	t_jobf(dir, "[job]\ngpus = 0\npython = /usr/bin/python3\n"
		    "[worker]\nplugin = python\nscript = w.py\nclass = W\nresult = bytes\n"
		    "[generator]\nplugin = range\nstop = 2\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 1);
	char *out = t_read_in(dir, "out.jsonl");
	EXPECT_LINE(out, 1, "returned a set: result = bytes takes bytes");
	free(out);
	t_jobf(dir, "[job]\ngpus = 0\npython = /usr/bin/python3\n"
		    "[worker]\nplugin = python\nscript = w.py\nclass = W\nresult = pickel\n"
		    "[generator]\nplugin = range\nstop = 2\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 3);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "[worker] result = 'pickel': expected auto, pickle, json or bytes"),
		  "%s", err);
	free(err);
}

/* The ids of the ("ok", id) lines of log (JSON lists, one a line) into seen[], counted. */
static void count_ok(const char *log, int *seen, int n)
{
	for (const char *p = log; p && (p = strstr(p, "[\"ok\", ")); p++) {
		int id = atoi(p + 7);
		if (id >= 0 && id < n)
			seen[id]++;
	}
}

Test(python, callbacks_are_told_how_the_run_ended_and_what_a_resume_skips, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "w.py",
		     "class W:\n"
		     "    def setup(self, gpu_id, seed, **kw): pass\n"
		     "    def process(self, data):\n"
		     "        if bytes(data) == b'2': raise ValueError('two')\n"
		     "        return data\n"));
	free(t_write(dir, "cb.py",
		     "import json, os\n"
		     "here = os.path.dirname(__file__)\n"
		     "log = open(os.path.join(here, 'log'), 'a')\n"
		     "def w(*a):\n"
		     "    log.write(json.dumps(a) + '\\n')\n"
		     "    log.flush()\n"
		     "def on_resume(done):\n"
		     "    w('resume', list(done), sorted(done.failed), len(done), 2 in done,\n"
		     "      19 in done, repr(done).split('(')[0])\n"
		     "def on_success(task_id, result, worker_id):\n"
		     "    if task_id == 5 and os.path.exists(os.path.join(here, 'fail')):\n"
		     "        os.remove(os.path.join(here, 'fail'))\n"
		     "        raise IOError('disk full')\n"
		     "    w('ok', task_id)\n"
		     "def on_error(task_id, error, worker_id):\n"
		     "    w('error', task_id)\n"
		     "def on_exit(stats):\n"
		     "    w('exit', stats['exit_status'], stats['abort_reason'], stats['ok'])\n"));
	free(t_write(dir, "fail", ""));
	t_jobf(dir, "[job]\ngpus = 0\nordered = true\n"
		    "[worker]\nplugin = python\nscript = w.py\nclass = W\n"
		    "[generator]\nplugin = range\nstop = 20\n"
		    "[sink]\nplugin = python\nscript = cb.py\n");
	/* A callback that raises aborts the run: on_exit says so. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 3);
	char *log = t_read_in(dir, "log"), *err = t_read_in(dir, "err");
	cr_assert(log, "%s", err);
	cr_expect(strstr(log, "[\"exit\", 3, \"the sink failed: python: on_success raised "
			      "OSError: disk full"),
		  "%s", log);
	cr_expect(strstr(log, "[\"error\", 2]\n"), "%s", log);
	cr_expect(!strstr(log, "\"resume\""), "a fresh run has no on_resume:\n%s", log);
	int seen[20] = {0};
	count_ok(log, seen, 20);
	free(log);
	free(err);
	/* Resumed: on_resume gets the tasks run 1 finished (0-4, the failed 2 among them),
	 * before any other callback; those are not delivered again. */
	free(t_write(dir, "log", ""));
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --resume", dir), 1);
	log = t_read_in(dir, "log");
	err = t_read_in(dir, "err");
	cr_assert(log, "%s", err);
	const char *first = "[\"resume\", [0, 1, 2, 3, 4], [2], 5, true, false, \"DoneTasks\"]\n";
	cr_expect(!strncmp(log, first, strlen(first)), "%s", log);
	count_ok(log, seen, 20);
	for (int id = 0; id < 20; id++)
		cr_expect_eq(seen[id], id == 2 ? 0 : 1, "task %d delivered %d times:\n%s", id,
			     seen[id], log);
	/* Earlier failures still stand: exit 1, not aborted. */
	cr_expect(strstr(log, "[\"exit\", 1, null, 15]\n"), "%s", log);
	free(log);
	free(err);
}

/* What docs/reference.md's "Which GPU, which seed" promises: a worker's only GPU is device 0
 * (CUDA_VISIBLE_DEVICES is its GPU's id before setup), and in a job file seed is
 * base_seed + the worker's index over all GPUs and slots. */
Test(python, a_worker_sees_its_gpu_as_device_0_and_seed_is_base_seed_plus_index, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	py_job(dir,
	       "import os\n"
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw):\n"
	       "        self.me = '%d/%d/%s' % (gpu_id, seed, os.environ['CUDA_VISIBLE_DEVICES'])\n"
	       "    def process(self, data):\n"
	       "        return self.me\n",
	       64, "workers_per_gpu = 2\nbase_seed = 100", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	cr_assert(out, "%s", err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 64, "%s", err);
	/* Workers 0 and 1 on GPU 0, 2 and 3 on GPU 1: seeds 100 to 103. */
	const char *want[] = {"\"worker_id\": 0, \"gpu_id\": 0,", "\"result\": \"0/100/0\"",
			      "\"worker_id\": 1, \"gpu_id\": 0,", "\"result\": \"0/101/0\"",
			      "\"worker_id\": 2, \"gpu_id\": 1,", "\"result\": \"1/102/1\"",
			      "\"worker_id\": 3, \"gpu_id\": 1,", "\"result\": \"1/103/1\""};
	for (const char *p = out; p && *p;) {
		const char *e = strchr(p, '\n');
		char *line = strndup(p, e ? (size_t)(e - p) : strlen(p));
		int w = -1;
		for (int k = 0; k < 4; k++)
			if (strstr(line, want[2 * k]))
				w = k;
		cr_expect(w >= 0 && strstr(line, want[2 * w + 1]), "%s", line);
		free(line);
		p = e ? e + 1 : NULL;
	}
	free(out);
	free(err);
}

Test(python, generator_and_callbacks_with_every_event_kind, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "gen.py",
		     "def items(count, **kw):\n"
		     "    out = [b'bytes', 'str', {'k': 1}]\n"
		     "    out += [str(i) for i in range(3, int(count))]\n"
		     "    return out\n"
		     "def broken(**kw):\n"
		     "    yield 'one'\n"
		     "    raise KeyError('no more')\n"));
	free(t_write(
		dir, "cb.py",
		"import json\n"
		"class Callbacks:\n"
		"    def __init__(self, log, **kw): self.f = open(log, 'w')\n"
		"    def w(self, *a): self.f.write(json.dumps(a) + '\\n')\n"
		"    def on_success(self, task_id, result, worker_id): self.w('ok', task_id, result)\n"
		"    def on_error(self, task_id, error, worker_id): self.w('error', task_id, error[:40])\n"
		"    def on_timeout(self, task_id, timeout, worker_id): self.w('timeout', task_id, timeout)\n"
		"    def on_setup_fail(self, gpu_id, error): self.w('setup_fail', gpu_id, error[:60])\n"
		"    def on_task_start(self, task_id, worker_id): self.w('start', task_id)\n"
		"    def on_exit(self, stats):\n"
		"        self.w('exit', stats['ok'], stats['failed'], stats['timed_out'], stats['generated'])\n"
		"        self.f.close()\n"));
	free(t_write(dir, "w.py",
		     "import time\n"
		     "class W:\n"
		     "    def setup(self, gpu_id, seed, **kw):\n"
		     "        if gpu_id == 1: raise RuntimeError('no GPU 1 today')\n"
		     "    def process(self, data):\n"
		     "        if data == b'4': raise ValueError('four')\n"
		     "        if data == b'5': time.sleep(30)\n"
		     "        return data\n"));
	t_jobf(dir,
	       "[job]\ngpus = 0,1\ntask_timeout = 1\n"
	       "[worker]\nplugin = python\nscript = w.py\nclass = W\ninput = bytes\n"
	       "[generator]\nplugin = python\nscript = gen.py\nfunction = items\ncount = 8\n"
	       "[sink]\nplugin = python\nscript = cb.py\nclass = Callbacks\nlog = %s/log\n",
	       dir);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json '%s/s.json'", dir, dir),
		     1);
	char *log = t_read_in(dir, "log"), *err = t_read_in(dir, "err"),
	     *st = t_read_in(dir, "s.json");
	cr_assert(log, "%s", err);
	cr_expect(strstr(log, "[\"ok\", 0, \"bytes\"]"), "%s", log);
	cr_expect(strstr(log, "[\"ok\", 1, \"str\"]"), "%s", log);
	cr_expect(strstr(log, "[\"ok\", 2, \"{\\\"k\\\": 1}\"]"), "%s", log);
	cr_expect(strstr(log, "[\"ok\", 7, \"7\"]"), "%s", log);
	cr_expect(strstr(log, "[\"error\", 4, \"ValueError: four (at "), "%s", log);
	cr_expect(strstr(log, "[\"timeout\", 5, 1.0]"), "%s", log);
	cr_expect(strstr(log,
			 "[\"setup_fail\", 1, \"python: W.setup() failed: RuntimeError: no GPU 1"),
		  "%s", log);
	cr_expect(strstr(log, "[\"start\", 3]"), "%s", log);
	cr_expect(strstr(log, "[\"exit\", 6, 1, 1, 8]\n"), "on_exit once, last:\n%s", log);
	cr_expect_eq(t_count_lines(log, "[\"exit\""), 1);
	cr_expect(strstr(st, "\"total\": 8,"), "the list's length is the total: %s", st);
	free(log);
	free(err);
	free(st);

	/* A generator that raises: a generator failure, with the exception. */
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
		    "[generator]\nplugin = python\nscript = gen.py\nfunction = broken\n"
		    "[sink]\nplugin = jsonl\npath = out.jsonl\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 3);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err,
			 "the generator failed after 1 tasks: python: broken() raised KeyError: "
			 "'no more' (at "),
		  "%s", err);
	free(err);
	/* A callback that raises aborts the run like a failing sink. */
	free(t_write(dir, "cb2.py",
		     "def on_success(task_id, result, worker_id):\n"
		     "    if task_id == 3: raise IOError('disk full')\n"));
	t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
		    "[generator]\nplugin = range\nstop = 10\n"
		    "[sink]\nplugin = python\nscript = cb2.py\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 3);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "the sink failed: python: on_success raised OSError: disk full"),
		  "%s", err);
	free(err);
}

Test(python, the_libraries_own_example_end_to_end, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	char job[600];
	snprintf(job, sizeof job, "%s/docs/examples/python/job.ini", t_env("SRCDIR"));
	/* Its callbacks, as written: every 100th result printed. */
	/* The journal goes to the test's folder, not beside the example in the source tree. */
	cr_expect_eq(t_gpud(dir, "run '%s' --ui off --set job.gpus=0,1 --set job.journal=%s/j", job,
			    dir),
		     0);
	char *out = t_read_in(dir, "out"), *err = t_read_in(dir, "err");
	cr_expect_eq(t_count_lines(out, "Progress: "), 10, "%s\n%s", out, err);
	cr_expect(strstr(out, "Progress: 500 on GPU ") &&
			  strstr(out, " -> Features from /data/img_0500.jpg via GPU "),
		  "%s", out);
	free(out);
	free(err);
	/* Every result checked: the same job into a jsonl file. */
	cr_expect_eq(t_gpud(dir,
			    "run '%s' --ui off --set job.gpus=0,1 --set job.journal=off "
			    "--set sink.plugin=jsonl "
			    "--set sink.path=%s/all.jsonl",
			    job, dir),
		     0);
	char *all = t_read_in(dir, "all.jsonl");
	cr_assert(all);
	cr_expect_eq(t_count_lines(all, "{\"task_id\": "), 1000);
	for (int id = 0; id < 1000; id++) {
		char want[96];
		snprintf(want, sizeof want,
			 "\"result\": \"Features from /data/img_%04d.jpg via GPU ", id);
		EXPECT_LINE(all, id, want);
	}
	free(all);
}

Test(python, the_numpy_example_checks_every_result, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	if (t_sh(dir, "/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
		cr_skip_test(
			"NumPy is not installed for Debian's /usr/bin/python3 (python3-numpy)");
	char job[600];
	snprintf(job, sizeof job, "%s/docs/examples/python/dense.ini", t_env("SRCDIR"));
	cr_expect_eq(t_gpud(dir,
			    "run '%s' --ui off --set sink.report_file=%s/report "
			    "--set job.journal=off --set job.python=/usr/bin/python3",
			    job, dir),
		     0);
	char *report = t_read_in(dir, "report"), *err = t_read_in(dir, "err");
	cr_expect(report && strcmp(report, "checked 2000, wrong 0, ok 2000\n") == 0, "%s\n%s",
		  report ? report : "(no report)", err);
	free(report);
	free(err);
}

Test(python, cleanup_and_whole_batch_exceptions_and_keyboard_interrupt, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	py_job(dir,
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw): pass\n"
	       "    def process(self, d):\n"
	       "        if bytes(d) == b'1': raise KeyboardInterrupt()\n"
	       "        return bytes(d)\n"
	       "    def cleanup(self): raise OSError('cannot free the model')\n",
	       4, "", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 1);
	char *out = t_read_in(dir, "out.jsonl"), *err = t_read_in(dir, "err");
	EXPECT_LINE(out, 1, "KeyboardInterrupt: ");
	EXPECT_LINE(out, 2, "\"status\": \"ok\"");
	cr_expect(strstr(err, "python: cleanup() failed: OSError: cannot free the model (at "),
		  "%s", err);
	free(out);
	free(err);
	/* A process_batch that raises: its call is split, and only the item that raises
	 * alone fails (isolate_failures). */
	py_job(dir,
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw): pass\n"
	       "    def process_batch(self, items):\n"
	       "        if any(bytes(i) == b'13' for i in items): raise ValueError('bad batch')\n"
	       "        return [bytes(i) for i in items]\n",
	       64, "batch_size = 4\nbatch_wait_ms = 100", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json %s/s.json", dir, dir), 1);
	out = t_read_in(dir, "out.jsonl");
	char *st = t_read_in(dir, "s.json");
	cr_assert(out && st);
	EXPECT_LINE(out, 13, "ValueError: bad batch");
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 64);
	cr_expect(strstr(st, "\"failed\": 1,"), "only the bad item, alone: %s", st);
	free(out);
	free(st);
}

/* A process_batch that raises on a bad item fails that item alone, with its own
 * error: the call is split until each bad item raises alone (isolate_failures); every
 * other item of its batch gets its result. Two bad among 3,551: exactly two failures. */
Test(python, a_raising_process_batch_fails_only_its_bad_items, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	py_job(dir,
	       "class W:\n"
	       "    def setup(self, gpu_id, seed, **kw): pass\n"
	       "    def process_batch(self, items):\n"
	       "        for i in items:\n"
	       "            if bytes(i) in (b'777', b'2345'):\n"
	       "                raise ValueError('corrupt image ' + bytes(i).decode())\n"
	       "        return [bytes(i) for i in items]\n",
	       3551, "batch_size = 64\nbatch_wait_ms = 50", "");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off --stats-json %s/s.json", dir, dir), 1);
	char *out = t_read_in(dir, "out.jsonl"), *st = t_read_in(dir, "s.json");
	char *err = t_read_in(dir, "err");
	cr_assert(out && st && err);
	cr_expect_eq(t_count_lines(out, "{\"task_id\": "), 3551);
	EXPECT_LINE(out, 777, "ValueError: corrupt image 777");
	EXPECT_LINE(out, 2345, "ValueError: corrupt image 2345");
	EXPECT_LINE(out, 776, "\"status\": \"ok\"");
	EXPECT_LINE(out, 778, "\"status\": \"ok\"");
	EXPECT_LINE(out, 2344, "\"status\": \"ok\"");
	cr_expect(strstr(st, "\"failed\": 2,"), "%s", st);
	cr_expect(strstr(err, "gpud: 3551 tasks: 3549 ok, 2 failed"), "%s", err);
	free(out);
	free(st);
	free(err);
}

Test(python, check_import_finds_a_wrong_class_method_or_keyword, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "w.py",
		     "import gpud\n"
		     "print('top level ran')\n"
		     "class W(gpud.BaseWorker):\n"
		     "    def setup(self, gpu_id, seed, model_path):\n"
		     "        self.path = model_path\n"
		     "    def process(self, data):\n"
		     "        return data\n"
		     "class Helper:\n"
		     "    pass\n"
		     "class NoProcess:\n"
		     "    def setup(self, gpu_id, seed, **kw): pass\n"
		     "class Any(gpud.BaseWorker):\n"
		     "    def setup(self, gpu_id, seed, **keys): self.keys = keys\n"
		     "    def process(self, data): return data\n"
		     "def items(count):\n"
		     "    return range(int(count))\n"
		     "class CB:\n"
		     "    def __init__(self, log): self.log = log\n"
		     "    def on_success(self, task_id, result, worker_id): pass\n"));
	t_jobf(dir, "[job]\ngpus = 0\n"
		    "[worker]\nplugin = python\nscript = w.py\nclass = W\nmodel_path = m.bin\n"
		    "[generator]\nplugin = python\nscript = w.py\nfunction = items\ncount = 3\n"
		    "[sink]\nplugin = python\nscript = w.py\nclass = CB\nlog = l.txt\n");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --import", dir), 0);
	char *out = t_read_in(dir, "out"), *err = t_read_in(dir, "err");
	cr_expect(strstr(out, "  import: [worker] W in script = "), "%s%s", out, err);
	cr_expect(strstr(out, "w.py: process; setup() takes model_path\n"), "%s", out);
	cr_expect(strstr(out, "  import: [generator] items() in script = "), "%s", out);
	cr_expect(strstr(out, "  import: [sink] CB in script = "), "%s", out);
	cr_expect(!strstr(out, "top level ran") && !strstr(err, "top level ran"), "%s", out);
	free(out);
	free(err);
	/* A setup() with **keys takes any key, and is said to. */
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --import --set worker.class=Any", dir), 0);
	out = t_read_in(dir, "out");
	cr_expect(strstr(out, "w.py: process; setup() takes any keys (**keys); the job gives "
			      "model_path\n"),
		  "%s", out);
	free(out);
	/* Without --import the code is not run, and a wrong class passes as before. */
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --set worker.class=Wokrer", dir), 0);
	struct {
		const char *set, *want;
	} cases[] = {
		{"--set worker.class=Wokrer",
		 "[worker] class = Wokrer: script = %s/w.py has no class Wokrer; it defines: Any, "
		 "CB, Helper, NoProcess, W\n"},
		{"--set worker.class=NoProcess",
		 "[worker] class = NoProcess: NoProcess has neither process(data) nor "
		 "process_batch(items)\n"},
		{"--set worker.modelpath=x",
		 "[worker] W.setup(self, gpu_id, seed, model_path) cannot take the job's keys as "
		 "keywords (model_path, modelpath): got an unexpected keyword argument "
		 "'modelpath'\n"},
		{"--set generator.function=inputs",
		 "[generator] function = inputs: script = %s/w.py has no function inputs; it "
		 "defines: items\n"},
		{"--set sink.class=Callbacks",
		 "[sink] class = Callbacks: script = %s/w.py has no class Callbacks; it defines: "
		 "Any, CB, Helper, NoProcess, W\n"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		cr_expect_eq(t_gpud(dir, "check '%s/job.ini' --import %s", dir, cases[i].set), 2,
			     "case %zu", i);
		err = t_read_in(dir, "err");
		char want[512];
		snprintf(want, sizeof want, cases[i].want, dir);
		cr_expect(strstr(err, want), "case %zu: want %s in:\n%s", i, want, err);
		free(err);
	}
	/* --import belongs to check. */
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --import", dir), 2);
	err = t_read_in(dir, "err");
	cr_expect(strstr(err, "--import is an option of gpud check, not of run"), "%s", err);
	free(err);
}

/* A python section that names no code (neither script nor module), or both, is refused
 * by check, check --import and run alike: exit 2, one line with its place, before any
 * worker starts. */
Test(python, a_section_without_script_or_module_is_refused_before_any_worker, .timeout = 60)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "w.py",
		     "import gpud\nclass W(gpud.BaseWorker):\n"
		     "    def process(self, d): return d\n"));
	struct {
		const char *sections, *want;
	} cases[] = {
		{"[worker]\nplugin = python\nclass = W\n",
		 "job.ini:5: [worker] plugin = python: give script = FILE.py or module = NAME "
		 "(neither is given)"},
		{"[stage.pre]\nplugin = python\nclass = W\n[worker]\nplugin = echo\n",
		 "job.ini:5: [stage.pre] plugin = python: give script = FILE.py or module = NAME "
		 "(neither is given)"},
		{"[worker]\nplugin = python\nscript = w.py\nmodule = w\nclass = W\n",
		 "job.ini:7: [worker] plugin = python: give script = FILE.py or module = NAME "
		 "(one of them, not both)"},
	};
	const char *cmds[] = {"check '%s/job.ini'", "check '%s/job.ini' --import",
			      "run '%s/job.ini' --ui plain"};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		t_jobf(dir,
		       "[job]\ngpus = 0\njournal = off\n%s"
		       "[generator]\nplugin = range\nstop = 3\n[sink]\nplugin = null\n",
		       cases[i].sections);
		for (size_t k = 0; k < 3; k++) {
			char args[256];
			snprintf(args, sizeof args, cmds[k], dir);
			cr_expect_eq(t_gpud(dir, "%s", args), 2, "case %zu: %s", i, args);
			char *err = t_read_in(dir, "err");
			cr_expect(strstr(err, cases[i].want), "case %zu: %s: %s", i, args, err);
			cr_expect_eq(t_count_lines(err, ""), 1, "case %zu: %s: %s", i, args, err);
			cr_expect(!strstr(err, "setup") && !strstr(err, "KeyError"),
				  "case %zu: %s: %s", i, args, err);
			free(err);
		}
	}
}

Test(python, a_job_that_names_no_class_or_a_wrong_one_says_so, .timeout = 60)
{
	need_python();
	const char *dir = t_tmpdir();
	struct {
		const char *worker, *want;
	} cases[] = {
		{"script = w.py\n", "python: class = NAME is required"},
		{"script = w.py\nclass = Nope\n", "w.py has no class Nope"},
		{"script = w.py\nclass = W\ninput = xml\n",
		 "python: input = 'xml': expected memoryview"},
		{"script = nope.py\nclass = W\n", "python: loading "},
		{"module = no_such_module_here\nclass = W\n",
		 "python: importing module no_such_module_here: ModuleNotFoundError"},
		{"script = w.py\nclass = W\n",
		 "python: class W has no setup(gpu_id, seed, **kwargs) (inherit gpud.BaseWorker, "
		 "or define it)"},
	};
	free(t_write(dir, "w.py", "class W:\n    def process(self, d): return d\n"));
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		t_jobf(dir,
		       "[job]\ngpus = 0\njournal = off\n[worker]\nplugin = python\n%s"
		       "[generator]\nplugin = range\nstop = 3\n[sink]\nplugin = null\n",
		       cases[i].worker);
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 3, "case %zu", i);
		char *err = t_read_in(dir, "err");
		cr_expect(strstr(err, "setup failed: ") && strstr(err, cases[i].want),
			  "case %zu: %s", i, err);
		free(err);
	}
}

/* Python in the host cannot take gpud's signals: a generator's signal.signal(SIGTERM,
 * ...) is refused with a warning (as are SIGINT, SIGHUP and the others gpud handles),
 * so SIGTERM still stops the run in order: the running tasks finish and the run exits
 * 4 with its journal. Before, Python's handler replaced gpud's: the SIGTERM was
 * swallowed and only SIGKILL ended the run (137). */
Test(python, a_generator_cannot_take_gpuds_signals, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(
		dir, "gen.py",
		"import signal, time\n"
		"def items(**kw):\n"
		"    signal.signal(signal.SIGTERM, lambda *a: print('HANDLER' + 'RAN'))\n"
		"    old = signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
		"    signal.signal(signal.SIGHUP, old)\n"
		"    signal.siginterrupt(signal.SIGTERM, False)\n"
		"    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1})\n"
		"    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # not gpud's: allowed\n"
		"    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN\n"
		"    for i in range(1000):\n"
		"        if i == 3: open('ready', 'w').close()\n"
		"        time.sleep(0.02)\n"
		"        yield str(i)\n"));
	free(t_jobf(dir, "[job]\ngpus = 0\n[worker]\nplugin = echo\n"
			 "[generator]\nplugin = python\nscript = gen.py\nfunction = items\n"
			 "[sink]\nplugin = jsonl\npath = out.jsonl\n"));
	t_sh(dir, WAIT_FOR "\"$GPUD\" run job.ini --ui plain >stdout 2>err & pid=$!\n"
			   "w '[ -e ready ]' && kill -TERM $pid\n"
			   /* Taken, gpud says so; lost, it never does (killed after WAIT_FOR's 20
			    * s). Not a bound on the run's end: under a sanitizer on a loaded
			    * machine it takes seconds. */
			   "w 'grep -q \"interrupted: finishing\" err' || kill -KILL $pid\n"
			   "wait $pid; echo $? >rc\n");
	char *err = t_read_in(dir, "err"), *out = t_read_in(dir, "out.jsonl");
	cr_expect_eq(t_read_long(dir, "rc"), 4, "SIGTERM stops the run with its journal:\n%s", err);
	cr_expect(strstr(err, "`gpud run job.ini --resume` finishes it") ||
			  strstr(err, "--resume` finishes it"),
		  "%s", err);
	cr_expect(strstr(err, "signal.signal(SIGTERM, ...) ignored"), "the refusal is told:\n%s",
		  err);
	cr_expect(strstr(err, "signal.siginterrupt(SIGTERM, ...) ignored"), "%s", err);
	cr_expect(strstr(err, "signal.pthread_sigmask(SIG_BLOCK, SIGTERM) ignored"), "%s", err);
	/* Told once: putting back what it had is no news. */
	const char *sighup = strstr(err, "signal.signal(SIGHUP, ...) ignored");
	cr_expect(sighup && !strstr(sighup + 1, "signal.signal(SIGHUP"), "%s", err);
	cr_expect(strstr(err, "gen.py:3: RuntimeWarning: gpud: signal.signal(SIGTERM"),
		  "the warning names the plugin's line:\n%s", err);
	char *stdout_text = t_read_in(dir, "stdout");
	cr_expect(stdout_text && !strstr(stdout_text, "HANDLERRAN") && !strstr(err, "HANDLERRAN"),
		  "the generator's handler never ran");
	free(stdout_text);
	cr_expect(out && t_count_lines(out, "{\"task_id\": ") >= 3, "%s",
		  out ? out : "(no output)");
	free(err);
	free(out);
}

/* os._exit() and os.abort() in the host's Python (generator, callbacks) would end the
 * whole run at once, with exit status 0 after os._exit(0): refused with gpud.ExitRefused,
 * which fails the generator or the sink (exit 3) with a line naming the call. sys.exit()
 * raises SystemExit: a failure too. A process the plugin forks exits as asked. */
Test(python, exits_in_the_host_are_refused_and_reported, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "gen.py",
		     "import os, sys\n"
		     "pid = os.fork()\n"
		     "if pid == 0:\n"
		     "    try:\n"
		     "        os._exit(7)\n"
		     "    finally:\n"
		     "        os.kill(os.getpid(), 9)\n"
		     "CHILD = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])\n"
		     "def exits(how, **kw):\n"
		     "    yield 'child exited %d' % CHILD\n"
		     "    if how == 'exit0': os._exit(0)\n"
		     "    if how == 'abort': os.abort()\n"
		     "    if how == 'sys': sys.exit(0)\n"
		     "    if how == 'libc': __import__('ctypes').CDLL(None).exit(0)\n"
		     "    if how == 'swallow':\n"
		     "        try: os._exit(0)\n"
		     "        except Exception: pass  # not an Exception: it goes through\n"
		     "    yield 'after'\n"));
	struct {
		const char *how, *want;
	} gens[] = {
		{"exit0", "the generator failed after 1 tasks: python: exits() raised ExitRefused: "
			  "os._exit(0) refused in the gpud host"},
		{"abort", "the generator failed after 1 tasks: python: exits() raised ExitRefused: "
			  "os.abort() refused in the gpud host"},
		{"swallow", "python: exits() raised ExitRefused: os._exit(0) refused"},
		{"sys", "the generator failed after 1 tasks: python: exits() raised SystemExit: 0"},
		/* Past the Python guards: the C library's exit(), seen by the host. */
		{"libc", "gpud: aborted: a plugin called exit(0) inside the gpud process"},
	};
	for (size_t i = 0; i < sizeof gens / sizeof *gens; i++) {
		t_jobf(dir,
		       "[job]\ngpus = 0\njournal = off\n[worker]\nplugin = echo\n"
		       "[generator]\nplugin = python\nscript = gen.py\nfunction = exits\nhow = %s\n"
		       "[sink]\nplugin = jsonl\npath = out.jsonl\n",
		       gens[i].how);
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 3, "%s: %s",
			     gens[i].how, t_read_in(dir, "err"));
		char *err = t_read_in(dir, "err"), *out = t_read_in(dir, "out.jsonl");
		cr_expect(strstr(err, gens[i].want), "%s: want %s in\n%s", gens[i].how,
			  gens[i].want, err);
		/* (exit() ends the run before the sink writes anything.) */
		if (strcmp(gens[i].how, "libc") != 0)
			cr_expect(out && strstr(out, "\"result\": \"child exited 7\""),
				  "a forked child's os._exit(7) is its own: %s",
				  out ? out : "(no output)");
		free(err);
		free(out);
	}
	/* The same from a callbacks class, and from the module's own functions. */
	free(t_write(dir, "cb.py",
		     "import os\n"
		     "class Callbacks:\n"
		     "    def on_success(self, task_id, result, worker_id):\n"
		     "        if task_id == 2: os._exit(0)\n"
		     "def on_success(task_id, result, worker_id):\n"
		     "    if task_id == 2: os._exit(0)\n"));
	const char *classes[] = {"class = Callbacks\n", ""};
	for (size_t i = 0; i < 2; i++) {
		t_jobf(dir,
		       "[job]\ngpus = 0\njournal = off\n[worker]\nplugin = echo\n"
		       "[generator]\nplugin = range\nstop = 10\n"
		       "[sink]\nplugin = python\nscript = cb.py\n%s",
		       classes[i]);
		cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 3, "%s",
			     t_read_in(dir, "err"));
		char *err = t_read_in(dir, "err");
		cr_expect(strstr(err, "the sink failed: python: on_success raised ExitRefused: "
				      "os._exit(0) refused in the gpud host"),
			  "%s", err);
		free(err);
	}
}

/* ---- the Python the job chooses: each one found, a venv of it, and refusals ---- */

/* The interpreter of CPython 3.<minor>: Debian's /usr/bin/python3.<minor> (debian) or
 * pyenv's ~/.pyenv/versions/3.<minor>.* (malloc'd); skips the test with one line when
 * this machine has none. */
static char *find_python(int minor, bool debian)
{
	char *p = NULL;
	if (debian) {
		cr_assert(asprintf(&p, "/usr/bin/python3.%d", minor) > 0);
	} else {
		const char *home = getenv("HOME") ? getenv("HOME") : "/root";
		char *cmd;
		cr_assert(asprintf(&cmd,
				   "ls -d %s/.pyenv/versions/3.%d.*/bin/python3.%d 2>/dev/null | "
				   "grep -v -- -dev | sort -V | tail -n 1",
				   home, minor, minor) > 0);
		FILE *f = popen(cmd, "r");
		char line[1024] = "";
		if (f && fgets(line, sizeof line, f))
			line[strcspn(line, "\n")] = '\0';
		if (f)
			pclose(f);
		free(cmd);
		p = *line ? strdup(line) : NULL;
	}
	if (!p || access(p, X_OK) != 0)
		cr_skip_test("no %s Python 3.%d on this machine (%s)", debian ? "Debian" : "pyenv",
			     minor,
			     debian ? "apt-get install python3.X" : "looked in ~/.pyenv/versions");
	return p;
}

/* Writes a job with the python worker, generator and sink, each saying which Python
 * it runs on and whether it sees the module only the venv has. */
static void which_python_job(const char *dir, const char *job_extra)
{
	static const char probe[] =
		"import sys\n"
		"try:\n"
		"    import onlyvenv\n"
		"    SEEN = onlyvenv.WHERE\n"
		"except ImportError:\n"
		"    SEEN = 'none'\n"
		"def me():\n"
		"    return '%d.%d|%s|%s|%s' % (sys.version_info[0], sys.version_info[1],\n"
		"                               sys.prefix, sys.executable, SEEN)\n";
	char *text;
	cr_assert(asprintf(&text,
			   "%s"
			   "class W:\n"
			   "    def setup(self, gpu_id, seed, **kw):\n"
			   "        print('setup on', me())\n"
			   "    def process(self, data):\n"
			   "        return bytes(data).decode() + ' worker=' + me()\n",
			   probe) > 0);
	free(t_write(dir, "w.py", text));
	free(text);
	cr_assert(asprintf(&text,
			   "%s"
			   "def items(**kw):\n"
			   "    for i in range(4):\n"
			   "        yield 'gen=' + me()\n",
			   probe) > 0);
	free(t_write(dir, "gen.py", text));
	free(text);
	cr_assert(asprintf(&text,
			   "%s"
			   "class Cb:\n"
			   "    def __init__(self, path):\n"
			   "        self.out = open(path, 'w')\n"
			   "    def on_success(self, task_id, result, worker_id):\n"
			   "        self.out.write(result + '\\n')\n"
			   "    def on_exit(self, stats):\n"
			   "        self.out.write('host=' + me() + '\\n')\n"
			   "        self.out.close()\n",
			   probe) > 0);
	free(t_write(dir, "cb.py", text));
	free(text);
	t_jobf(dir,
	       "[job]\ngpus = 0,1\njournal = off\n%s\n"
	       "[worker]\nplugin = python\nscript = w.py\nclass = W\n"
	       "[generator]\nplugin = python\nscript = gen.py\nfunction = items\n"
	       "[sink]\nplugin = python\nscript = cb.py\nclass = Cb\npath = seen.txt\n",
	       job_extra);
}

/* Runs the job and checks that the worker, the generator and the host all said `want`
 * ("3.12|PREFIX|EXECUTABLE|SEEN"), and that gpud named it. */
static void expect_ran_on(const char *dir, const char *want, const char *how)
{
	char line[4200];
	snprintf(line, sizeof line, "%s/seen.txt", dir);
	unlink(line);
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui plain", dir), 0, "%s", how);
	char *seen = t_read_in(dir, "seen.txt"), *err = t_read_in(dir, "err");
	cr_assert(seen, "%s: no seen.txt\n%s", how, err);
	/* Each task: the generator's item, then what the worker said. */
	snprintf(line, sizeof line, "gen=%s worker=%s\n", want, want);
	cr_expect_eq(t_count_lines(seen, line), 4, "%s: want 4 x %s in\n%s\n%s", how, line, seen,
		     err);
	snprintf(line, sizeof line, "host=%s\n", want);
	cr_expect(strstr(seen, line), "%s: want %s in\n%s", how, line, seen);
	/* The summary names it: version and executable. */
	char said[1200];
	snprintf(said, sizeof said, "gpud: python: Python %.*s.", (int)strcspn(want, "|"), want);
	cr_expect(strstr(err, said), "%s: want '%s' in\n%s", how, said, err);
	free(seen);
	free(err);
}

/* The Python `py` (3.<minor>), then a venv made from it, chosen three ways. */
static void runs_on(const char *py, int minor)
{
	const char *dir = t_tmpdir();
	char want[2048], job[1200], venv[600], cmd[1600];
	/* The base interpreter, by [job] python: its own prefix, no venv module. */
	snprintf(cmd, sizeof cmd, "'%s' -c 'import sys; print(sys.prefix)' > prefix.txt", py);
	cr_assert_eq(t_sh(dir, cmd), 0);
	char *prefix = t_read_in(dir, "prefix.txt");
	prefix[strcspn(prefix, "\n")] = '\0';
	snprintf(job, sizeof job, "python = %s", py);
	which_python_job(dir, job);
	snprintf(want, sizeof want, "3.%d|%s|%s|none", minor, prefix, py);
	expect_ran_on(dir, want, "[job] python = the interpreter");

	/* A venv of it, with a module only the venv has. */
	snprintf(venv, sizeof venv, "%s/venv", dir);
	snprintf(cmd, sizeof cmd,
		 "'%s' -m venv --without-pip venv && "
		 "echo \"WHERE = 'venv'\" > venv/lib/python3.%d/site-packages/onlyvenv.py",
		 py, minor);
	cr_assert_eq(t_sh(dir, cmd), 0, "cannot make a venv with %s", py);
	snprintf(want, sizeof want, "3.%d|%s|%s/bin/python3|venv", minor, venv, venv);
	snprintf(job, sizeof job, "python = %s", venv);
	which_python_job(dir, job);
	expect_ran_on(dir, want, "[job] python = the venv folder");

	/* $VIRTUAL_ENV, as `source venv/bin/activate` leaves it (without PATH: the venv is
	 * chosen by the variable, not by which python3 comes first). */
	setenv("VIRTUAL_ENV", venv, 1);
	which_python_job(dir, "");
	expect_ran_on(dir, want, "$VIRTUAL_ENV");
	/* [job] python comes first. */
	snprintf(job, sizeof job, "python = %s", py);
	which_python_job(dir, job);
	snprintf(want, sizeof want, "3.%d|%s|%s|none", minor, prefix, py);
	expect_ran_on(dir, want, "[job] python over $VIRTUAL_ENV");
	unsetenv("VIRTUAL_ENV");
	free(prefix);
}

/* One Python (3.<minor>: Debian's, or pyenv's) and a venv of it. */
static void python_and_a_venv(int minor, bool debian)
{
	need_python();
	char *py = find_python(minor, debian);
	runs_on(py, minor);
	free(py);
}

#define PYTHON_AND_A_VENV(name, minor, debian)                                                     \
	Test(python, name, .timeout = 180)                                                         \
	{                                                                                          \
		python_and_a_venv(minor, debian);                                                  \
	}

PYTHON_AND_A_VENV(debian_3_11_and_a_venv_of_it, 11, true)
PYTHON_AND_A_VENV(pyenv_3_9_and_a_venv_of_it, 9, false)
PYTHON_AND_A_VENV(pyenv_3_10_and_a_venv_of_it, 10, false)
PYTHON_AND_A_VENV(pyenv_3_11_and_a_venv_of_it, 11, false)
PYTHON_AND_A_VENV(pyenv_3_12_and_a_venv_of_it, 12, false)
PYTHON_AND_A_VENV(pyenv_3_13_and_a_venv_of_it, 13, false)

/* A Python gpud cannot use is refused before anything runs: exit 2, one line naming
 * what was found and what to do, and no worker started. */
static void expect_refused(const char *dir, const char *python, const char *found)
{
	char job[1200];
	snprintf(job, sizeof job, "python = %s", python);
	which_python_job(dir, job);
	for (int run = 0; run < 2; run++) {
		char seen_path[600];
		snprintf(seen_path, sizeof seen_path, "%s/seen.txt", dir);
		unlink(seen_path);
		cr_expect_eq(t_gpud(dir, "%s '%s/job.ini' --ui plain", run ? "run" : "check", dir),
			     2, "%s", python);
		char *err = t_read_in(dir, "err"), *seen = t_read_in(dir, "seen.txt");
		cr_expect(strstr(err, found), "want '%s' in:\n%s", found, err);
		cr_expect_eq(t_count_lines(err, "gpud: "), 1, "one line:\n%s", err);
		cr_expect(strstr(err, "python = ") || strstr(err, "--enable-shared"),
			  "what to do:\n%s", err);
		cr_expect(!strstr(err, "setup on") && !seen, "nothing runs:\n%s", err);
		free(err);
		free(seen);
	}
}

Test(python, pythons_that_cannot_be_used_are_refused, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	const char *home = getenv("HOME") ? getenv("HOME") : "/root";
	static const char *const old[] = {"2.7", "3.6", "3.8"};
	for (size_t i = 0; i < sizeof old / sizeof *old; i++) {
		char cmd[600], *found = NULL;
		snprintf(cmd, sizeof cmd,
			 "ls -d %s/.pyenv/versions/%s.*/bin/python%s 2>/dev/null | tail -n 1 > "
			 "old.txt",
			 home, old[i], old[i]);
		t_sh(dir, cmd);
		char *p = t_read_in(dir, "old.txt");
		if (p && *p) {
			p[strcspn(p, "\n")] = '\0';
			cr_assert(asprintf(&found, "is Python %s.", old[i]) > 0);
			expect_refused(dir, p, found);
		} else {
			cr_log_warn("no pyenv Python %s here: its refusal is not tried", old[i]);
		}
		free(found);
		free(p);
	}
	/* Not a Python: a text file, a program that is not one, a folder without one. */
	free(t_write(dir, "notes.txt", "hello\n"));
	char path[600];
	snprintf(path, sizeof path, "%s/notes.txt", dir);
	expect_refused(dir, path, "is not an executable file: not a Python interpreter");
	expect_refused(dir, "/bin/echo", "/bin/echo is not a Python interpreter (asked with -c");
	expect_refused(dir, dir, "is a folder without bin/python3 or bin/python");
	/* A Python without a shared libpython (a static build): one that says so. */
	free(t_write(
		dir, "static-python",
		"#!/bin/sh\n"
		"printf 'gpud-python-ask\\nexecutable=%s\\nprefix=/nowhere\\nbase_prefix=/nowhere\\n"
		"version=3.11.4\\nimplementation=cpython\\nlibdir=/nowhere/lib\\n"
		"ldlibrary=libpython3.11.a\\ninstsoname=libpython3.11.a\\nabiflags=\\n' \"$0\"\n"));
	snprintf(path, sizeof path, "%s/static-python", dir);
	chmod(path, 0755);
	expect_refused(dir, path,
		       "is Python 3.11.4 without a shared libpython (none in /nowhere/lib)");
}

Test(python, plugins_and_check_name_the_python, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	char *py = find_python(11, true);
	char cmd[1200];
	snprintf(cmd, sizeof cmd, "'%s' -m venv --without-pip venv", py);
	cr_assert_eq(t_sh(dir, cmd), 0);
	char venv[600];
	snprintf(venv, sizeof venv, "%s/venv", dir);
	setenv("VIRTUAL_ENV", venv, 1);
	cr_expect_eq(t_gpud(dir, "plugins"), 0);
	char *out = t_read_in(dir, "out");
	char want[2048];
	/* The micro version is the machine's: compared around. */
	cr_expect(strstr(out, "python plugins run on: Python 3.11."), "%s", out);
	snprintf(want, sizeof want, "(%s/bin/python3, venv %s; from $VIRTUAL_ENV)", venv, venv);
	cr_expect(strstr(out, want), "want %s in\n%s", want, out);
	free(out);
	which_python_job(dir, "");
	cr_expect_eq(t_gpud(dir, "check '%s/job.ini'", dir), 0);
	out = t_read_in(dir, "out");
	snprintf(want, sizeof want, "  python: Python 3.11.");
	cr_expect(strstr(out, want), "%s", out);
	snprintf(want, sizeof want, "(%s/bin/python3, venv %s; from $VIRTUAL_ENV)", venv, venv);
	cr_expect(strstr(out, want), "want %s in\n%s", want, out);
	free(out);
	free(py);
}

/* One script named by the generator and the sink is one module in the host: state the
 * generator keeps is there for the callbacks. */
Test(python, generator_and_callbacks_of_one_script_share_its_module, .timeout = 120)
{
	need_python();
	const char *dir = t_tmpdir();
	free(t_write(dir, "both.py",
		     "names = {}\n"
		     "import sys\n"
		     "sys.loads_of_both = getattr(sys, 'loads_of_both', 0) + 1\n"
		     "def items(**kw):\n"
		     "    for i in range(5):\n"
		     "        names[i] = 'name%d' % i\n"
		     "        yield str(i)\n"
		     "class Cb:\n"
		     "    def __init__(self, path):\n"
		     "        self.out = open(path, 'w')\n"
		     "    def on_success(self, task_id, result, worker_id):\n"
		     "        self.out.write('%d=%s\\n' % (task_id, names.get(task_id)))\n"
		     "    def on_exit(self):\n"
		     "        self.out.write('loaded %d\\n' % sys.loads_of_both)\n"
		     "        self.out.close()\n"));
	t_jobf(dir, "[job]\ngpus = 0\njournal = off\n"
		    "[worker]\nplugin = echo\n"
		    "[generator]\nplugin = python\nscript = both.py\nfunction = items\n"
		    "[sink]\nplugin = python\nscript = ./both.py\nclass = Cb\npath = names.txt\n");
	cr_expect_eq(t_gpud(dir, "run '%s/job.ini' --ui off", dir), 0);
	char *names = t_read_in(dir, "names.txt"), *err = t_read_in(dir, "err");
	cr_assert(names, "%s", err);
	for (int i = 0; i < 5; i++) {
		char want[32];
		snprintf(want, sizeof want, "%d=name%d\n", i, i);
		cr_expect(strstr(names, want), "want %s in\n%s", want, names);
	}
	cr_expect(strstr(names, "loaded 1\n"), "the script ran once:\n%s", names);
	free(names);
	free(err);
}
