/* SPDX-License-Identifier: MIT */
/*
 * gpud-worker: the process that runs a worker plugin. The host starts one per (GPU,
 * slot) by exec, with CUDA_VISIBLE_DEVICES, GPUD_GPU_ID and GPUD_WORKER_ID already in
 * its environment, the run memfd read-only as fd 3, its own out memfd as fd 4, the
 * host's bell page as fd 5 and a pipe from the host as fd 6.
 *
 *   gpud-worker --run INDEX HOST_PID      run as worker INDEX of the run (descriptors 3-6:
 *                                         shm_layout.h)
 *   gpud-worker --run INDEX HOST_PID --stage K   the same, as a worker of CPU stage K
 *                                         ([stage.NAME], its plugin and keys: memory.c)
 *   gpud-worker --check PLUGIN            load PLUGIN as a worker plugin and report
 *   gpud-worker --count-gpus              print the number of CUDA devices (gpus = all)
 *   gpud-worker --describe PLUGIN         print kind, name, version, description (gpud plugins)
 *
 * Loading worker plugins only here keeps the host free of whatever they link (CUDA).
 * This file starts the process and sets the plugin up; its parts (worker.h): the task
 * loop (loop.c), batches that fit (fit.c), tasks in flight (flight.c), where the time
 * goes (times.h), the configuration (config.c), the mappings (mappings.c), the host
 * watch (attach.c).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpus.h"
#include "mappings.h"
#include "output.h"
#include "tools.h"
#include "worker.h"

static void set_state(struct worker *w, enum shm_worker_state s, const char *msg)
{
	if (msg)
		snprintf(w->rep->message, sizeof w->rep->message, "%s", msg);
	atomic_store_explicit(&w->rep->state, s, memory_order_release);
	wait_ring_fast(w->host_bell);
}

/* The plugin loaded and a batch's buffers allocated; on failure the setup is reported
 * failed and the process ends. */
static void load_plugin(struct worker *w, const char *plugin_path)
{
	char msg[1200];
	if (loader_open(&w->plugin, plugin_path, LOADER_WORKER, msg, sizeof msg) < 0) {
		set_state(w, WS_SETUP_FAILED, msg);
		worker_finish(1);
	}
	const struct worker_ops *ops = &w->plugin.worker;
	uint32_t batch = ops->process_batch && w->hdr->batch_size > 1 ? w->hdr->batch_size : 1;
	/* Tasks in flight: with more than one allowed, or when it is all the plugin has. */
	uint32_t most = w->hdr->max_in_flight ? w->hdr->max_in_flight : 1;
	if (ops->submit && (most > 1 || (!ops->process && !ops->process_batch))) {
		w->fl.flight = most;
		w->fl.held = 2 * most; /* finished ones wait behind a running one: as many again */
		batch = 1;
	}
	fit_init(&w->fit, batch, w->plugin.info->abi_minor >= 4);
	w->fit.isolate = w->hdr->isolate != 0;
	uint32_t n = w->fl.held > batch ? w->fl.held : batch;
	w->t = calloc(n, sizeof *w->t);
	w->in = calloc(n, sizeof *w->in);
	w->out = calloc(n, sizeof *w->out);
	w->out_pos = calloc(n, sizeof *w->out_pos);
	w->err = malloc(n * sizeof *w->err);
	w->fl.fly = calloc(w->fl.held ? w->fl.held : 1, sizeof *w->fl.fly);
	w->fl.done = calloc(w->fl.flight ? w->fl.flight : 1, sizeof *w->fl.done);
	w->fit.idx = calloc(2 * (size_t)w->fit.batch, sizeof *w->fit.idx);
	w->fit.part = calloc(w->fit.batch, sizeof *w->fit.part);
	/* For the host's window: an engine is given three times max_in_flight; a plugin of
	 * this job that calls process() (a CPU stage's, say) is given what it keeps busy. */
	atomic_store_explicit(&w->rep->flight, w->fl.flight, memory_order_relaxed);
	if (!w->t || !w->in || !w->out || !w->out_pos || !w->err || !w->fl.fly || !w->fl.done ||
	    !w->fit.idx || !w->fit.part) {
		set_state(w, WS_SETUP_FAILED, "worker: out of memory for a batch of tasks");
		worker_finish(1);
	}
	fit_publish(&w->fit, w->rep);
}

/* The plugin's setup, with the rings pinned first when asked; on failure the setup is
 * reported failed and the process ends. */
static void set_up_plugin(struct worker *w)
{
	char msg[1200];
	struct gpud_error err = {{0}};
	int pinned = mappings_pin(w, msg, sizeof msg);
	if (pinned < 0) {
		set_state(w, WS_SETUP_FAILED, msg);
		worker_finish(1);
	}
	static int gpu_ids[WORKER_MAX_GPUS];
	struct gpud_worker_info info = {
		.worker_id = w->feed->worker_id,
		.gpu_id = w->feed->gpu_id,
		.n_gpus = worker_gpu_ids(w->feed->gpu_id, gpu_ids, WORKER_MAX_GPUS),
		.gpu_ids = gpu_ids,
		.seed = w->feed->seed,
		.args = &w->cfg.args,
		.flags = pinned ? GPUD_WORKER_PINNED : 0,
		.batch_size = w->fit.batch,
		.max_in_flight = w->fl.flight ? w->fl.flight : 1,
	};
	int set_up = w->plugin.worker.setup(&info, &w->state, &err);
	leave_if_forked();
	if (set_up != 0) {
		if (!err.message[0])
			snprintf(err.message, sizeof err.message,
				 "setup() failed without a message");
		set_state(w, WS_SETUP_FAILED, err.message);
		worker_finish(1);
	}
	/* pin_memory = auto: a plugin that brought the CUDA runtime in during its setup (a
	 * Python worker that imports torch there) gets its rings pinned now; without a GPU
	 * the registration fails and is skipped, as before the setup. */
	if (!pinned && w->hdr->pin_memory == SHM_PIN_AUTO)
		mappings_pin(w, msg, sizeof msg);
}

/* The plugin's cleanup, reported; then the process ends. */
static _Noreturn void clean_up_plugin(struct worker *w)
{
	const struct worker_ops *ops = &w->plugin.worker;
	struct gpud_error err = {{0}};
	times_charge_now(&w->tm,
			 w->clk.tiny ? PH_USER : PH_HANDBACK); /* the last results handed over */
	set_state(w, WS_CLEANUP, NULL);
	int cleaned = ops->cleanup ? ops->cleanup(w->state, &err) : 0;
	leave_if_forked();
	times_cpu(&w->tm, times_charge_now(&w->tm, PH_SETUP), true);
	if (cleaned != 0) {
		if (!err.message[0])
			snprintf(err.message, sizeof err.message,
				 "cleanup() failed without a message");
		set_state(w, WS_CLEANUP_FAILED, err.message);
	} else {
		set_state(w, WS_DONE, NULL);
	}
	/* No dlclose: a plugin's threads or atexit handlers may still need its code. */
	worker_finish(0);
}

static int run(long index, long host_pid, long stage)
{
	struct worker w = {.tm.mark = wait_now_ns()};

	if (attach_to_host(host_pid) < 0)
		return 1;
	output_prefix_start((int)index);
	if (mappings_open(&w, index) < 0) {
		fprintf(stderr, "gpud-worker: the shared memory handed over is not a gpud run's\n");
		return 1;
	}
	w.tm.out = &w.rep->times;
	atomic_store_explicit(&w.rep->times.start_ns, w.tm.mark, memory_order_relaxed);
	times_publish(&w.tm);
	/* From here on every exit is _exit: the plugin may hold threads or memory that
	 * exit-time handlers must not walk into. */
	w.cpu_stage = stage >= 0;
	if (config_read(&w.cfg, w.hdr, stage) < 0) {
		set_state(&w, WS_SETUP_FAILED, "worker: malformed configuration in shared memory");
		worker_finish(1);
	}
	set_state(&w, WS_SETUP, NULL);
	load_plugin(&w, w.cfg.path);
	set_up_plugin(&w);
	/* Timeouts ended in place: the plugin can (ABI 1.5), a limit applies, and its calls
	 * are process() or process_batch() (tasks in flight time out as before). */
	if (w.plugin.worker.interrupt && w.feed->interrupt_ms && !w.fl.flight) {
		struct timespec tick = {0};
		clock_getres(CLOCK_MONOTONIC_COARSE, &tick);
		w.interrupts = true;
		w.interrupt_ns = (uint64_t)w.feed->interrupt_ms * 1000000u +
				 (uint64_t)tick.tv_sec * 1000000000u + (uint64_t)tick.tv_nsec;
		atomic_store_explicit(&w.rep->interrupts, 1, memory_order_relaxed);
	}
	times_charge_now(&w.tm, PH_SETUP);
	set_state(&w, WS_READY, NULL);
	attach_watch(&w);
	if (w.fl.flight)
		flight_run(&w);
	else
		loop_run(&w);
	clean_up_plugin(&w);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--describe") == 0)
		return worker_describe(argv[2]);
	if (argc == 2 && strcmp(argv[1], "--count-gpus") == 0)
		return worker_count_gpus();
	if (argc == 3 && strcmp(argv[1], "--check") == 0)
		return worker_check(argv[2]);
	if (argc == 4 && strcmp(argv[1], "--run") == 0)
		return run(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10), -1);
	if (argc == 6 && strcmp(argv[1], "--run") == 0 && strcmp(argv[4], "--stage") == 0)
		return run(strtol(argv[2], NULL, 10), strtol(argv[3], NULL, 10),
			   strtol(argv[5], NULL, 10));
	fprintf(stderr, "gpud-worker is started by gpud; it is not meant to be run by hand.\n");
	return 2;
}
