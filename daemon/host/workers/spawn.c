/* SPDX-License-Identifier: MIT */
/* Starting worker processes: posix_spawn of gpud-worker, never a bare fork, so no
 * state of the host (CUDA least of all) reaches a worker. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>
#include <pthread.h>
#include <time.h>

#include "job/groups.h"
#include "workers/spawner.h"
#include "wait.h"

extern char **environ;

/* The host's environment minus the variables a worker gets its own of, plus those. */
static char **worker_env(const struct host *h, const struct host_worker *w, char *own[4],
			 bool prefix)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 6, sizeof *env);
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) == 0 ||
		    strncmp(environ[i], "GPUD_GPU_ID=", 12) == 0 ||
		    strncmp(environ[i], "GPUD_GPU_IDS=", 13) == 0 ||
		    strncmp(environ[i], "GPUD_WORKER_ID=", 15) == 0 ||
		    strncmp(environ[i], "GPUD_OUTPUT_PREFIX=", 19) == 0)
			continue;
		env[k++] = environ[i];
	}
	/* Its group's GPUs (job/groups.h): one with gpus_per_worker = 1. A CPU stage's
	 * worker sees none. */
	size_t g = (size_t)w->index / h->cfg->workers_per_gpu;
	char ids[2048] = ""; /* 256 ids of 7 bytes at most */
	char *cvd = w->gpu_id < 0 ? strdup("") : groups_visible(h->cfg, g);
	if (!cvd || asprintf(&own[0], "CUDA_VISIBLE_DEVICES=%s", cvd) < 0 ||
	    asprintf(&own[1], "GPUD_GPU_ID=%d", w->gpu_id) < 0 ||
	    asprintf(&own[2], "GPUD_WORKER_ID=%d", w->index) < 0 ||
	    asprintf(&own[3], "GPUD_GPU_IDS=%s",
		     w->gpu_id < 0 ? "" : groups_ids(h->cfg, g, ids, sizeof ids)) < 0) {
		free(cvd);
		free(env);
		return NULL;
	}
	free(cvd);
	for (int i = 0; i < 4; i++)
		env[k++] = own[i];
	if (prefix)
		env[k++] = "GPUD_OUTPUT_PREFIX=1";
	env[k] = NULL;
	return env;
}

/* One posix_spawn for the spawner thread to make. */
struct spawn_call {
	pid_t *pid;
	const char *path;
	const posix_spawn_file_actions_t *fa;
	const posix_spawnattr_t *attr;
	char *const *argv, *const *env;
	int rc;
	bool done;
};

struct spawn_thread {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct spawn_call *call; /* the one to make, NULL none */
	bool quit;
};

static void *spawn_thread_main(void *arg)
{
	struct spawn_thread *st = arg;
	pthread_mutex_lock(&st->lock);
	for (;;) {
		while (!st->call && !st->quit)
			pthread_cond_wait(&st->cond, &st->lock);
		if (!st->call)
			break;
		struct spawn_call *c = st->call;
		c->rc = posix_spawn(c->pid, c->path, c->fa, c->attr, c->argv, c->env);
		c->done = true;
		st->call = NULL;
		pthread_cond_broadcast(&st->cond);
	}
	pthread_mutex_unlock(&st->lock);
	return NULL;
}

struct spawn_thread *spawn_thread_start(void)
{
	struct spawn_thread *st = calloc(1, sizeof *st);
	if (!st)
		return NULL;
	pthread_mutex_init(&st->lock, NULL);
	pthread_cond_init(&st->cond, NULL);
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old); /* the caller's handlers run elsewhere */
	int e = pthread_create(&st->thread, NULL, spawn_thread_main, st);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (e) {
		pthread_cond_destroy(&st->cond);
		pthread_mutex_destroy(&st->lock);
		free(st);
		errno = e;
		return NULL;
	}
	return st;
}

void spawn_thread_stop(struct spawn_thread *st)
{
	if (!st)
		return;
	pthread_mutex_lock(&st->lock);
	st->quit = true;
	pthread_cond_broadcast(&st->cond);
	pthread_mutex_unlock(&st->lock);
	pthread_join(st->thread, NULL);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->lock);
	free(st);
}

/* posix_spawn, on the spawner thread when there is one. */
static int spawn_on(struct spawn_thread *st, struct spawn_call *c)
{
	if (!st)
		return posix_spawn(c->pid, c->path, c->fa, c->attr, c->argv, c->env);
	pthread_mutex_lock(&st->lock);
	while (st->call)
		pthread_cond_wait(&st->cond, &st->lock);
	st->call = c;
	pthread_cond_broadcast(&st->cond);
	while (!c->done)
		pthread_cond_wait(&st->cond, &st->lock);
	pthread_mutex_unlock(&st->lock);
	return c->rc;
}

void spawn_kill(pid_t pid, int sig)
{
	kill(-pid, sig);
	kill(pid, sig);
}

int spawn_worker(struct host *h, struct host_worker *w)
{
	char idx_arg[16], pid_arg[24];
	char *own[4] = {NULL, NULL, NULL, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, dfl;
	int rc;

	snprintf(idx_arg, sizeof idx_arg, "%d", (int)(w - h->pool.w));
	snprintf(pid_arg, sizeof pid_arg, "%ld", (long)getpid());
	char stage_arg[16];
	snprintf(stage_arg, sizeof stage_arg, "%u", w->stage);
	/* A CPU stage's worker is told its stage: its plugin and keys in the config blob */
	char *argv[] = {h->pool.exe,
			"--run",
			idx_arg,
			pid_arg,
			w->stage < h->pool.n_stages ? "--stage" : NULL,
			stage_arg,
			NULL};
	char **env = worker_env(h, w, own, h->view.mode == UI_PLAIN);
	if (!env)
		return -ENOMEM;

	/* Exactly the descriptors it needs (shm_layout.h), nothing else of ours: not the
	 * sink's output, not the generator's input, not the run memfd's writable twin. */
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, h->shm.ro_fd, SHM_FD_RUN);
	posix_spawn_file_actions_adddup2(&fa, w->out_fd, SHM_FD_OUT);
	posix_spawn_file_actions_adddup2(&fa, h->shm.bell_fd, SHM_FD_BELL);
	posix_spawn_file_actions_adddup2(&fa, h->shm.pipe[0], SHM_FD_HOST);
	/* A worker's output never goes to our standard output, which may be the sink's
	 * stream. With the dashboard it goes to a log file per worker; otherwise to our
	 * standard error (in plain mode the worker prefixes each line with its id). */
	if (h->view.mode == UI_DASHBOARD && w->log_fd >= 0) {
		posix_spawn_file_actions_adddup2(&fa, w->log_fd, 1);
		posix_spawn_file_actions_adddup2(&fa, w->log_fd, 2);
	} else {
		posix_spawn_file_actions_adddup2(&fa, 2, 1);
	}
	posix_spawn_file_actions_addclosefrom_np(&fa, SHM_FD_HOST + 1);
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigfillset(&dfl);
	sigdelset(&dfl, SIGKILL);
	sigdelset(&dfl, SIGSTOP);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &dfl);
	/* Its own process group: it and whatever it starts are killed together, and
	 * signals for the job reach only the host. */
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
						POSIX_SPAWN_SETPGROUP);

	struct spawn_call call = {.pid = &w->pid,
				  .path = h->pool.exe,
				  .fa = &fa,
				  .attr = &attr,
				  .argv = argv,
				  .env = env};
	rc = spawn_on(h->pool.spawner, &call);

	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	for (int i = 0; i < 4; i++)
		free(own[i]);
	if (rc != 0) {
		w->pid = -1;
		return -rc;
	}
	w->spawned_ns = wait_now_ns();
	UI_SET(w->state, HW_STARTING);
	return 0;
}

/* Appends what fd has to say to buf (keeping a NUL-terminated prefix of at most len-1
 * bytes, reading and dropping the rest). Returns 0 at end of file, 1 otherwise. */
static int take(int fd, char *buf, size_t len, size_t *used)
{
	char sink[4096];
	ssize_t r;
	if (*used + 1 < len)
		r = read(fd, buf + *used, len - *used - 1);
	else
		r = read(fd, sink, sizeof sink);
	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return 1;
	if (r <= 0)
		return 0;
	if (*used + 1 < len)
		*used += (size_t)r;
	return 1;
}

/* Runs gpud-worker with `args` and waits for it, at most SPAWN_HELPER_TIMEOUT_S: its
 * standard output lands in out, its standard error in err (trailing newlines cut), both
 * read together so neither can fill up and stall it. Returns 0 when it exited 0.
 * *answered (when not NULL): whether it ran and exited by itself, whatever its status
 * (not: it could not start, was killed, or did not answer in time). */
static int spawn_helper(const char *worker_exe, char *const args[], char *out, size_t outlen,
			char *err, size_t errlen, bool *answered)
{
	if (answered)
		*answered = false;
	int po[2], pe[2];
	pid_t pid;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	char *argv[4] = {(char *)worker_exe, args[0], args[1], NULL};

	if (pipe2(po, O_CLOEXEC) < 0)
		goto pipe_failed;
	if (pipe2(pe, O_CLOEXEC) < 0) {
		close(po[0]);
		close(po[1]);
		goto pipe_failed;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	posix_spawnattr_init(&attr);
	posix_spawnattr_setpgroup(&attr, 0);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
	int rc = posix_spawn(&pid, worker_exe, &fa, &attr, argv, environ);
	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	if (rc != 0) {
		close(po[0]);
		close(pe[0]);
		snprintf(err, errlen, "gpud: cannot start %s: %s", worker_exe, strerror(rc));
		return -1;
	}
	size_t used[2] = {0, 0};
	char *bufs[2] = {out, err};
	size_t lens[2] = {outlen, errlen};
	struct pollfd pf[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
	uint64_t deadline = wait_now_ns() + (uint64_t)SPAWN_HELPER_TIMEOUT_S * 1000000000u;
	bool timed_out = false;
	while (pf[0].fd >= 0 || pf[1].fd >= 0) {
		uint64_t now = wait_now_ns();
		if (now >= deadline) {
			timed_out = true;
			break;
		}
		int n = poll(pf, 2, (int)((deadline - now) / 1000000u) + 1);
		if (n < 0 && errno != EINTR)
			break;
		for (int k = 0; k < 2 && n > 0; k++) {
			if (pf[k].fd >= 0 && pf[k].revents &&
			    !take(pf[k].fd, bufs[k], lens[k], &used[k])) {
				close(pf[k].fd);
				pf[k].fd = -1;
			}
		}
	}
	for (int k = 0; k < 2; k++) {
		if (pf[k].fd >= 0)
			close(pf[k].fd);
		while (used[k] && bufs[k][used[k] - 1] == '\n')
			used[k]--;
		bufs[k][used[k]] = '\0';
	}
	if (timed_out)
		spawn_kill(pid, SIGKILL);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (timed_out) {
		snprintf(err, errlen, "%s %s %s: no answer within %d s; killed", worker_exe,
			 args[0], args[1] ? args[1] : "", SPAWN_HELPER_TIMEOUT_S);
		return -1;
	}
	if (answered)
		*answered = WIFEXITED(status);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	if (!err[0]) {
		if (WIFSIGNALED(status))
			snprintf(err, errlen, "%s %s %s: killed by %s", worker_exe, args[0],
				 args[1] ? args[1] : "", strsignal(WTERMSIG(status)));
		else
			snprintf(err, errlen, "%s %s %s: failed", worker_exe, args[0],
				 args[1] ? args[1] : "");
	}
	return -1;

pipe_failed:
	snprintf(err, errlen, "gpud: pipe: %s", strerror(errno));
	return -1;
}

int spawn_check_worker_plugin(const char *worker_exe, const char *plugin, char *out, size_t outlen,
			      char *err, size_t errlen)
{
	char *args[] = {"--check", (char *)plugin};
	return spawn_helper(worker_exe, args, out, outlen, err, errlen, NULL);
}

/* The devices a process can see do not change while it lives, except by the variables
 * that choose them or a new gpud-worker: the last count is kept with those, so a program
 * that runs job after job (a Dispatcher's run() in a loop) starts CUDA in a helper once,
 * not every time (tens of milliseconds without a GPU, more with one). */
static struct {
	char key[4608];
	char out[64 * 1024];
	char err[1024];
	int rc;
	bool have;
} last_count;

static void count_key(const char *worker_exe, char *key, size_t len)
{
	struct stat st = {0};
	const char *visible = getenv("CUDA_VISIBLE_DEVICES"), *order = getenv("CUDA_DEVICE_ORDER");
	(void)stat(worker_exe, &st);
	snprintf(key, len, "%s|%ju:%ju:%jd.%ld|%s|%s", worker_exe, (uintmax_t)st.st_dev,
		 (uintmax_t)st.st_ino, (intmax_t)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
		 visible ? visible : "-", order ? order : "-");
}

int spawn_count_gpus(const char *worker_exe, char (*bus_ids)[SPAWN_BUS_ID], size_t max, char *err,
		     size_t errlen)
{
	char key[sizeof last_count.key];
	char *out = last_count.out;
	count_key(worker_exe, key, sizeof key);
	if (!last_count.have || strcmp(key, last_count.key) != 0) {
		char *args[] = {"--count-gpus", NULL};
		bool answered;
		last_count.err[0] = '\0';
		last_count.rc = spawn_helper(worker_exe, args, out, sizeof last_count.out,
					     last_count.err, sizeof last_count.err, &answered);
		snprintf(last_count.key, sizeof last_count.key, "%s", key);
		/* Kept: a count, or the helper's own answer that there is none. Not kept:
		 * what went wrong around it (no start, a kill, no answer in time). */
		last_count.have = answered;
	}
	if (last_count.rc < 0) {
		snprintf(err, errlen, "%s", last_count.err);
		return -1;
	}
	int n = atoi(out);
	char *line = strchr(out, '\n');
	for (size_t i = 0; bus_ids && line && i < max && (int)i < n; i++) {
		char *end = strchr(++line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		if (len < SPAWN_BUS_ID && !(len == 1 && line[0] == '-')) {
			memcpy(bus_ids[i], line, len);
			bus_ids[i][len] = '\0';
		}
		line = end;
	}
	return n;
}

int spawn_describe(const char *worker_exe, const char *plugin, char *out, size_t outlen, char *err,
		   size_t errlen)
{
	char *args[] = {"--describe", (char *)plugin};
	return spawn_helper(worker_exe, args, out, outlen, err, errlen, NULL);
}
