/* SPDX-License-Identifier: MIT */
/*
 * A hostile worker, as a plugin author with a memory bug (or worse) would write it.
 * Innocent tasks return "r" + their input. Every `every`-th task (id % every == every-1)
 * is a poison task that misbehaves according to `mode`:
 *   overflow   writes `bytes` (200) past the end of its result buffer
 *   underflow  writes `bytes` (256) before the start of its result buffer
 *   input      writes 4 bytes into the 64 before its input (the record header)
 *   scribble   overwrites every writable shared mapping of the process, then returns ok
 *   fork       starts a child (in a session of its own) that holds standard output and
 *              error open for 30 s; its pid is appended to `pidfile`
 *   hang       never returns
 *   forkret    forks, and both processes return from process() with the right result:
 *              the classic failed exec. `first = child` makes the parent wait (up to
 *              2 s) for the child to end before returning, `first = parent` makes the
 *              child wait 2 ms; otherwise both return at once
 *   reach      tries to reach into the gpud host (a same-user process): open its
 *              /proc/<pid>/mem for writing, open its descriptors through /proc/<pid>/fd,
 *              ptrace-attach to it; returns what it got as the result (see reach())
 * `leave = group` moves the worker into its parent's process group in setup,
 * `leave = session` into a session of its own (through its parent's group: a group
 * leader cannot start a session), `leave = child` into the group of a child it starts
 * (which pauses until killed); its pid is appended to `pidfile`. `pdeathsig = 0`
 * clears the parent-death signal in setup, as a change of credentials would.
 * `setuid = 1` drops to uid/gid 65534 in setup (when root). `empty = 1`: innocent tasks
 * return an empty result instead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "hostile", "1.0");

struct st {
	char pidfile[512];
	char mode[16], first[16];
	long every, bytes, empty;
};

static void append_pid(const char *path, pid_t pid)
{
	FILE *f = fopen(path, "a");
	if (f) {
		fprintf(f, "%d\n", (int)pid);
		fclose(f);
	}
}

/* Both processes of a fork() go on, in the order `first` asks for. */
static void fork_and_return(const char *first)
{
	pid_t pid = fork();
	if (pid < 0)
		return;
	if (pid == 0) {
		if (!strcmp(first, "parent"))
			usleep(2000);
		return;
	}
	if (strcmp(first, "child"))
		return;
	for (int i = 0; i < 2000; i++) {
		if (waitpid(pid, NULL, WNOHANG) != 0)
			return;
		usleep(1000);
	}
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct st *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "out of memory");
	snprintf(s->mode, sizeof s->mode, "%s", gpud_arg(info->args, "mode", "none"));
	snprintf(s->pidfile, sizeof s->pidfile, "%s", gpud_arg(info->args, "pidfile", "/dev/null"));
	snprintf(s->first, sizeof s->first, "%s", gpud_arg(info->args, "first", "both"));
	s->every = atol(gpud_arg(info->args, "every", "100"));
	s->empty = atol(gpud_arg(info->args, "empty", "0"));
	s->bytes = atol(gpud_arg(info->args, "bytes", strcmp(s->mode, "overflow") ? "256" : "200"));
	if (atoi(gpud_arg(info->args, "setuid", "0")) && getuid() == 0 &&
	    (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0))
		return gpud_fail(err, "setresuid failed");
	const char *leave = gpud_arg(info->args, "leave", "");
	if (!strcmp(leave, "group") || !strcmp(leave, "session")) {
		if (setpgid(0, getpgid(getppid())) < 0 || (leave[0] == 's' && setsid() < 0))
			return gpud_fail(err, "cannot leave the process group");
	} else if (!strcmp(leave, "child")) {
		pid_t child = fork();
		if (child == 0) {
			setpgid(0, 0);
			for (;;)
				pause();
		}
		if (child < 0 || (setpgid(child, child) < 0 && getpgid(child) != child) ||
		    setpgid(0, child) < 0)
			return gpud_fail(err, "cannot join a child's process group");
	}
	if (*leave)
		append_pid(s->pidfile, getpid());
	if (!strcmp(gpud_arg(info->args, "pdeathsig", "keep"), "0"))
		prctl(PR_SET_PDEATHSIG, 0);
	*state = s;
	return 0;
}

/* Every writable MAP_SHARED mapping ("rw-s" in /proc/self/maps), filled with 0xa5. */
static void scribble(void)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && strcmp(perms, "rw-s") == 0)
			memset((void *)lo, 0xa5, hi - lo);
	}
	fclose(f);
}

/* The gpud host: the nearest ancestor named "gpud" (a process between it and us, should
 * there be one, is skipped), else our parent. /proc/<pid>/stat stays readable even for
 * a process that is not dumpable. */
static pid_t find_host(void)
{
	pid_t p = getppid();
	for (int depth = 0; p > 1 && depth < 8; depth++) {
		char path[64], buf[512];
		snprintf(path, sizeof path, "/proc/%d/stat", (int)p);
		FILE *f = fopen(path, "re");
		if (!f)
			break;
		size_t n = fread(buf, 1, sizeof buf - 1, f);
		fclose(f);
		buf[n] = '\0';
		char *open = strchr(buf, '('), *close = strrchr(buf, ')');
		int ppid;
		if (!open || !close)
			break;
		if (close - open - 1 == 4 && strncmp(open + 1, "gpud", 4) == 0)
			return p;
		if (sscanf(close + 1, " %*c %d", &ppid) != 1)
			break;
		p = ppid;
	}
	return getppid();
}

/* "ok" or "denied(<errno name>)". */
static const char *verdict(int e)
{
	static char buf[8][48];
	static unsigned next;
	char *b = buf[next++ % 8];
	if (e == 0)
		return "ok";
	snprintf(b, sizeof buf[0], "denied(%s)", strerrorname_np(e) ? strerrorname_np(e) : "?");
	return b;
}

/* What this worker can do to the host, as "host=PID mem=... fd=... ptrace=...
 * self_dumpable=D": mem, opening /proc/PID/mem read-write; fd, opening the host's
 * descriptors 0..63 through /proc/PID/fd ("ok(K)" when K of them opened, else the first
 * refusal); ptrace, PTRACE_SEIZE from a child (which stops nothing, and the child's exit
 * detaches it). self_dumpable: our own flag, which exec gives back to workers. */
static void reach(struct gpud_task *task)
{
	pid_t host = find_host();
	char path[64];
	int mem_err = 0, fd_err = ENOENT, opened = 0, pt_err = EIO;

	snprintf(path, sizeof path, "/proc/%d/mem", (int)host);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		mem_err = errno;
	else
		close(fd);
	for (int n = 0; n < 64; n++) {
		snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)host, n);
		/* Non-blocking: a pipe with no writer left would block a plain open. */
		fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd >= 0) {
			opened++;
			close(fd);
		} else if (errno != ENOENT && errno != ENXIO && fd_err == ENOENT) {
			fd_err = errno; /* ENXIO: a socket, which cannot be opened this way */
		}
	}
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) == 0) {
		pid_t kid = fork();
		if (kid == 0) {
			int e = ptrace(PTRACE_SEIZE, host, 0, 0) == 0 ? 0 : errno;
			if (write(pipefd[1], &e, sizeof e) < 0)
				_exit(1);
			_exit(0);
		}
		close(pipefd[1]);
		if (kid > 0 && read(pipefd[0], &pt_err, sizeof pt_err) != sizeof pt_err)
			pt_err = EIO;
		close(pipefd[0]);
		if (kid > 0)
			waitpid(kid, NULL, 0);
	}
	char fds[64];
	if (opened)
		snprintf(fds, sizeof fds, "ok(%d)", opened);
	else
		snprintf(fds, sizeof fds, "%s", verdict(fd_err));
	int n = snprintf(task->result.data, task->result.capacity,
			 "host=%d mem=%s fd=%s ptrace=%s self_dumpable=%d", (int)host,
			 verdict(mem_err), fds, verdict(pt_err),
			 prctl(PR_GET_DUMPABLE, 0, 0, 0, 0));
	task->result.size = n < 0                               ? 0
			    : (size_t)n < task->result.capacity ? (size_t)n
								: task->result.capacity;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct st *s = state;
	int poison = s->every > 0 && task->id % (uint64_t)s->every == (uint64_t)(s->every - 1);
	if (poison) {
		uint8_t *out = task->result.data;
		if (!strcmp(s->mode, "overflow"))
			memset(out + task->result.capacity, 0x5a, (size_t)s->bytes);
		else if (!strcmp(s->mode, "underflow"))
			memset(out - s->bytes, 0x5a, (size_t)s->bytes);
		else if (!strcmp(s->mode, "input"))
			memset((uint8_t *)(uintptr_t)task->input - 32, 0x5a, 4);
		else if (!strcmp(s->mode, "scribble"))
			scribble();
		else if (!strcmp(s->mode, "hang"))
			for (;;)
				pause();
		else if (!strcmp(s->mode, "forkret"))
			fork_and_return(s->first);
		else if (!strcmp(s->mode, "reach")) {
			reach(task);
			return 0;
		} else if (!strcmp(s->mode, "fork") && fork() == 0) {
			append_pid(s->pidfile, getpid());
			setsid(); /* out of the worker's process group, too */
			sleep(30);
			_exit(0);
		}
	}
	if (s->empty)
		return 0;
	if (task->input_size + 1 > task->result.capacity)
		return gpud_fail(task->error, "result too small");
	char *r = task->result.data;
	r[0] = 'r';
	memcpy(r + 1, task->input, task->input_size);
	task->result.size = task->input_size + 1;
	return 0;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	free(state);
	return 0;
}
