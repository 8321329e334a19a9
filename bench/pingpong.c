/* SPDX-License-Identifier: MIT */
/*
 * Where the VM's two vCPUs sit relative to each other right now: two processes, one on
 * each CPU, pass a counter back and forth through one shared cache line, spinning. Prints
 * the median round trip in nanoseconds over 9 rounds of 20,000 trips. The 2-vCPU
 * development VM moves between a "near" placement (~150 ns) and a "far" one (~450 ns),
 * which changes gpud's small-task rates a lot; bench/compare.sh prints this beside its
 * figures so each pair can be read with the placement it was taken in.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TRIPS 20000
#define ROUNDS 9

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof set, &set); /* best effort: one CPU just gives 0 */
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(void)
{
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		puts("0");
		return 0;
	}
	_Atomic uint64_t *line =
		mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (line == MAP_FAILED)
		return 1;
	const uint64_t total = (uint64_t)TRIPS * ROUNDS;
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) { /* answers every odd value with the next even one */
		pin(1);
		for (uint64_t v = 1; v < 2 * total; v += 2) {
			while (atomic_load_explicit(line, memory_order_acquire) != v)
				;
			atomic_store_explicit(line, v + 1, memory_order_release);
		}
		_exit(0);
	}
	pin(0);
	double rt[ROUNDS];
	uint64_t v = 0;
	for (int r = 0; r < ROUNDS; r++) {
		uint64_t t0 = now_ns();
		for (int i = 0; i < TRIPS; i++) {
			atomic_store_explicit(line, v + 1, memory_order_release);
			v += 2;
			while (atomic_load_explicit(line, memory_order_acquire) != v)
				;
		}
		rt[r] = (double)(now_ns() - t0) / TRIPS;
	}
	waitpid(pid, NULL, 0);
	qsort(rt, ROUNDS, sizeof rt[0], cmp);
	printf("%.0f\n", rt[ROUNDS / 2]);
	return 0;
}
