/* SPDX-License-Identifier: MIT */
/*
 * CPU stages before the GPU workers ([stage.NAME] sections): each a worker plugin run
 * in a pool of gpud-worker processes with no GPU, feeding the next stage, the last of
 * which is the GPU workers. Stage workers are more slots of the one pool (after the GPU
 * workers' slots) and the loop's one mechanism runs them: the generator feeds stage 0,
 * and a stage's ok result is copied once, from its worker's result ring straight into
 * a task ring of the next stage's worker, keeping its id (stages_forward). When no
 * worker of the next stage has room, the result stays where it is and its worker is
 * `blocked`: it is not news for the loop's wait until something downstream frees room,
 * and its result ring fills, then its worker waits: backpressure end to end, bounded
 * by queue_size (flow.in_flight counts a task once, from generation to its outcome).
 * A failure in a stage is the task's one outcome; it never reaches later stages.
 */
#ifndef GPUD_STAGES_H
#define GPUD_STAGES_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>

#include "job/stagecfg.h" /* WHERE_OF, each stage's settings */

struct cfg;
struct host;
struct host_worker;
struct task_ent;

/* The stages' plugins found and checked (each in a helper process, with its declared
 * keys), before anything starts; fills h->pool.stages. 0, or -1 said. */
int stages_prepare(struct host *h);

/* Assigns the stage slots of the pool (h->pool.w from n_gpu_workers on) to their
 * stages; after the pool is allocated. */
void stages_assign(struct host *h);

/* The most tasks one worker's table must hold: queue_size shared by the smallest
 * stage's workers. */
uint32_t stages_per_worker(const struct host *h);

/* The ok result of task t (ring payload `payload`, `size` bytes) of stage worker w,
 * handed to a worker of the next stage (copied into its task ring; published by
 * stages_publish_handed), or failed when it cannot go on (too large for
 * max_task_bytes; not run after an interrupt, or when the next stage has no worker
 * left). false: no worker of the next stage has room now;
 * nothing was done and the result stays in w's ring. */
bool stages_forward(struct host *h, struct host_worker *w, const struct task_ent *t,
		    const void *payload, uint32_t size);

/* Publishes the tasks handed to `stage`'s workers since the last call (after a burst
 * of stages_forward: one release store and bell per worker, not per task). */
void stages_publish_handed(struct host *h, unsigned stage);

/* Feeds the later stages' workers from their queues of tasks to run again; returns the
 * tasks given. */
unsigned stages_feed_retries(struct host *h);
/* Once the generator has ended (h->flow.done), each later stage (the GPU workers too)
 * whose stages before it hold nothing and have nothing to run again is told no new
 * task will come (shm_feed.drained): its waits count as idle, and a batching worker
 * sends its last batch at once instead of waiting for it to fill. */
void stages_tell_drained(struct host *h);

/* Every 100 ms (by `now`; now = 0: at once): each stage's figures for the view
 * (host_stage.fig, view/figures.h): its live workers, its queue, its counts, how busy. */
void stages_publish(struct host *h, uint64_t now);

/* A stage with no worker left (all set up failed or retired) while tasks remain: the
 * run is aborted (said once). */
void stages_check_alive(struct host *h);

/* The busy fraction of workers pool.w[first] to pool.w[first + n - 1] over `elapsed`
 * seconds: their time in process() over elapsed x n, 0 to 1 (any thread). */
double stages_busy(const struct host *h, unsigned first, unsigned n, double elapsed);
/* Of `busy` (stages_busy of the same workers), the part that was CPU time of the
 * threads making the calls: busy times their CPU time in the calls over their time in
 * them (0 to busy). Near busy: the calls are CPU work (Python, NumPy, a spinning
 * synchronisation); well below it: they wait (for the GPU, I/O). */
double stages_busy_cpu(const struct host *h, unsigned first, unsigned n, double busy);

/* --stats-json's `, "gpu_busy": B, "stages": [...]` (stats.c). */
void stages_json(const struct host *h, FILE *f, double elapsed);

/* A stage's results are said to be large, at the end of a run, when the largest was
 * at least STAGES_RESULT_GROWTH times its input and STAGES_RESULT_NOTE bytes, or
 * over STAGES_RESULT_LARGE: each is copied into the next stage's rings. */
#define STAGES_RESULT_GROWTH 4
#define STAGES_RESULT_NOTE (256u << 10)
#define STAGES_RESULT_LARGE (1u << 20)

/* One line on `f` for each stage whose results were large (above), naming the sizes
 * and what to change. */
void stages_note_results(const struct host *h, FILE *f);

void stages_free(struct host *h);

#endif /* GPUD_STAGES_H */
