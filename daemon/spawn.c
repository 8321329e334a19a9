/* SPDX-License-Identifier: MIT */
/* Starting worker processes: posix_spawn of gpud-worker, never a bare fork, so no
 * state of the host (CUDA least of all) reaches a worker. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host.h"

extern char **environ;

/* The host's environment minus the variables a worker gets its own of, plus those. */
static char **worker_env(const struct host_worker *w, char *own[3], bool prefix)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 5, sizeof *env);
	if (!env)
		return NULL;
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "CUDA_VISIBLE_DEVICES=", 21) == 0 ||
		    strncmp(environ[i], "GPUD_GPU_ID=", 12) == 0 ||
		    strncmp(environ[i], "GPUD_WORKER_ID=", 15) == 0 ||
		    strncmp(environ[i], "GPUD_OUTPUT_PREFIX=", 19) == 0)
			continue;
		env[k++] = environ[i];
	}
	if (asprintf(&own[0], "CUDA_VISIBLE_DEVICES=%d", w->gpu_id) < 0 ||
	    asprintf(&own[1], "GPUD_GPU_ID=%d", w->gpu_id) < 0 ||
	    asprintf(&own[2], "GPUD_WORKER_ID=%d", w->index) < 0) {
		free(env);
		return NULL;
	}
	env[k++] = own[0];
	env[k++] = own[1];
	env[k++] = own[2];
	if (prefix)
		env[k++] = "GPUD_OUTPUT_PREFIX=1";
	env[k] = NULL;
	return env;
}

int spawn_worker(struct host *h, struct host_worker *w)
{
	char fd_arg[16], idx_arg[16], pid_arg[24];
	char *own[3] = {NULL, NULL, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none, dfl;
	int rc;

	snprintf(fd_arg, sizeof fd_arg, "3");
	snprintf(idx_arg, sizeof idx_arg, "%d", (int)(w - h->w));
	snprintf(pid_arg, sizeof pid_arg, "%ld", (long)getpid());
	char *argv[] = {h->worker_exe, "--run", fd_arg, idx_arg, pid_arg, NULL};
	char **env = worker_env(w, own, h->ui_mode == UI_PLAIN);
	if (!env)
		return -ENOMEM;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, h->shm_fd, 3);
	/* A worker's output never goes to our standard output, which may be the sink's
	 * stream. With the dashboard it goes to a log file per worker; otherwise to our
	 * standard error (in plain mode the worker prefixes each line with its id). */
	char log[4096];
	if (h->ui_mode == UI_DASHBOARD && h->log_dir) {
		snprintf(log, sizeof log, "%s/worker-%d.log", h->log_dir, w->index);
		posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0666);
		posix_spawn_file_actions_adddup2(&fa, 1, 2);
	} else {
		posix_spawn_file_actions_adddup2(&fa, 2, 1);
	}
	posix_spawnattr_init(&attr);
	sigemptyset(&none);
	sigfillset(&dfl);
	sigdelset(&dfl, SIGKILL);
	sigdelset(&dfl, SIGSTOP);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &dfl);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

	rc = posix_spawn(&w->pid, h->worker_exe, &fa, &attr, argv, env);

	posix_spawnattr_destroy(&attr);
	posix_spawn_file_actions_destroy(&fa);
	free(env);
	for (int i = 0; i < 3; i++)
		free(own[i]);
	if (rc != 0) {
		w->pid = -1;
		return -rc;
	}
	w->state = HW_STARTING;
	return 0;
}

/* Runs gpud-worker with `args` and waits for it: its standard output lands in out,
 * its standard error in err (trailing newlines cut). Returns 0 when it exited 0. */
static int spawn_helper(const char *worker_exe, char *const args[], char *out, size_t outlen,
			char *err, size_t errlen)
{
	int po[2], pe[2];
	pid_t pid;
	posix_spawn_file_actions_t fa;
	char *argv[4] = {(char *)worker_exe, args[0], args[1], NULL};

	if (pipe2(po, O_CLOEXEC) < 0 || pipe2(pe, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "gpud: pipe: %s", strerror(errno));
		return -1;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	int rc = posix_spawn(&pid, worker_exe, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);
	if (rc != 0) {
		close(po[0]);
		close(pe[0]);
		snprintf(err, errlen, "gpud: cannot start %s: %s", worker_exe, strerror(rc));
		return -1;
	}
	/* Small outputs: read standard output to its end, then standard error. */
	int fds[2] = {po[0], pe[0]};
	char *bufs[2] = {out, err};
	size_t lens[2] = {outlen, errlen};
	for (int k = 0; k < 2; k++) {
		size_t used = 0;
		ssize_t r;
		char sink[256];
		for (;;) {
			if (used + 1 < lens[k])
				r = read(fds[k], bufs[k] + used, lens[k] - used - 1);
			else
				r = read(fds[k], sink, sizeof sink);
			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				break;
			if (used + 1 < lens[k])
				used += (size_t)r;
		}
		while (used && bufs[k][used - 1] == '\n')
			used--;
		bufs[k][used] = '\0';
		close(fds[k]);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
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
}

int spawn_check_worker_plugin(const char *worker_exe, const char *plugin, char *err,
			      size_t errlen)
{
	char out[256];
	char *args[] = {"--check", (char *)plugin};
	return spawn_helper(worker_exe, args, out, sizeof out, err, errlen);
}

int spawn_count_gpus(const char *worker_exe, char *err, size_t errlen)
{
	char out[64];
	char *args[] = {"--count-gpus", NULL};
	if (spawn_helper(worker_exe, args, out, sizeof out, err, errlen) < 0)
		return -1;
	return atoi(out);
}

int spawn_describe(const char *worker_exe, const char *plugin, char *out, size_t outlen,
		   char *err, size_t errlen)
{
	char *args[] = {"--describe", (char *)plugin};
	return spawn_helper(worker_exe, args, out, outlen, err, errlen);
}
