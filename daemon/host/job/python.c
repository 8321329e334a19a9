/* SPDX-License-Identifier: MIT */
/*
 * Choosing the Python the python plugins run on. The interpreter is asked what it is
 * (as reticulate and PyCall do): it runs once with a small -c script that prints its
 * sys.executable, prefixes, version and where its shared libpython is, so a pyenv shim,
 * a venv's symlink or a conda environment is what it says it is, never a guess from
 * its path. The plugins then load that libpython (plugins/python/stub.c) and start it
 * with that executable as the program name, which gives the embedded interpreter the
 * same sys.prefix, standard library and site-packages (a venv's included).
 */
#define _GNU_SOURCE
#include "job/python.h"
#include "util/log.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The `gpud` module the python plugins build in, and their own keys, for check --import
 * (daemon/shared/). */
#include "py_keys.h"
#include "gpud_module_py.h" /* gpud_module_source[]: gpud_module.py, embedded at build time */

#ifndef GPUD_BUILT_PYTHON
#define GPUD_BUILT_PYTHON ""
#endif

/* What an interpreter is asked (runs on Python 2 as well, so that what is refused can be
 * named). */
#include "python_ask_py.h" /* ask_script[]: python_ask.py, embedded at build time */

enum {
	F_EXE,
	F_PREFIX,
	F_BASE,
	F_VERSION,
	F_IMPL,
	F_LIBDIR,
	F_LDLIB,
	F_SONAME,
	F_ABI,
	F_NOGIL,
	F_SITE,
	F_N
};
static const char *const field_names[F_N] = {
	"executable",     "prefix",       "base_prefix", "version",
	"implementation", "libdir",       "ldlibrary",   "instsoname",
	"abiflags",       "gil_disabled", "site"};

static struct python_choice chosen;
static bool have_chosen;
static char *owned[F_N + 4]; /* what chosen's strings point into */

const struct python_choice *python_chosen(void)
{
	return have_chosen ? &chosen : NULL;
}

static bool is_python_spec(const char *spec, const char *kind)
{
	if (!spec)
		return false;
	if (strcmp(spec, "python") == 0)
		return true;
	const char *base = strrchr(spec, '/');
	base = base ? base + 1 : spec;
	size_t k = strlen(kind);
	return strncmp(base, kind, k) == 0 && strcmp(base + k, "-python.so") == 0;
}

bool python_needed(const struct cfg *c)
{
	for (size_t i = 0; i < c->n_stages; i++)
		if (is_python_spec(c->stages[i].sec.plugin, "worker"))
			return true;
	return is_python_spec(c->worker.plugin, "worker") ||
	       is_python_spec(c->generator.plugin, "generator") ||
	       is_python_spec(c->sink.plugin, "sink");
}

/* The place of `key` in `s` ("file:line" or "--set ..."), else of its plugin line. */
static const char *place_of(const struct cfg *c, const struct cfg_section *s, const char *key,
			    char *buf, size_t len)
{
	for (size_t i = 0; i < s->count; i++)
		if (!strcmp(s->kv[i].key, key) && s->where && s->where[i])
			return s->where[i];
	if (s->plugin_line > 0)
		snprintf(buf, len, "%s:%d", c->path, s->plugin_line);
	else
		snprintf(buf, len, "%s", c->path);
	return buf;
}

static int check_source(const struct cfg *c, const struct cfg_section *s, const char *name,
			char *err, size_t errlen)
{
	if (!is_python_spec(s->plugin, strncmp(name, "stage.", 6) ? name : "worker"))
		return 0;
	const char *script = gpud_arg(&s->args, "script", NULL);
	const char *module = gpud_arg(&s->args, "module", NULL);
	if (!script != !module)
		return 0;
	char buf[512];
	snprintf(err, errlen,
		 "%s: [%s] plugin = python: give script = FILE.py or module = NAME (%s)",
		 place_of(c, s, script ? "module" : "plugin", buf, sizeof buf), name,
		 script ? "one of them, not both" : "neither is given");
	return -1;
}

int python_check_sources(const struct cfg *c, char *err, size_t errlen)
{
	if (check_source(c, &c->worker, "worker", err, errlen) < 0 ||
	    check_source(c, &c->generator, "generator", err, errlen) < 0 ||
	    check_source(c, &c->sink, "sink", err, errlen) < 0)
		return -1;
	for (size_t i = 0; i < c->n_stages; i++) {
		char name[128];
		snprintf(name, sizeof name, "stage.%s", c->stages[i].name);
		if (check_source(c, &c->stages[i].sec, name, err, errlen) < 0)
			return -1;
	}
	return 0;
}

static bool is_file(const char *p, bool exec)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && (!exec || access(p, X_OK) == 0);
}

/* `name` looked up on PATH (malloc'd), or NULL. */
static char *on_path(const char *name)
{
	const char *path = getenv("PATH");
	char *copy = strdup(path ? path : "/usr/bin:/bin"), *save = NULL, *found = NULL;
	for (char *d = strtok_r(copy, ":", &save); d && !found; d = strtok_r(NULL, ":", &save)) {
		char *p;
		if (asprintf(&p, "%s/%s", *d ? d : ".", name) < 0)
			break;
		if (is_file(p, true))
			found = p;
		else
			free(p);
	}
	free(copy);
	return found;
}

/* The interpreter of an environment folder (a venv, a conda env, an installation
 * prefix): bin/python3, else bin/python (malloc'd); NULL when it has neither. */
static char *in_folder(const char *dir)
{
	static const char *const names[] = {"bin/python3", "bin/python", NULL};
	for (const char *const *n = names; *n; n++) {
		char *p;
		if (asprintf(&p, "%s/%s", dir, *n) < 0)
			return NULL;
		if (is_file(p, true))
			return p;
		free(p);
	}
	return NULL;
}

/* Runs argv (argv[0] the interpreter) for `limit_s` seconds at most, standard input
 * /dev/null; its standard output and error, malloc'd, and its wait status in *status;
 * NULL with err when it could not run or did not end in time. */
static char *run_python(char *const *argv, int limit_s, int *status, char *err, size_t errlen)
{
	const char *exe = argv[0];
	int fd[2];
	if (pipe2(fd, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot make a pipe: %s", strerror(errno));
		return NULL;
	}
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, fd[1], 1);
	posix_spawn_file_actions_adddup2(&fa, fd[1], 2);
	extern char **environ;
	pid_t pid;
	int rc = posix_spawn(&pid, exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(fd[1]);
	if (rc != 0) {
		close(fd[0]);
		snprintf(err, errlen, "cannot run it: %s", strerror(rc));
		return NULL;
	}
	size_t cap = 1 << 16, n = 0;
	char *out = malloc(cap + 1);
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	bool timed_out = false;
	while (out) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = limit_s * 1000L - ((now.tv_sec - t0.tv_sec) * 1000 +
					       (now.tv_nsec - t0.tv_nsec) / 1000000);
		struct pollfd p = {.fd = fd[0], .events = POLLIN};
		int r = left > 0 ? poll(&p, 1, (int)left) : 0;
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			timed_out = r == 0;
			break;
		}
		ssize_t got = read(fd[0], out + n, cap - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		n += (size_t)got;
		if (n == cap)
			break; /* more than any Python says: what came is enough to judge */
	}
	close(fd[0]);
	if (timed_out || !out)
		kill(pid, SIGKILL);
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	if (!out) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (timed_out) {
		free(out);
		snprintf(err, errlen, "it did not answer within %d s", limit_s);
		return NULL;
	}
	out[n] = '\0';
	return out;
}

/* What makes an interpreter's answer: the path it was started by (a venv's python is a
 * link to the base one), the file it runs, a venv's pyvenv.cfg beside it, and the
 * variables that move its prefix or site-packages. */
struct ask_key {
	char text[6144];
};

static void ask_key_of(const char *exe, struct ask_key *k)
{
	/* The interpreter is a path by now (PATH was searched before): only what moves
	 * its prefix or site-packages. */
	static const char *const vars[] = {"PYTHONHOME", "PYTHONPATH", "PYTHONNOUSERSITE",
					   "PYTHONUSERBASE", "PYTHONPLATLIBDIR"};
	struct stat st = {0}, cfg = {0};
	char venv[4096];
	const char *slash = strrchr(exe, '/');
	int dir = slash ? (int)(slash - exe) : 0;
	snprintf(venv, sizeof venv, "%.*s/../pyvenv.cfg", dir, exe);
	(void)stat(exe, &st);
	(void)stat(venv, &cfg);
	int n = snprintf(k->text, sizeof k->text, "%s|%ju:%ju:%jd.%ld:%jd|%jd.%ld:%jd", exe,
			 (uintmax_t)st.st_dev, (uintmax_t)st.st_ino, (intmax_t)st.st_mtim.tv_sec,
			 st.st_mtim.tv_nsec, (intmax_t)st.st_size, (intmax_t)cfg.st_mtim.tv_sec,
			 cfg.st_mtim.tv_nsec, (intmax_t)cfg.st_size);
	for (size_t i = 0; i < sizeof vars / sizeof *vars && n > 0 && (size_t)n < sizeof k->text;
	     i++) {
		const char *v = getenv(vars[i]);
		n += snprintf(k->text + n, sizeof k->text - (size_t)n, "|%s", v ? v : "-");
	}
}

/* The last answer, kept for the life of the process: a program that runs job after job
 * (a Dispatcher's run() in a loop) asks its interpreter once, not every time (a Python's
 * start is 30-40 ms). Asked again whenever anything in its key changed. */
static struct {
	struct ask_key key;
	char *out;
	int status;
} last_ask;

/* Runs `exe -c ask_script` (30 s at most), as run_python; a copy of the last answer when
 * nothing in ask_key changed since. */
static char *ask(const char *exe, int *status, char *err, size_t errlen)
{
	struct ask_key key;
	ask_key_of(exe, &key);
	if (last_ask.out && strcmp(last_ask.key.text, key.text) == 0) {
		*status = last_ask.status;
		char *copy = strdup(last_ask.out);
		if (!copy)
			snprintf(err, errlen, "out of memory");
		return copy;
	}
	char *argv[] = {(char *)exe, "-c", (char *)ask_script, NULL};
	char *out = run_python(argv, 30, status, err, errlen);
	free(last_ask.out);
	last_ask.out = NULL;
	if (out && WIFEXITED(*status) && WEXITSTATUS(*status) == 0 &&
	    (last_ask.out = strdup(out))) {
		last_ask.key = key;
		last_ask.status = *status;
	}
	return out;
}

/* The shared libpython an interpreter's answer names, malloc'd; NULL when it has none. */
static char *find_library(char *const *f, int major, int minor)
{
	const char *libdir = f[F_LIBDIR], *abi = f[F_ABI] ? f[F_ABI] : "";
	char *cand[8] = {0};
	int n = 0;
	if (libdir && strcmp(libdir, "None") != 0) {
		if (f[F_SONAME] && strcmp(f[F_SONAME], "None") != 0 && strstr(f[F_SONAME], ".so"))
			asprintf(&cand[n++], "%s/%s", libdir, f[F_SONAME]);
		if (f[F_LDLIB] && strstr(f[F_LDLIB], ".so"))
			asprintf(&cand[n++], "%s/%s", libdir, f[F_LDLIB]);
		asprintf(&cand[n++], "%s/libpython%d.%d%s.so.1.0", libdir, major, minor, abi);
		asprintf(&cand[n++], "%s/libpython%d.%d%s.so", libdir, major, minor, abi);
	}
	/* conda's and some relocated builds: LIBDIR names the build machine's folder. */
	asprintf(&cand[n++], "%s/lib/libpython%d.%d%s.so.1.0", f[F_BASE], major, minor, abi);
	asprintf(&cand[n++], "%s/lib/libpython%d.%d%s.so", f[F_BASE], major, minor, abi);
	char *found = NULL;
	for (int i = 0; i < n; i++) {
		if (!found && cand[i] && is_file(cand[i], false))
			found = cand[i];
		else
			free(cand[i]);
	}
	return found;
}

static void forget(void)
{
	for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) {
		free(owned[i]);
		owned[i] = NULL;
	}
	have_chosen = false;
	chosen = (struct python_choice){0};
}

/* The interpreter's answer did not come (it exited or died first): err says what its
 * first line says it is instead. */
static void not_a_python(const char *exe, const char *what, char *out, int status, char *err,
			 size_t errlen)
{
	char *line = out;
	while (*line == '\n')
		line++;
	line[strcspn(line, "\n")] = '\0';
	char how[64];
	if (WIFEXITED(status))
		snprintf(how, sizeof how, "exited %d", WEXITSTATUS(status));
	else
		snprintf(how, sizeof how, "killed by signal %d", WTERMSIG(status));
	snprintf(err, errlen,
		 "%s: %s is not a Python interpreter (asked with -c, it %s%s%.60s%s); give an "
		 "interpreter (.../bin/python3) or an environment folder (a venv, a conda env)",
		 what, exe, how, *line ? ": \"" : "", line, *line ? "...\"" : "");
}

/* Its answer's "name=value" lines into f[] (pointing into body). */
static void read_answer(char *body, char *f[F_N])
{
	for (char *save = NULL, *l = strtok_r(body, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(l, '=');
		if (!eq)
			continue;
		*eq = '\0';
		for (int i = 0; i < F_N; i++)
			if (strcmp(l, field_names[i]) == 0)
				f[i] = eq + 1;
	}
}

/* A Python the python plugins can embed: CPython 3.9 to 3.13, not free-threaded, with a
 * shared libpython (*lib, malloc'd). 0, or -1 with err. */
static int usable(const char *exe, const char *what, char *f[F_N], char **lib, char *err,
		  size_t errlen)
{
	int major = 0, minor = 0;
	if (!f[F_EXE] || !f[F_PREFIX] || !f[F_BASE] || !f[F_VERSION] ||
	    sscanf(f[F_VERSION], "%d.%d", &major, &minor) != 2) {
		snprintf(err, errlen, "%s: %s answered like no Python gpud knows", what, exe);
		return -1;
	}
	const char *fix = "choose one with [job] python = PATH (an interpreter or a venv "
			  "folder), $VIRTUAL_ENV or $CONDA_PREFIX";
	if (f[F_IMPL] && strcmp(f[F_IMPL], "cpython") != 0) {
		snprintf(
			err, errlen,
			"%s: %s is %s %s, not CPython: the python plugins embed CPython 3.9 to 3.13; %s",
			what, exe, f[F_IMPL], f[F_VERSION], fix);
		return -1;
	}
	if (major != 3 || minor < 9 || minor > 13) {
		snprintf(err, errlen,
			 "%s: %s is Python %s: the python plugins need CPython 3.9 to 3.13 "
			 "(with a shared libpython); %s",
			 what, exe, f[F_VERSION], fix);
		return -1;
	}
	if ((f[F_ABI] && strchr(f[F_ABI], 't')) || (f[F_NOGIL] && strcmp(f[F_NOGIL], "1") == 0)) {
		snprintf(err, errlen,
			 "%s: %s is Python %s built free-threaded (no GIL), which has no stable "
			 "ABI for the python plugins; use the regular build of it",
			 what, exe, f[F_VERSION]);
		return -1;
	}
	*lib = find_library(f, major, minor);
	if (!*lib) {
		snprintf(err, errlen,
			 "%s: %s is Python %s without a shared libpython (none in %s): the "
			 "python plugins load it into gpud; use a Python built with "
			 "--enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared; "
			 "conda, uv and Debian's libpython%d.%d have one)",
			 what, exe, f[F_VERSION], f[F_LIBDIR] ? f[F_LIBDIR] : f[F_BASE], major,
			 minor);
		return -1;
	}
	return 0;
}

/* Keeps the answer f[] (and lib, taken over) as the choice. 0, or -1 out of memory. */
static int keep(char *f[F_N], char *lib, const char *source)
{
	forget();
	char *env;
	if (strcmp(f[F_PREFIX], f[F_BASE]) != 0)
		asprintf(&env, "venv %s", f[F_PREFIX]);
	else if (getenv("CONDA_PREFIX") && strcmp(getenv("CONDA_PREFIX"), f[F_PREFIX]) == 0)
		asprintf(&env, "conda env %s", f[F_PREFIX]);
	else
		asprintf(&env, "no venv, prefix %s", f[F_PREFIX]);
	owned[0] = strdup(f[F_EXE]);
	owned[1] = strdup(f[F_VERSION]);
	owned[2] = strdup(f[F_PREFIX]);
	owned[3] = strdup(f[F_BASE]);
	owned[4] = lib;
	owned[5] = strdup(f[F_SITE] ? f[F_SITE] : "");
	owned[6] = env;
	owned[7] = strdup(source);
	for (int i = 0; i < 8; i++)
		if (!owned[i]) {
			forget();
			return -1;
		}
	chosen = (struct python_choice){owned[0], owned[1], owned[2], owned[3],
					owned[4], owned[5], owned[6], owned[7]};
	have_chosen = true;
	return 0;
}

/* Asks `exe` and keeps its answer as the choice; -1 with err (after "what: "). */
static int take(const char *exe, const char *what, const char *source, char *err, size_t errlen)
{
	char why[512];
	int status = 0;
	char *out = ask(exe, &status, why, sizeof why);
	if (!out) {
		snprintf(err, errlen, "%s: %s: %s; %s is not a Python interpreter gpud can use",
			 what, exe, why, exe);
		return -1;
	}
	char *f[F_N] = {0};
	char *lib = NULL;
	char *body = strstr(out, "gpud-python-ask\n");
	int rc = -1;
	if (!body || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		not_a_python(exe, what, out, status, err, errlen);
	} else {
		read_answer(body, f);
		if (usable(exe, what, f, &lib, err, errlen) == 0) {
			rc = keep(f, lib, source);
			if (rc < 0)
				snprintf(err, errlen, "%s: out of memory", what);
		}
	}
	free(out);
	return rc;
}

/* An interpreter path or an environment folder, as the user gave it: its interpreter
 * (malloc'd), or NULL with err. */
static char *interpreter_of(const char *given, const char *what, char *err, size_t errlen)
{
	struct stat st;
	if (!strchr(given, '/')) {
		char *p = on_path(given);
		if (!p)
			snprintf(err, errlen, "%s: no %s on PATH", what, given);
		return p;
	}
	if (stat(given, &st) < 0) {
		snprintf(err, errlen,
			 "%s: %s: %s; give a Python interpreter (.../bin/python3) or an "
			 "environment folder (a venv, a conda env)",
			 what, given, strerror(errno));
		return NULL;
	}
	if (S_ISDIR(st.st_mode)) {
		char *p = in_folder(given);
		if (!p)
			snprintf(err, errlen,
				 "%s: %s is a folder without bin/python3 or bin/python: not a "
				 "Python environment (a venv, a conda env)",
				 what, given);
		return p;
	}
	if (!S_ISREG(st.st_mode) || access(given, X_OK) != 0) {
		snprintf(err, errlen, "%s: %s is not an executable file: not a Python interpreter",
			 what, given);
		return NULL;
	}
	return strdup(given);
}

const struct python_choice *python_choose(const struct cfg *c, char *err, size_t errlen)
{
	char what[1024];
	const char *given = NULL;
	if (c && c->python) {
		snprintf(what, sizeof what, "[job] python = %s (%s)", c->python,
			 c->python_at ? c->python_at : c->path);
		given = c->python;
	} else if (getenv("VIRTUAL_ENV") && *getenv("VIRTUAL_ENV")) {
		snprintf(what, sizeof what, "$VIRTUAL_ENV");
		given = getenv("VIRTUAL_ENV");
	} else if (getenv("CONDA_PREFIX") && *getenv("CONDA_PREFIX")) {
		snprintf(what, sizeof what, "$CONDA_PREFIX");
		given = getenv("CONDA_PREFIX");
	}
	char *exe = NULL;
	if (given) {
		exe = interpreter_of(given, what, err, errlen);
		if (!exe)
			return NULL;
	} else if ((exe = on_path("python3"))) {
		snprintf(what, sizeof what, "python3 on PATH");
	} else if (*GPUD_BUILT_PYTHON && is_file(GPUD_BUILT_PYTHON, true)) {
		snprintf(what, sizeof what, "the Python gpud was built with");
		exe = strdup(GPUD_BUILT_PYTHON);
	} else {
		snprintf(err, errlen,
			 "the python plugins need a Python and none was found: no [job] python, "
			 "$VIRTUAL_ENV, $CONDA_PREFIX or python3 on PATH%s%s",
			 *GPUD_BUILT_PYTHON ? ", and not " : "", GPUD_BUILT_PYTHON);
		return NULL;
	}
	int rc = take(exe, what, what, err, errlen);
	free(exe);
	if (rc < 0)
		return NULL;
	/* The plugins in this process and in every worker (which inherit the environment)
	 * load this one: plugins/python/stub.c. */
	if (setenv("GPUD_PYTHON_LIBRARY", chosen.library, 1) < 0 ||
	    setenv("GPUD_PYTHON_EXECUTABLE", chosen.executable, 1) < 0) {
		snprintf(err, errlen, "cannot set the environment: %s", strerror(errno));
		forget();
		return NULL;
	}
	return &chosen;
}

void python_describe(const struct python_choice *p, char *buf, size_t len)
{
	snprintf(buf, len, "Python %s (%s, %s; from %s)", p->version, p->executable, p->env,
		 p->source);
}

/* `gpud check --import`: run by the chosen Python in a process of its own, it loads each
 * python section's script or module as the plugins would and checks what the job names
 * in it against the keys the job gives (python_import.py says how, and its arguments). */
#include "python_import_py.h" /* import_script[]: python_import.py, embedded at build time */

/* "PREFIX" and the names joined by commas, as one argument; NULL when out of memory. */
static char *joined(const char *prefix, const char *const *names)
{
	size_t len = strlen(prefix) + 1;
	for (const char *const *n = names; *n; n++)
		len += strlen(*n) + 1;
	char *s = malloc(len);
	if (!s)
		return NULL;
	char *e = stpcpy(s, prefix);
	for (const char *const *n = names; *n; n++)
		e = stpcpy(stpcpy(e, n == names ? "" : ","), *n);
	return s;
}

int python_check_import(const struct cfg *c, FILE *out)
{
	const struct python_choice *p = python_chosen();
	if (!p)
		return 0;
	const struct cfg_section *secs[] = {&c->worker, &c->generator, &c->sink};
	const char *kinds[] = {"worker", "generator", "sink"};
	static const char *const callbacks[] = {PY_SINK_CALLBACKS, NULL};
	const char *const *keys[] = {py_worker_keys, py_generator_keys, py_sink_keys};
	size_t n = 4 + 4;
	for (int i = 0; i < 3; i++)
		n += 1 + secs[i]->count;
	for (size_t i = 0; i < c->n_stages; i++)
		n += 1 + c->stages[i].sec.count;
	char **argv = calloc(n + 1, sizeof *argv), **owned_args = calloc(n + 1, sizeof *argv);
	size_t k = 0, o = 0;
	int rc = -1;
	if (!argv || !owned_args) {
		fprintf(LOG_ERR, "gpud: out of memory\n");
		goto out;
	}
	argv[k++] = (char *)p->executable;
	argv[k++] = "-c";
	argv[k++] = (char *)import_script;
	argv[k++] = (char *)gpud_module_source;
	for (int i = 0; i < 3; i++) { /* the plugins' own keys (py_keys.h) */
		char prefix[32];
		snprintf(prefix, sizeof prefix, "--keys=%s=", kinds[i]);
		if (!(owned_args[o] = joined(prefix, keys[i])))
			goto oom;
		argv[k++] = owned_args[o++];
	}
	if (!(owned_args[o] = joined("--callbacks=", callbacks)))
		goto oom;
	argv[k++] = owned_args[o++];
	for (int i = 0; i < 3; i++) {
		if (!is_python_spec(secs[i]->plugin, kinds[i]))
			continue;
		if (asprintf(&owned_args[o], "--section=%s", kinds[i]) < 0)
			goto oom;
		argv[k++] = owned_args[o++];
		for (size_t j = 0; j < secs[i]->count; j++) {
			if (asprintf(&owned_args[o], "%s=%s", secs[i]->kv[j].key,
				     secs[i]->kv[j].value) < 0)
				goto oom;
			argv[k++] = owned_args[o++];
		}
	}
	for (size_t i = 0; i < c->n_stages; i++) { /* [stage.NAME]: worker plugins */
		const struct cfg_section *sec = &c->stages[i].sec;
		if (!is_python_spec(sec->plugin, "worker"))
			continue;
		if (asprintf(&owned_args[o], "--section=stage.%s", c->stages[i].name) < 0)
			goto oom;
		argv[k++] = owned_args[o++];
		for (size_t j = 0; j < sec->count; j++) {
			if (asprintf(&owned_args[o], "%s=%s", sec->kv[j].key, sec->kv[j].value) < 0)
				goto oom;
			argv[k++] = owned_args[o++];
		}
	}
	char why[512];
	int status = 0;
	char *said = run_python(argv, 120, &status, why, sizeof why);
	if (!said) {
		fprintf(LOG_ERR, "gpud: %s: --import: %s: %s\n", c->path, p->executable, why);
		goto out;
	}
	/* Its verdicts; what else it printed (the user's module at import) is left out. */
	int errors = 0, oks = 0;
	for (char *line = strtok(said, "\n"); line; line = strtok(NULL, "\n")) {
		if (!strncmp(line, "gpud-import-error: ", 19)) {
			fprintf(LOG_ERR, "gpud: %s: %s\n", c->path, line + 19);
			errors++;
		} else if (!strncmp(line, "gpud-import-ok: ", 16)) {
			fprintf(out, "  import: %s\n", line + 16);
			oks++;
		}
	}
	free(said);
	if (!errors && (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || !oks)) {
		fprintf(LOG_ERR, "gpud: %s: --import: %s did not finish the check (%s)\n", c->path,
			p->executable,
			WIFSIGNALED(status) ? strsignal(WTERMSIG(status)) : "it exited early");
		errors++;
	}
	rc = errors ? -1 : 0;
	goto out;
oom:
	fprintf(LOG_ERR, "gpud: out of memory\n");
out:
	for (size_t i = 0; owned_args && i < o; i++)
		free(owned_args[i]);
	free(owned_args);
	free(argv);
	return rc;
}
