/* SPDX-License-Identifier: MIT */
/* CPU stages before the GPU workers (stages.h). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "run/stages.h"
#include "util/log.h"
#include "run/events.h"
#include "util/abort.h"
#include "host.h"
#include "job/checks.h"
#include "job/groups.h"
#include "job/keys.h"
#include "job/stagecfg.h"
#include "job/suggest.h"
#include "record/failures.h"
#include "util/say.h"
#include "util/textio.h"
#include "workers/memory.h"
#include "workers/spawner.h"
#include "workers/times.h"

/* A key of [stage.NAME] that is a slip of the stage's own (`worker = 4` for `workers`):
 * refused naming it when the plugin declares its keys and has no such key, said on
 * standard error when the plugin takes any key (it reaches its setup()). 0, or -1 with
 * `err` set. */
static int stage_own_key_slips(const struct cfg_section *s, const char *section, const char *plugin,
			       const char *const *declared, char *err, size_t errlen)
{
	static const char *const own[] = {"workers", "task_timeout", "max_retries", NULL};
	for (size_t i = 0; i < s->count; i++) {
		const char *key = s->kv[i].key, *near = suggest(key, own);
		if (!near)
			continue;
		if (declared && keys_declared(key, declared))
			continue;
		if (declared) {
			snprintf(err, errlen,
				 "%s: unknown key '%s' in [%s] (did you mean '%s'? a stage takes "
				 "workers, task_timeout, max_retries and its plugin's keys)",
				 s->where[i], key, section, near);
			return -1;
		}
		fprintf(LOG_ERR,
			"gpud: %s: [%s] %s is not the stage's '%s': it goes to plugin %s's setup() "
			"as one of its keys\n",
			s->where[i], section, key, near, plugin);
	}
	return 0;
}

int stages_prepare(struct host *h)
{
	const struct cfg *c = h->cfg;
	if (!c->n_stages)
		return 0;
	h->pool.stages = calloc(c->n_stages + 1, sizeof *h->pool.stages);
	if (!h->pool.stages) {
		say("out of memory");
		return -1;
	}
	h->pool.n_stages = (unsigned)c->n_stages;
	h->pool.stages[c->n_stages].name = "gpu";
	static char out[64 << 10];
	char err[2048], section[80];
	for (size_t i = 0; i < c->n_stages; i++) {
		const struct cfg_stage *cs = &c->stages[i];
		struct host_stage *st = &h->pool.stages[i];
		st->name = cs->name;
		st->rq_tail = &st->rq;
		st->plugin = loader_find(cs->sec.plugin, LOADER_WORKER, err, sizeof err);
		if (!st->plugin) {
			say("[stage.%s]: %s", cs->name, err);
			return -1;
		}
		out[0] = '\0';
		if (spawn_check_worker_plugin(h->pool.exe, st->plugin, out, sizeof out, err,
					      sizeof err) < 0) {
			say("[stage.%s]: %s", cs->name, err);
			return -1;
		}
		const char **keys = checks_worker_keys(out);
		snprintf(section, sizeof section, "stage.%s", cs->name);
		int rc = stage_own_key_slips(&cs->sec, section, cs->sec.plugin, keys, err,
					     sizeof err);
		if (rc == 0)
			rc = keys_check(&cs->sec, section, cs->sec.plugin, keys, err, sizeof err);
		free(keys);
		if (rc < 0) {
			text_clean(err);
			say("%s", err);
			return -1;
		}
	}
	h->pool.stages[c->n_stages].rq_tail = &h->pool.stages[c->n_stages].rq;
	return 0;
}

void stages_assign(struct host *h)
{
	struct host_pool *p = &h->pool;
	unsigned per[CFG_MAX_STAGES];
	if (!p->stages)
		return;
	stagecfg_workers(h->cfg, per);
	unsigned k = p->n_gpu_workers;
	for (unsigned s = 0; s < p->n_stages; s++) {
		p->stages[s].first = k;
		p->stages[s].n = per[s];
		for (unsigned j = 0; j < per[s]; j++, k++) {
			p->w[k].stage = s;
			p->w[k].gpu_id = -1;
		}
	}
	p->stages[p->n_stages].first = 0;
	p->stages[p->n_stages].n = p->n_gpu_workers;
	for (unsigned i = 0; i < p->n_gpu_workers; i++)
		p->w[i].stage = p->n_stages;
}

uint32_t stages_per_worker(const struct host *h)
{
	unsigned least = h->pool.n;
	for (unsigned s = 0; h->pool.stages && s <= h->pool.n_stages; s++)
		if (h->pool.stages[s].n && h->pool.stages[s].n < least)
			least = h->pool.stages[s].n;
	return (h->cfg->queue_size + least - 1) / least;
}

/* A worker of `stage` with room for a task of `size` bytes (`alone`: one that runs by
 * itself, tasks.h): its record reserved (*rec), or NULL. While the stage's next task to
 * run again is an alone one, other tasks wait for it (a worker must come free). */
static struct host_worker *room_in(struct host *h, unsigned stage, uint32_t size, bool alone,
				   struct shm_rec **rec)
{
	struct host_stage *st = &h->pool.stages[stage];
	if (!alone && st->rq && st->rq->t.alone)
		return NULL;
	for (unsigned i = 0; i < st->n; i++) {
		struct host_worker *w = &h->pool.w[st->first + (st->rr + i) % st->n];
		if (w->state != HW_READY || tasks_held(w) >= w->window || !tasks_may_hold(w, alone))
			continue;
		*rec = ring_reserve(&w->tasks, &w->task_head, w->task_free, ring_span(size));
		if (*rec) {
			st->rr += i + 1;
			return w;
		}
	}
	return NULL;
}

/* Task `ent` (input `data`) written into the reserved record `rec` of w's ring (to be
 * published). */
static void hand_over(struct host_worker *w, struct shm_rec *rec, struct task_ent ent,
		      const void *data)
{
	memcpy(ring_payload(rec), data, ent.size);
	tasks_place(w, rec, &ent);
	w->handed = true; /* published with the others of the burst: stages_publish_handed */
}

void stages_publish_handed(struct host *h, unsigned stage)
{
	struct host_stage *st = &h->pool.stages[stage];
	for (unsigned i = 0; i < st->n; i++) {
		struct host_worker *w = &h->pool.w[st->first + i];
		if (!w->handed)
			continue;
		w->handed = false;
		atomic_store_explicit(&w->feed->task_head, w->task_head, memory_order_release);
		wait_ring_fast(shm_worker_bell(w));
	}
}

/* Whether any worker of `stage` is set up or setting up. */
static bool stage_alive(const struct host *h, unsigned stage)
{
	const struct host_stage *st = &h->pool.stages[stage];
	for (unsigned i = 0; i < st->n; i++) {
		enum hw_state s = h->pool.w[st->first + i].state;
		if (s == HW_READY || s == HW_STARTING)
			return true;
	}
	return false;
}

/* Task t, finished in w's stage, cannot go on: not run. */
static void not_run(struct host *h, const struct task_ent *t)
{
	UI_ADD(h->stats.not_run, 1);
	failures_not_run(h, t->id, t->attempt);
	UI_SET(h->flow.in_flight, h->flow.in_flight - 1);
}

bool stages_forward(struct host *h, struct host_worker *w, const struct task_ent *t,
		    const void *payload, uint32_t size)
{
	unsigned next = w->stage + 1;
	const void *input = ring_payload(ring_at(&w->tasks, t->pos));
	if (size > h->cfg->max_task_bytes) {
		char msg[200];
		snprintf(msg, sizeof msg,
			 "its result of %u bytes exceeds max_task_bytes (%u), the next stage's "
			 "input limit",
			 size, h->cfg->max_task_bytes);
		UI_ADD(w->failed, 1);
		events_outcome(h, w, t, input, CAUSE_FINAL, NULL, 0, msg, 0);
		UI_SET(h->flow.in_flight, h->flow.in_flight - 1);
		return true;
	}
	/* After an interrupt nothing new starts; a stage with no worker left cannot take
	 * it (the run is aborted: stages_check_alive). */
	if (h->ctl.interrupted || h->ctl.killing || !stage_alive(h, next)) {
		if (!stage_alive(h, next))
			stages_check_alive(h);
		UI_ADD(w->ok, 1);
		not_run(h, t);
		return true;
	}
	struct shm_rec *rec;
	struct host_worker *to = room_in(h, next, size, false, &rec);
	if (!to)
		return false;
	UI_ADD(w->ok, 1);
	struct host_stage *st = &h->pool.stages[w->stage];
	if (size > st->largest_result) {
		st->largest_result = size;
		st->largest_input = t->size;
	}
	/* Attempts count per stage: the next stage's first run is its attempt 0. */
	hand_over(to, rec, (struct task_ent){.id = t->id, .size = size}, payload);
	return true;
}

unsigned stages_feed_retries(struct host *h)
{
	unsigned n = 0;
	for (unsigned s = 1; h->pool.stages && s <= h->pool.n_stages; s++) {
		struct host_stage *st = &h->pool.stages[s];
		while (st->rq) {
			struct shm_rec *rec;
			struct host_worker *to =
				room_in(h, s, st->rq->t.size, st->rq->t.alone, &rec);
			if (!to)
				break;
			struct requeued *q = tasks_requeued_take_stage(h, s);
			struct task_ent ent = q->t;
			hand_over(to, rec, ent, q->data);
			free(q);
			UI_ADD(h->flow.in_flight, 1);
			n++;
		}
		stages_publish_handed(h, s);
	}
	return n;
}

void stages_tell_drained(struct host *h)
{
	if (!h->pool.stages || !h->flow.done || h->rq.head)
		return;
	for (unsigned s = 1; s <= h->pool.n_stages; s++) {
		const struct host_stage *up = &h->pool.stages[s - 1];
		if (up->rq && s - 1 > 0)
			return;
		for (unsigned i = 0; i < up->n; i++)
			if (tasks_held(&h->pool.w[up->first + i]))
				return;
		struct host_stage *st = &h->pool.stages[s];
		if (st->drained_told)
			continue;
		st->drained_told = true;
		for (unsigned i = 0; i < st->n; i++) {
			struct host_worker *w = &h->pool.w[st->first + i];
			atomic_store_explicit(&w->feed->drained, 1, memory_order_release);
			wait_ring_fast(shm_worker_bell(w));
		}
	}
}

/* Tasks w holds that it has not started (it reports how far it got; clamped). */
static uint64_t unstarted(const struct host_worker *w, uint64_t *finished)
{
	if (!w->rep || w->state == HW_GONE)
		return 0;
	uint64_t upto = atomic_load_explicit(&w->rep->task_tail, memory_order_relaxed);
	if (upto - w->task_free > w->task_head - w->task_free)
		upto = w->task_free;
	uint64_t started = 0;
	for (uint64_t k = w->tt_tail; k != w->tt_head; k++) {
		if (w->tt[k & w->tt_mask].pos - w->task_free >= upto - w->task_free)
			break;
		started++;
	}
	bool busy = atomic_load_explicit(&w->rep->busy_since_ns, memory_order_relaxed) != 0;
	*finished = started && busy ? started - 1 : started;
	return tasks_held(w) - started;
}

void stages_publish(struct host *h, uint64_t now)
{
	static __thread uint64_t last;
	if (!h->pool.stages || (now && now - last < 100000000u))
		return;
	last = now;
	uint64_t at = now ? now : wait_now_ns();
	double elapsed = at > h->t_start_ns ? (double)(at - h->t_start_ns) * 1e-9 : 0;
	uint64_t waiting = 0; /* results of the stage before, waiting for room */
	for (unsigned s = 0; s <= h->pool.n_stages; s++) {
		struct host_stage *st = &h->pool.stages[s];
		uint64_t queued = waiting, blocked_done = 0;
		unsigned alive = 0;
		for (unsigned i = 0; i < st->n; i++) {
			const struct host_worker *w = &h->pool.w[st->first + i];
			uint64_t done = 0;
			alive += w->state == HW_READY || w->state == HW_STARTING;
			queued += unstarted(w, &done);
			if (w->blocked)
				blocked_done += done;
		}
		for (const struct requeued *q = st->rq; q; q = q->next)
			queued++;
		if (s == 0)
			for (const struct requeued *q = h->rq.head; q; q = q->next)
				queued++;
		waiting = blocked_done;
		uint64_t ok = 0, failed = 0, timeouts = 0;
		for (unsigned i = 0; i < st->n; i++) {
			const struct host_worker *w = &h->pool.w[st->first + i];
			ok += w->ok;
			failed += w->failed;
			timeouts += w->timeouts;
		}
		UI_SET(st->fig.workers, st->n);
		UI_SET(st->fig.alive, alive);
		UI_SET(st->fig.queued, queued);
		UI_SET(st->fig.ok, ok);
		UI_SET(st->fig.failed, failed);
		UI_SET(st->fig.timeouts, timeouts);
		double busy = stages_busy(h, st->first, st->n, elapsed);
		UI_SET(st->fig.busy, busy);
		UI_SET(st->fig.busy_cpu, stages_busy_cpu(h, st->first, st->n, busy));
	}
}

void stages_check_alive(struct host *h)
{
	for (unsigned s = 0; h->pool.stages && s <= h->pool.n_stages; s++) {
		if (stage_alive(h, s) || h->ctl.stopping)
			continue;
		if (!h->flow.in_flight && !tasks_requeued_any(h) && h->flow.done)
			return;
		if (s == h->pool.n_stages)
			host_abort(h, "no GPU worker left to run the remaining tasks");
		else
			host_abort(h, "stage %s: no worker left to run the remaining tasks",
				   h->pool.stages[s].name);
		return;
	}
}

void stages_note_results(const struct host *h, FILE *f)
{
	for (unsigned s = 0; h->pool.stages && s < h->pool.n_stages; s++) {
		const struct host_stage *st = &h->pool.stages[s];
		uint64_t out = st->largest_result, in = st->largest_input;
		bool grows = out >= STAGES_RESULT_NOTE && out >= STAGES_RESULT_GROWTH * in;
		if (!grows && out <= STAGES_RESULT_LARGE)
			continue;
		char times[48] = "";
		if (in && out >= 2 * in)
			snprintf(times, sizeof times, ", %.0f times its input of %llu bytes",
				 (double)out / (double)in, (unsigned long long)in);
		fprintf(f,
			"gpud: note: stage %s's results took up to %llu bytes a task%s; each is "
			"copied into a task ring of the %s, whose rings hold max_task_bytes (%u) a "
			"task: where a smaller type will do, send it (uint8 pixels rather than "
			"float32 take a quarter), and lower [job] max_task_bytes to what a result "
			"needs (gpud check shows the memory)\n",
			st->name, (unsigned long long)out, times,
			s + 1 < h->pool.n_stages ? "next stage's workers" : "GPU workers",
			h->cfg->max_task_bytes);
	}
}

void stages_free(struct host *h)
{
	for (unsigned s = 0; h->pool.stages && s < h->pool.n_stages; s++)
		free(h->pool.stages[s].plugin);
	free(h->pool.stages);
	h->pool.stages = NULL;
	h->pool.n_stages = 0;
}

double stages_busy(const struct host *h, unsigned first, unsigned n, double elapsed)
{
	/* Time in process() over the time the workers were up: from each one's first
	 * finished setup (a model loading, an interpreter starting is not idleness) to
	 * `elapsed` into the run. A restart's gap counts as idle. */
	uint64_t end = h->t_start_ns + (uint64_t)(elapsed > 0 ? elapsed * 1e9 : 0);
	double busy = 0, up = 0;
	for (unsigned i = 0; i < n; i++) {
		struct host_worker *w = &h->pool.w[first + i];
		uint64_t ready = UI_READ(w->ready_ns);
		if (!ready || ready >= end)
			continue;
		busy += UI_READ(w->busy_s);
		up += (double)(end - ready) * 1e-9;
	}
	if (up <= 0)
		return 0;
	busy /= up;
	return busy < 0 ? 0 : busy > 1 ? 1 : busy;
}

double stages_busy_cpu(const struct host *h, unsigned first, unsigned n, double busy)
{
	/* The workers' CPU time in their calls over their time in them (times.h: each
	 * worker's figure clamped to its time), applied to the busy fraction. */
	double cpu = 0, user = 0;
	for (unsigned i = 0; i < n; i++) {
		struct worker_times t;
		times_of(&h->pool.w[first + i], &t);
		cpu += (double)t.user_cpu_ns;
		user += (double)t.phase_ns[PH_USER];
	}
	return user > 0 ? busy * (cpu < user ? cpu / user : 1) : 0;
}

void stages_json(const struct host *h, FILE *f, double elapsed)
{
	double gpu = stages_busy(h, 0, h->pool.n_gpu_workers, elapsed);
	fprintf(f, ", \"gpu_busy\": %.4f, \"gpu_busy_cpu\": %.4f, \"stages\": [", gpu,
		stages_busy_cpu(h, 0, h->pool.n_gpu_workers, gpu));
	for (unsigned s = 0; h->pool.stages && s < h->pool.n_stages; s++) {
		const struct host_stage *st = &h->pool.stages[s];
		uint64_t ok = 0, failed = 0, timed_out = 0;
		unsigned restarts = 0;
		for (unsigned i = 0; i < st->n; i++) {
			const struct host_worker *w = &h->pool.w[st->first + i];
			ok += w->ok;
			failed += w->failed;
			timed_out += w->timeouts;
			restarts += w->restarts;
		}
		fprintf(f, "%s{\"name\": ", s ? ", " : "");
		io_json_string(f, st->name);
		fprintf(f,
			", \"workers\": %u, \"busy\": %.4f, \"busy_cpu\": %.4f, \"queued\": %llu, "
			"\"ok\": %llu, \"failed\": %llu, \"timed_out\": %llu, \"restarts\": %u}",
			st->n, stages_busy(h, st->first, st->n, elapsed),
			stages_busy_cpu(h, st->first, st->n,
					stages_busy(h, st->first, st->n, elapsed)),
			(unsigned long long)st->fig.queued, (unsigned long long)ok,
			(unsigned long long)failed, (unsigned long long)timed_out, restarts);
	}
	fprintf(f, "]");
}
