/* SPDX-License-Identifier: MIT */
/*
 * The host's deadlines (daemon/host/workers/deadlines.c) on hand-built state: one
 * worker slot, its report block in plain memory, a child process standing in for the
 * worker. No job runs: lifecycle_timeouts is called with chosen clocks.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "host.h"
#include "shm_layout.h"
#include "workers/lifecycle.h"

#define S 1000000000ull

struct bench {
	struct cfg cfg;
	struct host h;
	struct host_worker w;
	struct shm_report rep;
};

/* A host of one worker in `state`, its stand-in a child that waits to be killed. */
static struct bench *bench_new(enum hw_state state, double task_timeout, double setup_timeout)
{
	struct bench *b = calloc(1, sizeof *b);
	cr_assert(b);
	b->cfg.task_timeout = task_timeout;
	b->cfg.setup_timeout = setup_timeout;
	b->h = (struct host)HOST_INIT(&b->cfg);
	b->h.pool.w = &b->w;
	b->h.pool.n = 1;
	b->h.pool.n_gpu_workers = 1;
	b->w.rep = &b->rep;
	b->w.state = state;
	b->w.pid = fork();
	cr_assert(b->w.pid >= 0);
	if (b->w.pid == 0) {
		setpgid(0, 0); /* as a worker: the leader of its own group */
		pause();
		_exit(0);
	}
	return b;
}

/* Whether the stand-in was killed (by SIGKILL); reaps it either way. */
static bool bench_killed(struct bench *b)
{
	int status;
	if (waitpid(b->w.pid, &status, WNOHANG) == 0) {
		kill(b->w.pid, SIGKILL);
		waitpid(b->w.pid, &status, 0);
		return false;
	}
	return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

static void bench_settle(struct bench *b)
{
	/* A signal takes a moment to end the child: up to a second for it to die. */
	for (int i = 0; i < 200; i++) {
		siginfo_t si = {0};
		if (waitid(P_PID, (id_t)b->w.pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 ||
		    si.si_pid == b->w.pid)
			return;
		usleep(5000);
	}
}

Test(deadlines, a_task_past_task_timeout_kills_its_worker)
{
	struct bench *b = bench_new(HW_READY, 2, 0);
	uint64_t now = 100 * S;
	atomic_store(&b->rep.busy_since_ns, now - 3 * S); /* running 3 s, limit 2 s */
	lifecycle_timeouts(&b->h, now);
	cr_expect(b->w.timed_out, "the worker is marked timed out");
	bench_settle(b);
	cr_expect(bench_killed(b), "its process is killed");
	free(b);
}

Test(deadlines, a_task_within_task_timeout_runs_on_and_sets_the_next_look)
{
	struct bench *b = bench_new(HW_READY, 2, 0);
	uint64_t now = 100 * S;
	atomic_store(&b->rep.busy_since_ns, now - 1 * S); /* 1 s of its 2 s */
	uint64_t next = lifecycle_timeouts(&b->h, now);
	cr_expect(!b->w.timed_out);
	/* With a task limit the loop looks again within the poll (20 ms), never later
	 * than the task's own end (1 s from now, plus a tick of the coarse clock). */
	cr_expect(next > now && next <= now + S + 20000000u, "next look in %llu ns",
		  (unsigned long long)(next - now));
	cr_expect(!bench_killed(b), "its process lives");
	free(b);
}

Test(deadlines, a_stop_of_the_whole_job_does_not_count_against_a_task)
{
	struct bench *b = bench_new(HW_READY, 2, 0);
	uint64_t now = 100 * S;
	atomic_store(&b->rep.busy_since_ns, now - 1 * S);
	lifecycle_timeouts(&b->h, now);
	/* The job was stopped from outside for 5 s and continued (a SIGCONT counted):
	 * the task has run 1 s of its 2 s still. */
	host_conts++;
	lifecycle_timeouts(&b->h, now + 5 * S);
	cr_expect(!b->w.timed_out, "the 5 s stopped are credited");
	lifecycle_timeouts(&b->h, now + 5 * S + 500000000u);
	cr_expect(!b->w.timed_out, "1.5 s of 2 s");
	lifecycle_timeouts(&b->h, now + 5 * S + 1100000000u);
	cr_expect(b->w.timed_out, "2.1 s of 2 s: timed out");
	bench_settle(b);
	cr_expect(bench_killed(b));
	free(b);
}

Test(deadlines, a_setup_past_setup_timeout_is_ended)
{
	struct bench *b = bench_new(HW_STARTING, 0, 10);
	uint64_t now = 100 * S;
	b->w.spawned_ns = now - 11 * S;
	lifecycle_timeouts(&b->h, now);
	cr_expect(b->w.setup_timed_out, "marked as past setup_timeout");
	cr_expect(!b->w.timed_out, "not a task's timeout");
	bench_settle(b);
	cr_expect(bench_killed(b));
	free(b);
}

Test(deadlines, a_setup_within_setup_timeout_is_waited_for_until_its_end)
{
	struct bench *b = bench_new(HW_STARTING, 0, 10);
	uint64_t now = 100 * S;
	b->w.spawned_ns = now - 4 * S;
	uint64_t next = lifecycle_timeouts(&b->h, now);
	cr_expect(!b->w.setup_timed_out);
	cr_expect(next <= now + 6 * S, "looked at again by its end (in %llu ns)",
		  (unsigned long long)(next - now));
	cr_expect(!bench_killed(b));
	free(b);
}
