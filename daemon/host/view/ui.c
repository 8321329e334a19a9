/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "view/ui.h"
#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "job/groups.h"
#include "job/python.h"
#include "record/files.h"
#include "host.h"
#include "view/nvml.h"
#include "wait.h"
#include "workers/fit.h"
#include "workers/times.h"

/* Throughput "now" is measured over about this window. */
#define RECENT_S 5.0
#define SAMPLES 64
/* Plain mode shows at most this many failures per interval, then a count. */
#define PLAIN_FAILURES 20
/* The dashboard shows this many of the last messages. */
#define DASH_NOTES 6
#define UI_WIDE 92 /* columns the full worker table needs */
/* and with where each worker's time goes (dash_times) */
#define UI_WIDE_TIMES (UI_WIDE + 39)

/* The worker table's columns: in full, and below UI_WIDE columns narrowed, without the
 * timings, so the outcome columns always show. */
struct columns {
	int gpu, worker, status, task, ok, to, restarts;
	bool timings;
	const char *worker_name, *restarts_name;
	bool times; /* where each worker's time goes: from UI_WIDE_TIMES columns */
};
static const struct columns wide_columns = {4, 6,    12,       10,         9,    5,
					    8, true, "WORKER", "RESTARTS", false};
static const struct columns narrow_columns = {3, 3, 10, 8, 8, 4, 3, false, "WKR", "RST", false};

struct ui {
	struct host *h;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	bool stop;
	bool color;
	int prev_lines; /* dashboard: lines of the last frame, to draw over */
	double t_samples[SAMPLES];
	uint64_t done_samples[SAMPLES];
	unsigned n_samples;
	double last_plain;
	unsigned failures_shown; /* plain: in this interval */
	struct nvml *nvml;
};

/* The dashboard's terminal: the one the caller named, else standard error. */
static int ui_fd(const struct host *h)
{
	return h->view.fd > 0 ? h->view.fd : 2;
}

int ui_mode_parse(const char *word)
{
	if (!strcmp(word, "off"))
		return UI_OFF;
	if (!strcmp(word, "plain"))
		return UI_PLAIN;
	if (!strcmp(word, "dashboard"))
		return UI_DASHBOARD;
	if (!strcmp(word, "auto"))
		return isatty(2) ? UI_DASHBOARD : UI_PLAIN;
	return -1;
}

static double seconds_since(uint64_t t0)
{
	return (double)(wait_now_ns() - t0) * 1e-9;
}

/* ---- a line of at most `width` visible columns, with optional colour ---- */

struct line {
	char buf[1024];
	size_t len;
	int visible, width;
	bool color;
};

static void l_text(struct line *l, const char *s)
{
	for (; *s && l->visible < l->width && l->len + 8 < sizeof l->buf; s++) {
		l->buf[l->len++] = *s;
		/* Count columns, not bytes: continuation bytes of UTF-8 take none. */
		if (((unsigned char)*s & 0xc0) != 0x80)
			l->visible++;
	}
}

static void l_fmt(struct line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void l_fmt(struct line *l, const char *fmt, ...)
{
	char tmp[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(tmp, sizeof tmp, fmt, ap);
	va_end(ap);
	l_text(l, tmp);
}

static void l_color(struct line *l, const char *sgr)
{
	size_t n = strlen(sgr);
	if (l->color && l->len + n + 8 < sizeof l->buf) {
		memcpy(l->buf + l->len, sgr, n);
		l->len += n;
	}
}

#define C_RESET "\033[0m"
#define C_BOLD "\033[1m"
#define C_DIM "\033[2m"
#define C_RED "\033[31m"
#define C_GREEN "\033[32m"
#define C_YELLOW "\033[33m"
#define C_BLUE "\033[34m"
#define C_CYAN "\033[36m"

static void fmt_duration(char *buf, size_t len, double s)
{
	if (s < 0)
		s = 0;
	unsigned long t = (unsigned long)(s + 0.5);
	if (t >= 3600)
		snprintf(buf, len, "%lu:%02lu:%02lu", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(buf, len, "%lu:%02lu", t / 60, t % 60);
}

static void fmt_short(char *buf, size_t len, double s)
{
	if (s < 1e-3)
		snprintf(buf, len, "%.0fus", s * 1e6);
	else if (s < 1)
		snprintf(buf, len, "%.0fms", s * 1e3);
	else if (s < 100)
		snprintf(buf, len, "%.1fs", s);
	else
		fmt_duration(buf, len, s);
}

/* ---- figures ---- */

struct figures {
	uint64_t generated, ok, failed, timed_out, not_run, done, in_flight, retried, resumed;
	unsigned restarts, setup_failures;
	int64_t total;
	double elapsed, rate_all, rate_now, eta; /* eta < 0: unknown */
};

static void take_figures(struct ui *u, struct figures *f)
{
	struct host *h = u->h;
	f->generated = UI_READ(h->stats.generated);
	f->ok = UI_READ(h->stats.ok);
	f->failed = UI_READ(h->stats.failed);
	f->timed_out = UI_READ(h->stats.timed_out);
	f->not_run = UI_READ(h->stats.not_run);
	f->retried = UI_READ(h->stats.retried);
	f->restarts = UI_READ(h->stats.worker_restarts);
	f->setup_failures = UI_READ(h->stats.setup_failures);
	f->in_flight = UI_READ(h->flow.in_flight);
	f->total = UI_READ(h->flow.total);
	f->done = f->ok + f->failed + f->timed_out;
	f->resumed = UI_READ(h->resume.skipped); /* done by earlier runs: part of the whole job */
	f->elapsed = seconds_since(h->t_start_ns);
	f->rate_all = f->elapsed > 0 ? (double)f->done / f->elapsed : 0;

	/* The recent rate: done-count samples over about RECENT_S. */
	unsigned k = u->n_samples % SAMPLES;
	u->t_samples[k] = f->elapsed;
	u->done_samples[k] = f->done;
	u->n_samples++;
	unsigned oldest = u->n_samples > SAMPLES ? u->n_samples - SAMPLES : 0;
	unsigned j = u->n_samples - 1;
	while (j > oldest && f->elapsed - u->t_samples[(j - 1) % SAMPLES] <= RECENT_S)
		j--;
	double dt = f->elapsed - u->t_samples[j % SAMPLES];
	/* (done goes down at the end of a run whose sink is stuck: the outcomes it never
	 * took, held ones included, count as not run then.) */
	uint64_t was = u->done_samples[j % SAMPLES];
	f->rate_now = dt > 0 ? (double)(f->done > was ? f->done - was : 0) / dt : f->rate_all;

	f->eta = -1;
	if (f->total >= 0) {
		double rate = f->rate_now > 0 ? f->rate_now : f->rate_all;
		uint64_t all = f->done + f->resumed;
		uint64_t left = (uint64_t)f->total > all ? (uint64_t)f->total - all : 0;
		if (rate > 0)
			f->eta = (double)left / rate;
		else if (!left)
			f->eta = 0;
	}
}

/* A worker's status word and colour, from the host's and the worker's own state. */
static const char *worker_status(struct host_worker *w, const char **color)
{
	enum hw_state s = UI_READ(w->state);
	switch (s) {
	case HW_STARTING:
		*color = C_YELLOW;
		return UI_READ(w->restarts) ? "restarting" : "initializing";
	case HW_READY:
		if (atomic_load_explicit(&UI_READ(w->rep)->busy_since_ns, memory_order_relaxed)) {
			*color = C_GREEN;
			return "processing";
		}
		*color = C_DIM;
		return "idle";
	case HW_STOPPING:
		*color = C_CYAN;
		return "finishing";
	case HW_GONE:
	default:
		if (UI_READ(w->end) == END_ERROR) {
			*color = C_RED;
			return "error";
		}
		*color = C_BLUE;
		return "finished";
	}
}

/* ---- dashboard ---- */

static int term_width(void)
{
	struct winsize ws;
	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 10)
		return ws.ws_col;
	return 100;
}

static int term_height(void)
{
	struct winsize ws;
	if (ioctl(2, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 5)
		return ws.ws_row;
	return 40;
}

struct frame {
	char *buf;
	size_t len, cap;
	int lines;
};

static void frame_add(struct frame *fr, struct line *l)
{
	if (fr->len + l->len + 16 > fr->cap) {
		size_t cap = fr->cap ? fr->cap * 2 : 16384;
		while (fr->len + l->len + 16 > cap)
			cap *= 2;
		char *b = realloc(fr->buf, cap);
		if (!b)
			return;
		fr->buf = b;
		fr->cap = cap;
	}
	memcpy(fr->buf + fr->len, "\033[2K", 4); /* clear the old line under it */
	fr->len += 4;
	memcpy(fr->buf + fr->len, l->buf, l->len);
	fr->len += l->len;
	if (l->color) {
		memcpy(fr->buf + fr->len, C_RESET, sizeof C_RESET - 1);
		fr->len += sizeof C_RESET - 1;
	}
	fr->buf[fr->len++] = '\n';
	fr->lines++;
}

static void new_line(struct line *l, const struct ui *u, int width)
{
	l->len = 0;
	l->visible = 0;
	l->width = width - 1; /* never the last column: no automatic wrap */
	l->color = u->color;
}

/* Title: the job, the workers, elapsed, ETA. */
static void dash_title(struct ui *u, struct frame *fr, const struct figures *f, int width,
		       bool final)
{
	struct host *h = u->h;
	struct line l;
	char a[32], b[32];
	new_line(&l, u, width);
	l_color(&l, C_BOLD);
	l_text(&l, "gpud ");
	l_color(&l, C_RESET);
	fmt_duration(a, sizeof a, f->elapsed);
	l_fmt(&l, " %s  |  %u workers on %zu GPUs", h->cfg->path, h->pool.n_gpu_workers,
	      h->cfg->n_gpus);
	if (groups_width(h->cfg) > 1)
		l_fmt(&l, " (%zu each)", groups_width(h->cfg));
	if (h->pool.n > h->pool.n_gpu_workers) /* CPU stages' workers: not on the GPUs */
		l_fmt(&l, " + %u in CPU stages", h->pool.n - h->pool.n_gpu_workers);
	l_fmt(&l, "  |  elapsed %s", a);
	if (h->cfg->ranks > 1)
		l_fmt(&l, "  |  rank %u/%u (%s)", h->cfg->rank, h->cfg->ranks, h->cfg->rank_source);
	if (python_chosen())
		l_fmt(&l, "  |  Python %s %s", python_chosen()->version,
		      python_chosen()->executable);
	if (f->eta >= 0 && !final) {
		fmt_duration(b, sizeof b, f->eta);
		l_fmt(&l, "  |  ETA %s", b);
	}
	if (final)
		l_text(&l, h->ctl.abort ? "  |  aborted" : "  |  done");
	frame_add(fr, &l);
}

/* Progress: a bar when the total is known, else the count. */
static void dash_progress(struct ui *u, struct frame *fr, const struct figures *f, int width)
{
	struct line l;
	new_line(&l, u, width);
	if (f->total > 0) {
		int bar = width - 40;
		if (bar > 50)
			bar = 50;
		if (bar < 10)
			bar = 10;
		double frac = (double)(f->done + f->resumed) / (double)f->total;
		if (frac > 1)
			frac = 1;
		int full = (int)(frac * bar);
		l_text(&l, "[");
		l_color(&l, C_GREEN);
		for (int i = 0; i < full; i++)
			l_text(&l, "#");
		l_color(&l, C_DIM);
		for (int i = full; i < bar; i++)
			l_text(&l, "-");
		l_color(&l, C_RESET);
		l_fmt(&l, "] %llu/%lld  %.1f%%", (unsigned long long)(f->done + f->resumed),
		      (long long)f->total, frac * 100);
		if (f->resumed)
			l_fmt(&l, "  (%llu done before this run)", (unsigned long long)f->resumed);
	} else {
		l_fmt(&l, "%llu done (total unknown)", (unsigned long long)f->done);
	}
	frame_add(fr, &l);
}

/* Outcomes, speed, queue. */
static void dash_outcomes(struct ui *u, struct frame *fr, const struct figures *f, int width)
{
	struct line l;
	new_line(&l, u, width);
	l_color(&l, C_GREEN);
	l_fmt(&l, "ok %llu", (unsigned long long)f->ok);
	l_color(&l, f->failed ? C_RED : C_RESET);
	l_fmt(&l, "  failed %llu", (unsigned long long)f->failed);
	l_color(&l, f->timed_out ? C_YELLOW : C_RESET);
	l_fmt(&l, "  timed out %llu", (unsigned long long)f->timed_out);
	l_color(&l, C_RESET);
	if (f->not_run)
		l_fmt(&l, "  not run %llu", (unsigned long long)f->not_run);
	if (f->retried)
		l_fmt(&l, "  retried %llu", (unsigned long long)f->retried);
	l_fmt(&l, "  |  %.0f/s now, %.0f/s overall  |  queue %llu/%u", f->rate_now, f->rate_all,
	      (unsigned long long)f->in_flight, u->h->cfg->queue_size);
	frame_add(fr, &l);
}

/* The worker table's heading. */
static void dash_table_head(struct ui *u, struct frame *fr, const struct columns *k, int width)
{
	struct line l;
	new_line(&l, u, width);
	l_color(&l, C_BOLD);
	l_fmt(&l, "%*s %*s  %-*s %*s", k->gpu, "GPU", k->worker, k->worker_name, k->status,
	      "STATUS", k->task, "TASK");
	if (k->timings)
		l_fmt(&l, " %9s %9s", "RUNNING", "LAST");
	if (k->times)
		l_fmt(&l, " %4s %4s %4s %4s %4s %-13s", "WAIT", "UNPK", "USER", "BACK", "IDLE",
		      "CALLS");
	l_fmt(&l, " %*s %6s %*s %*s", k->ok, "OK", "FAILED", k->to, "T/O", k->restarts,
	      k->restarts_name);
	if (u->h->cfg->batch_size > 1)
		l_fmt(&l, " %5s", "BATCH");
	if (u->nvml)
		l_fmt(&l, " %5s %15s", "UTIL", "MEMORY");
	frame_add(fr, &l);
}

/* A worker's NVML figures: utilisation and memory of each of its GPUs, in order. */
static void dash_worker_nvml(struct ui *u, struct line *l, const struct host_worker *w)
{
	const struct cfg *c = u->h->cfg;
	long g = groups_width(c) > 1 ? groups_of_gpu(c, w->gpu_id) : -1;
	size_t n = g < 0 ? 1 : groups_width(c), first = g < 0 ? 0 : groups_first(c, (size_t)g);
	for (size_t i = 0; u->nvml && i < n; i++) {
		int id = g < 0 ? w->gpu_id : c->gpus[first + i];
		struct nvml_sample ns;
		if (nvml_sample(u->nvml, host_bus_id(u->h, id), id, &ns) == 0)
			l_fmt(l, " %4u%% %6.1f/%5.1fG", ns.util, ns.mem_used / 1e9,
			      ns.mem_total / 1e9);
	}
}

/* A batching worker's batch size now: below batch_size (in yellow) after its calls ran
 * out of memory (workers/fit.h). */
static void dash_batch(struct ui *u, struct line *l, const struct host_worker *w)
{
	uint32_t max = u->h->cfg->batch_size, now = fit_batch_now(u->h, w);
	if (max <= 1)
		return;
	l_color(l, now < max ? C_YELLOW : C_RESET);
	l_fmt(l, " %5u", now);
	l_color(l, C_RESET);
}

/* Where a worker's time went since its setup (workers/times.h), in percent: waiting for
 * tasks, unpacking, the user's code, handing back, idle; then its calls' sizes
 * (smallest/median/largest). */
static void dash_times(struct line *l, const struct host_worker *w)
{
	struct worker_times t;
	times_of(w, &t);
	uint64_t run =
		t.wall_ns - (t.phase_ns[PH_SETUP] < t.wall_ns ? t.phase_ns[PH_SETUP] : t.wall_ns);
	static const enum shm_phase shown[] = {PH_WAIT, PH_UNPACK, PH_USER, PH_HANDBACK, PH_IDLE};
	for (size_t i = 0; i < sizeof shown / sizeof *shown; i++) {
		if (run)
			l_fmt(l, " %3.0f%%", 100.0 * (double)t.phase_ns[shown[i]] / (double)run);
		else
			l_fmt(l, " %4s", "-");
	}
	uint32_t median;
	char calls[48];
	if (times_calls(&t, &median))
		snprintf(calls, sizeof calls, "%u/%u/%u", t.call_min, median, t.call_max);
	else
		snprintf(calls, sizeof calls, "-");
	l_fmt(l, " %-13s", calls);
}

/* One worker's row: status, its task and timings, its counts, its batch size, its GPUs'
 * NVML figures. */
static void dash_worker_row(struct ui *u, struct frame *fr, struct host_worker *w,
			    const struct columns *k, int width)
{
	struct line l;
	char a[32], b[32];
	const char *color;
	const char *status = worker_status(w, &color);
	new_line(&l, u, width);
	char gpus[GROUPS_LABEL];
	l_fmt(&l, "%*s %*d  ", k->gpu,
	      w->gpu_id < 0 ? "cpu" /* a CPU stage's worker */
			    : groups_label(u->h->cfg, w->gpu_id, gpus, sizeof gpus),
	      k->worker, w->index);
	l_color(&l, color);
	l_fmt(&l, "%-*.*s", k->status, k->status, status);
	l_color(&l, C_RESET);
	struct shm_report *rep = UI_READ(w->rep);
	uint64_t since = atomic_load_explicit(&rep->busy_since_ns, memory_order_relaxed);
	bool busy = UI_READ(w->state) == HW_READY && since;
	if (busy)
		l_fmt(&l, " %*llu", k->task,
		      (unsigned long long)atomic_load_explicit(&rep->cur_task,
							       memory_order_relaxed));
	else
		l_fmt(&l, " %*s", k->task, "-");
	if (k->timings) {
		double last = UI_READ(w->last_seconds);
		if (busy)
			fmt_short(a, sizeof a, (double)(wait_now_ns() - since) * 1e-9);
		else
			snprintf(a, sizeof a, "-");
		if (last > 0)
			fmt_short(b, sizeof b, last);
		else
			snprintf(b, sizeof b, "-");
		l_fmt(&l, " %9s %9s", a, b);
	}
	if (k->times)
		dash_times(&l, w);
	uint64_t wf = UI_READ(w->failed), wt = UI_READ(w->timeouts);
	l_fmt(&l, " %*llu", k->ok, (unsigned long long)UI_READ(w->ok));
	l_color(&l, wf ? C_RED : C_RESET);
	l_fmt(&l, " %6llu", (unsigned long long)wf);
	l_color(&l, wt ? C_YELLOW : C_RESET);
	l_fmt(&l, " %*llu", k->to, (unsigned long long)wt);
	l_color(&l, C_RESET);
	l_fmt(&l, " %*u", k->restarts, UI_READ(w->restarts));
	dash_batch(u, &l, w);
	if (w->gpu_id >= 0)
		dash_worker_nvml(u, &l, w);
	frame_add(fr, &l);
}

/* One row per worker, as many as the terminal holds. Below UI_WIDE columns the timings
 * go and the rest narrows, so the outcome columns always show. */
static void dash_workers(struct ui *u, struct frame *fr, int width, int height)
{
	struct host *h = u->h;
	struct columns wide = width < UI_WIDE ? narrow_columns : wide_columns;
	wide.times = width >= UI_WIDE_TIMES;
	const struct columns *k = &wide;
	/* A worker on several GPUs (gpus_per_worker) shows them all: "0,1". */
	for (size_t g = 0; groups_width(h->cfg) > 1 && g < groups_count(h->cfg); g++) {
		char ids[GROUPS_LABEL];
		int len = (int)strlen(groups_ids(h->cfg, g, ids, sizeof ids));
		if (len > wide.gpu)
			wide.gpu = len;
	}
	dash_table_head(u, fr, k, width);
	int room = height - 10;
	unsigned shown = 0;
	for (unsigned i = 0; i < h->pool.n; i++) {
		if ((int)shown >= room && i + 1 < h->pool.n) {
			struct line l;
			new_line(&l, u, width);
			l_fmt(&l, "  ... %u more workers (a taller terminal shows them)",
			      h->pool.n - i);
			frame_add(fr, &l);
			break;
		}
		dash_worker_row(u, fr, &h->pool.w[i], k, width);
		shown++;
	}
}

/* The last messages (failures, worker deaths), and where the workers' output is. */
static void dash_notes(struct ui *u, struct frame *fr, int width, int height)
{
	struct host *h = u->h;
	struct line l;
	pthread_mutex_lock(&h->view.notes.lock);
	uint64_t count = h->view.notes.count;
	uint64_t first = count > DASH_NOTES ? count - DASH_NOTES : 0;
	if (count) {
		new_line(&l, u, width);
		l_color(&l, C_BOLD);
		l_text(&l, "recent:");
		frame_add(fr, &l);
	}
	for (uint64_t k = first; k < count && (int)(fr->lines) < height - 2; k++) {
		new_line(&l, u, width);
		l_color(&l, h->view.notes.error[k % HOST_NOTES] ? C_RED : C_YELLOW);
		l_fmt(&l, "  %s", h->view.notes.text[k % HOST_NOTES]);
		frame_add(fr, &l);
	}
	pthread_mutex_unlock(&h->view.notes.lock);

	if (h->files.log_dir) {
		new_line(&l, u, width);
		l_color(&l, C_DIM);
		l_fmt(&l, "worker output: %s/worker-<id>.log", h->files.log_dir);
		frame_add(fr, &l);
	}
}

/* One write: back over the last frame, the new one, then clear what it left. */
static void dash_write(struct ui *u, const struct frame *fr, bool final)
{
	char head[64];
	int n = 0;
	if (u->prev_lines)
		n = snprintf(head, sizeof head, "\033[?25l\r\033[%dA", u->prev_lines);
	else
		n = snprintf(head, sizeof head, "\033[?25l");
	char *out = malloc((size_t)n + fr->len + 32);
	if (out) {
		size_t len = 0;
		memcpy(out, head, (size_t)n);
		len = (size_t)n;
		memcpy(out + len, fr->buf, fr->len);
		len += fr->len;
		len += (size_t)snprintf(out + len, 32, "\033[J%s", final ? "\033[?25h" : "");
		for (size_t off = 0; off < len;) {
			ssize_t w = write(ui_fd(u->h), out + off, len - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0)
				break;
			off += (size_t)w;
		}
		free(out);
	}
	u->prev_lines = fr->lines;
}

/* Stage s's line for the dashboard and plain progress, from its figures (figures.h):
 * its workers, busy fraction (time in the user's calls) and the CPU part of it, queue
 * and counts; s = n_stages is the GPU workers'. */
static void stage_line(const struct host *h, unsigned s, char *buf, size_t len)
{
	struct host_stage *st = &h->pool.stages[s];
	struct stage_figures *g = &st->fig;
	snprintf(buf, len,
		 "%s %-12s %3u/%-3u workers  busy %3.0f%% (cpu %3.0f%%)  queued %-6llu ok %llu  "
		 "failed %llu",
		 s < h->pool.n_stages ? "stage" : "     ", st->name, UI_READ(g->alive),
		 UI_READ(g->workers), 100 * UI_READ(g->busy), 100 * UI_READ(g->busy_cpu),
		 (unsigned long long)UI_READ(g->queued), (unsigned long long)UI_READ(g->ok),
		 (unsigned long long)(UI_READ(g->failed) + UI_READ(g->timeouts)));
}

/* With CPU stages, a row per stage and one for the GPU workers: where the time goes. */
static void dash_stages(struct ui *u, struct frame *fr, int width)
{
	struct host *h = u->h;
	for (unsigned s = 0; h->pool.stages && s <= h->pool.n_stages; s++) {
		struct line l;
		char text[256];
		stage_line(h, s, text, sizeof text);
		new_line(&l, u, width);
		l_text(&l, text);
		frame_add(fr, &l);
	}
}

/* A frame of the dashboard: heading lines, the worker table, the last messages. */
static void draw_dashboard(struct ui *u, bool final)
{
	struct figures f;
	struct frame fr = {0};
	int width = term_width(), height = term_height();

	take_figures(u, &f);
	dash_title(u, &fr, &f, width, final);
	dash_progress(u, &fr, &f, width);
	dash_outcomes(u, &fr, &f, width);
	dash_stages(u, &fr, width);
	dash_workers(u, &fr, width, height);
	dash_notes(u, &fr, width, height);
	dash_write(u, &fr, final);
	free(fr.buf);
}

/* ---- plain mode ---- */

static void plain_progress(struct ui *u, bool final)
{
	struct figures f;
	char a[32], b[32];
	take_figures(u, &f);
	fmt_duration(a, sizeof a, f.elapsed);
	uint64_t all = f.done + f.resumed;
	if (f.total >= 0)
		fprintf(LOG_INFO, "gpud: [%s] %llu/%lld (%.1f%%)", a, (unsigned long long)all,
			(long long)f.total,
			f.total ? 100.0 * (double)all / (double)f.total : 100.0);
	else
		fprintf(LOG_INFO, "gpud: [%s] %llu done", a, (unsigned long long)all);
	if (f.resumed)
		fprintf(LOG_INFO, " (%llu before this run)", (unsigned long long)f.resumed);
	fprintf(LOG_INFO,
		" ok %llu failed %llu timed out %llu | %.0f/s now, %.0f/s overall | queue %llu",
		(unsigned long long)f.ok, (unsigned long long)f.failed,
		(unsigned long long)f.timed_out, f.rate_now, f.rate_all,
		(unsigned long long)f.in_flight);
	if (f.eta >= 0 && !final) {
		fmt_duration(b, sizeof b, f.eta);
		fprintf(LOG_INFO, " | ETA %s", b);
	}
	pthread_mutex_lock(&u->h->view.notes.lock);
	uint64_t hidden = u->h->view.notes.hidden;
	u->h->view.notes.hidden = 0;
	pthread_mutex_unlock(&u->h->view.notes.lock);
	if (hidden && u->h->files.failures)
		fprintf(LOG_INFO, " | %llu more messages not shown: every failure is in %s/%s",
			(unsigned long long)hidden, u->h->files.log_dir, FILES_FAILURES);
	else if (hidden)
		fprintf(LOG_INFO, " | %llu more messages not shown", (unsigned long long)hidden);
	fputc('\n', LOG_INFO);
	for (unsigned s = 0; u->h->pool.stages && s <= u->h->pool.n_stages; s++) {
		char text[256];
		stage_line(u->h, s, text, sizeof text);
		fprintf(LOG_INFO, "gpud:   %s\n", text);
	}
	u->failures_shown = 0;
}

/* Plain mode: failures as lines, in order, at most PLAIN_FAILURES an interval; the
 * rest are counted, and the progress line says where they all are. */
static void plain_failures(struct ui *u)
{
	struct host *h = u->h;
	pthread_mutex_lock(&h->view.notes.lock);
	for (; h->view.notes.printed < h->view.notes.count; h->view.notes.printed++) {
		if (u->failures_shown >= PLAIN_FAILURES) {
			h->view.notes.hidden++;
			continue;
		}
		fprintf(LOG_WARN, "gpud: %s\n",
			h->view.notes.text[h->view.notes.printed % HOST_NOTES]);
		u->failures_shown++;
	}
	pthread_mutex_unlock(&h->view.notes.lock);
}

static void *ui_main(void *arg)
{
	struct ui *u = arg;
	struct host *h = u->h;
	double period = h->view.mode == UI_DASHBOARD ? 1.0 / h->cfg->refresh_rate : 0.1;
	pthread_mutex_lock(&u->lock);
	while (!u->stop) {
		pthread_mutex_unlock(&u->lock);
		if (h->view.mode == UI_DASHBOARD) {
			draw_dashboard(u, false);
		} else {
			plain_failures(u);
			double now = seconds_since(h->t_start_ns);
			if (now - u->last_plain >= h->cfg->plain_interval) {
				plain_progress(u, false);
				u->last_plain = now;
			}
		}
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		long ns = ts.tv_nsec + (long)(period * 1e9);
		ts.tv_sec += ns / 1000000000L;
		ts.tv_nsec = ns % 1000000000L;
		pthread_mutex_lock(&u->lock);
		if (!u->stop)
			pthread_cond_timedwait(&u->wake, &u->lock, &ts);
	}
	pthread_mutex_unlock(&u->lock);
	return NULL;
}

/* The dashboard hides the cursor: a crash of the host must not leave it hidden. */
static int crash_fd = 2;

static void on_crash(int sig)
{
	static const char show[] = "\033[?25h\n";
	if (write(crash_fd, show, sizeof show - 1) < 0) {
		/* nothing more to do */
	}
	raise(sig); /* SA_RESETHAND: now with the default action */
}

static void cursor_on_crash(void)
{
	static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_crash;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESETHAND | SA_NODEFER;
	for (size_t i = 0; i < sizeof sigs / sizeof *sigs; i++) {
		struct sigaction old;
		/* One already handled (a sanitizer's) stays. */
		if (sigaction(sigs[i], NULL, &old) == 0 && old.sa_handler == SIG_DFL)
			sigaction(sigs[i], &sa, NULL);
	}
}

struct ui *ui_start(struct host *h)
{
	if (h->view.mode == UI_OFF)
		return NULL;
	struct ui *u = calloc(1, sizeof *u);
	if (!u)
		return NULL;
	u->h = h;
	const char *term = getenv("TERM");
	u->color = h->view.mode == UI_DASHBOARD && !getenv("NO_COLOR") && isatty(ui_fd(h)) &&
		   term && strcmp(term, "dumb") != 0;
	if (h->view.mode == UI_DASHBOARD) {
		u->nvml = nvml_open();
		crash_fd = ui_fd(h);
		cursor_on_crash();
	}
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->wake, NULL);
	/* Signals are the host loop's: the drawing thread never takes one. */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int started = pthread_create(&u->thread, NULL, ui_main, u);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (started != 0) {
		nvml_close(u->nvml);
		free(u);
		return NULL;
	}
	return u;
}

void ui_stop(struct ui *u)
{
	if (!u)
		return;
	pthread_mutex_lock(&u->lock);
	u->stop = true;
	pthread_cond_signal(&u->wake);
	pthread_mutex_unlock(&u->lock);
	pthread_join(u->thread, NULL);
	if (u->h->view.mode == UI_DASHBOARD) {
		draw_dashboard(u, true);
	} else {
		plain_failures(u);
		plain_progress(u, true);
	}
	nvml_close(u->nvml);
	pthread_mutex_destroy(&u->lock);
	pthread_cond_destroy(&u->wake);
	free(u);
}

void ui_suspend(struct host *h, bool stopping)
{
	static const char show[] = "\033[?25h\n";
	if (stopping && h->view.mode == UI_DASHBOARD && write(ui_fd(h), show, sizeof show - 1) < 0)
		return;
}
