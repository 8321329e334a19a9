/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "view/metrics.h"
#include "util/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "job/groups.h"
#include "host.h"
#include "view/httpd.h"
#include "view/nvml.h"
#include "util/textio.h"
#include "workers/fit.h"
#include "workers/times.h"
#include "util/notes.h"

const double metrics_sec_bounds[METRICS_SEC_BUCKETS] = {
	1e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300};

struct metrics_srv {
	struct host *h;
	int listen_fd;
	int wake[2]; /* a byte here stops the thread */
	pthread_t thread;
	bool running;
	struct nvml *nvml;
	bool file_failed;    /* said once */
	struct httpd *httpd; /* metrics_listen's clients */
};

static int listen_on(const char *host, unsigned port, char *why, size_t len)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1) {
		snprintf(why, len, "%s is not an IPv4 address", host);
		return -1;
	}
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(why, len, "socket: %s", strerror(errno));
		return -1;
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0) {
		snprintf(why, len, "cannot listen on %s:%u: %s", host, port, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int metrics_can_listen(const char *host, unsigned port, char *why, size_t len)
{
	int fd = listen_on(host, port, why, len);
	if (fd < 0)
		return -1;
	close(fd);
	return 0;
}

static void counter(FILE *o, const char *name, const char *help, uint64_t v)
{
	fprintf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
		(unsigned long long)v);
}

static void gauge(FILE *o, const char *name, const char *help, double v)
{
	fprintf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %.9g\n", name, help, name, name, v);
}

/* A group's label: gpu="<its first GPU>", and with gpus_per_worker > 1 gpus="0,1". */
static const char *group_label(const struct cfg *c, size_t g, char *buf, size_t len)
{
	char ids[GROUPS_LABEL];
	int first = c->gpus[groups_first(c, g)];
	if (groups_width(c) > 1)
		snprintf(buf, len, "gpu=\"%d\",gpus=\"%s\"", first,
			 groups_ids(c, g, ids, sizeof ids));
	else
		snprintf(buf, len, "gpu=\"%d\"", first);
	return buf;
}

/* The counters by worker group (one GPU, or gpus_per_worker of them: labelled by the
 * first, job/groups.h); NVML's figures by GPU, every GPU of every group. */
static void per_gpu(FILE *o, struct host *h, struct nvml *nvml)
{
	const struct cfg *c = h->cfg;
	static const char *const outcomes[] = {"ok", "error", "timeout"};
	size_t groups = groups_count(c);
	char l[GROUPS_LABEL + 32];
	fprintf(o, "# HELP gpud_gpu_task_attempts_total Task runs that ended on the GPU's "
		   "workers, by how (every attempt, retries included).\n"
		   "# TYPE gpud_gpu_task_attempts_total counter\n");
	for (size_t g = 0; g < groups; g++) {
		uint64_t n[3] = {0, 0, 0};
		for (unsigned k = 0; k < h->pool.n; k++) {
			struct host_worker *w = &h->pool.w[k];
			if ((size_t)k / c->workers_per_gpu != g)
				continue;
			n[0] += UI_READ(w->ok);
			n[1] += UI_READ(w->failed);
			n[2] += UI_READ(w->timeouts);
		}
		for (int i = 0; i < 3; i++)
			fprintf(o, "gpud_gpu_task_attempts_total{%s,outcome=\"%s\"} %llu\n",
				group_label(c, g, l, sizeof l), outcomes[i],
				(unsigned long long)n[i]);
	}
	fprintf(o, "# HELP gpud_gpu_workers_ready Workers of the GPU taking tasks.\n"
		   "# TYPE gpud_gpu_workers_ready gauge\n");
	for (size_t g = 0; g < groups; g++) {
		unsigned ready = 0;
		for (unsigned k = 0; k < h->pool.n; k++)
			ready += (size_t)k / c->workers_per_gpu == g &&
				 UI_READ(h->pool.w[k].state) == HW_READY;
		fprintf(o, "gpud_gpu_workers_ready{%s} %u\n", group_label(c, g, l, sizeof l),
			ready);
	}
	fprintf(o,
		"# HELP gpud_gpu_worker_restarts_total Worker processes of the GPU "
		"started again after one ended.\n# TYPE gpud_gpu_worker_restarts_total counter\n");
	for (size_t g = 0; g < groups; g++) {
		unsigned r = 0;
		for (unsigned k = 0; k < h->pool.n; k++)
			if ((size_t)k / c->workers_per_gpu == g)
				r += UI_READ(h->pool.w[k].restarts);
		fprintf(o, "gpud_gpu_worker_restarts_total{%s} %u\n",
			group_label(c, g, l, sizeof l), r);
	}
	fprintf(o, "# HELP gpud_gpu_retired 1 when the GPU was retired (its workers crashed "
		   "past max_worker_restarts).\n# TYPE gpud_gpu_retired gauge\n");
	for (size_t g = 0; g < groups; g++)
		fprintf(o, "gpud_gpu_retired{%s} %d\n", group_label(c, g, l, sizeof l),
			UI_READ(h->pool.retired[g]) ? 1 : 0);
	if (!nvml)
		return;
	struct nvml_sample s[CFG_MAX_GPUS];
	bool have[CFG_MAX_GPUS];
	for (size_t g = 0; g < c->n_gpus && g < CFG_MAX_GPUS; g++)
		have[g] = nvml_sample(nvml, host_bus_id(h, c->gpus[g]), c->gpus[g], &s[g]) == 0;
	fprintf(o, "# HELP gpud_gpu_utilization_ratio GPU busy time over NVML's last sample "
		   "period, 0 to 1.\n# TYPE gpud_gpu_utilization_ratio gauge\n");
	for (size_t g = 0; g < c->n_gpus; g++)
		if (have[g])
			fprintf(o, "gpud_gpu_utilization_ratio{gpu=\"%d\"} %.2f\n", c->gpus[g],
				s[g].util / 100.0);
	fprintf(o, "# HELP gpud_gpu_memory_used_bytes GPU memory in use (NVML).\n"
		   "# TYPE gpud_gpu_memory_used_bytes gauge\n");
	for (size_t g = 0; g < c->n_gpus; g++)
		if (have[g])
			fprintf(o, "gpud_gpu_memory_used_bytes{gpu=\"%d\"} %llu\n", c->gpus[g],
				s[g].mem_used);
	fprintf(o, "# HELP gpud_gpu_memory_total_bytes GPU memory (NVML).\n"
		   "# TYPE gpud_gpu_memory_total_bytes gauge\n");
	for (size_t g = 0; g < c->n_gpus; g++)
		if (have[g])
			fprintf(o, "gpud_gpu_memory_total_bytes{gpu=\"%d\"} %llu\n", c->gpus[g],
				s[g].mem_total);
}

/* Batches that fit (workers/fit.h): the splits, and each worker's batch size now. */
static void fit_metrics(FILE *o, const struct host *h)
{
	counter(o, "gpud_oom_splits_total",
		"Calls that ran out of memory and were run again in halves.",
		fit_oom_splits_total(h));
	fprintf(o, "# HELP gpud_worker_batch_size The most tasks a worker's next call gets "
		   "(batch_size, lowered after calls ran out of memory).\n"
		   "# TYPE gpud_worker_batch_size gauge\n");
	for (unsigned i = 0; i < h->pool.n; i++)
		fprintf(o, "gpud_worker_batch_size{worker=\"%d\",gpu=\"%d\"} %u\n",
			h->pool.w[i].index, h->pool.w[i].gpu_id, fit_batch_now(h, &h->pool.w[i]));
}

/* Where each worker's time goes (workers/times.h): seconds by phase, and its calls by
 * size as a histogram. */
static void times_metrics(FILE *o, const struct host *h)
{
	struct worker_times *t = calloc(h->pool.n ? h->pool.n : 1, sizeof *t);
	if (!t)
		return;
	for (unsigned i = 0; i < h->pool.n; i++)
		times_of(&h->pool.w[i], &t[i]);
	fprintf(o, "# HELP gpud_worker_seconds_total Where a worker's time went, by phase: setup "
		   "(and cleanup), waiting (for tasks), unpacking, user (process or "
		   "process_batch), handing_back (results), idle (after the input ended).\n"
		   "# TYPE gpud_worker_seconds_total counter\n");
	for (unsigned i = 0; i < h->pool.n; i++)
		for (unsigned p = 0; p < PH_COUNT; p++)
			fprintf(o,
				"gpud_worker_seconds_total{worker=\"%d\",gpu=\"%d\",phase=\"%s\"} %.6f\n",
				h->pool.w[i].index, h->pool.w[i].gpu_id, times_phase_names[p],
				(double)t[i].phase_ns[p] * 1e-9);
	fprintf(o, "# HELP gpud_worker_cpu_seconds_total CPU time of a worker's processes "
		   "(thread=\"all\") and of their main threads (thread=\"main\"), which make "
		   "every call of the plugin.\n"
		   "# TYPE gpud_worker_cpu_seconds_total counter\n");
	for (unsigned i = 0; i < h->pool.n; i++)
		fprintf(o,
			"gpud_worker_cpu_seconds_total{worker=\"%d\",gpu=\"%d\",thread=\"all\"} "
			"%.6f\n"
			"gpud_worker_cpu_seconds_total{worker=\"%d\",gpu=\"%d\",thread=\"main\"} "
			"%.6f\n",
			h->pool.w[i].index, h->pool.w[i].gpu_id, (double)t[i].cpu_ns * 1e-9,
			h->pool.w[i].index, h->pool.w[i].gpu_id, (double)t[i].main_cpu_ns * 1e-9);
	fprintf(o, "# HELP gpud_worker_user_cpu_seconds_total Of a worker's time in the "
		   "user's calls (phase=\"user\"), the CPU time of the thread making them.\n"
		   "# TYPE gpud_worker_user_cpu_seconds_total counter\n");
	for (unsigned i = 0; i < h->pool.n; i++)
		fprintf(o, "gpud_worker_user_cpu_seconds_total{worker=\"%d\",gpu=\"%d\"} %.6f\n",
			h->pool.w[i].index, h->pool.w[i].gpu_id, (double)t[i].user_cpu_ns * 1e-9);
	fprintf(o, "# HELP gpud_worker_call_size Items per call of a worker's process or "
		   "process_batch, as its calls got them.\n"
		   "# TYPE gpud_worker_call_size histogram\n");
	for (unsigned i = 0; i < h->pool.n; i++) {
		uint64_t cum = 0;
		int wi = h->pool.w[i].index, g = h->pool.w[i].gpu_id;
		for (unsigned k = 0; k < SHM_CALL_BUCKETS; k++) {
			cum += t[i].calls[k];
			fprintf(o,
				"gpud_worker_call_size_bucket{worker=\"%d\",gpu=\"%d\",le=\"%u\"} %llu\n",
				wi, g, 1u << k, (unsigned long long)cum);
		}
		fprintf(o,
			"gpud_worker_call_size_bucket{worker=\"%d\",gpu=\"%d\",le=\"+Inf\"} %llu\n"
			"gpud_worker_call_size_sum{worker=\"%d\",gpu=\"%d\"} %llu\n"
			"gpud_worker_call_size_count{worker=\"%d\",gpu=\"%d\"} %llu\n",
			wi, g, (unsigned long long)cum, wi, g, (unsigned long long)t[i].items, wi,
			g, (unsigned long long)cum);
	}
	free(t);
}

/* The stages' Prometheus figures, labelled by stage, from their figures (figures.h). */
static void stage_metrics(const struct host *h, FILE *o)
{
	if (!h->pool.stages)
		return;
	fprintf(o, "# HELP gpud_stage_workers Workers of the stage set up or setting up "
		   "(stage=\"gpu\": the GPU workers).\n# TYPE gpud_stage_workers gauge\n");
	for (unsigned s = 0; s <= h->pool.n_stages; s++)
		fprintf(o, "gpud_stage_workers{stage=\"%s\"} %u\n", h->pool.stages[s].name,
			UI_READ(h->pool.stages[s].fig.alive));
	fprintf(o, "# HELP gpud_stage_busy_ratio The stage's workers' time in process() over "
		   "the run's time, 0 to 1.\n# TYPE gpud_stage_busy_ratio gauge\n");
	for (unsigned s = 0; s <= h->pool.n_stages; s++)
		fprintf(o, "gpud_stage_busy_ratio{stage=\"%s\"} %.4f\n", h->pool.stages[s].name,
			UI_READ(h->pool.stages[s].fig.busy));
	fprintf(o, "# HELP gpud_stage_busy_cpu_ratio Of gpud_stage_busy_ratio, the part that "
		   "was CPU time of the threads making the calls (Python, NumPy: not the GPU), "
		   "0 to the busy ratio.\n# TYPE gpud_stage_busy_cpu_ratio gauge\n");
	for (unsigned s = 0; s <= h->pool.n_stages; s++)
		fprintf(o, "gpud_stage_busy_cpu_ratio{stage=\"%s\"} %.4f\n", h->pool.stages[s].name,
			UI_READ(h->pool.stages[s].fig.busy_cpu));
	fprintf(o, "# HELP gpud_stage_queued Tasks waiting in front of the stage.\n"
		   "# TYPE gpud_stage_queued gauge\n");
	for (unsigned s = 0; s <= h->pool.n_stages; s++)
		fprintf(o, "gpud_stage_queued{stage=\"%s\"} %llu\n", h->pool.stages[s].name,
			(unsigned long long)UI_READ(h->pool.stages[s].fig.queued));
	fprintf(o, "# HELP gpud_stage_task_attempts_total Task runs that ended in the stage, "
		   "by how.\n# TYPE gpud_stage_task_attempts_total counter\n");
	for (unsigned s = 0; s <= h->pool.n_stages; s++) {
		struct host_stage *st = &h->pool.stages[s];
		uint64_t n[3] = {UI_READ(st->fig.ok), UI_READ(st->fig.failed),
				 UI_READ(st->fig.timeouts)};
		static const char *const outcomes[] = {"ok", "error", "timeout"};
		for (int i = 0; i < 3; i++)
			fprintf(o,
				"gpud_stage_task_attempts_total{stage=\"%s\",outcome=\"%s\"} %llu\n",
				st->name, outcomes[i], (unsigned long long)n[i]);
	}
}

static void render(struct host *h, FILE *o, int exit_status, struct nvml *nvml)
{
	struct gpud_stats *s = &h->stats;
	struct metrics_hist *m = h->view.metrics;
	fprintf(o, "# HELP gpud_tasks_total Tasks by final outcome (a retried task counts "
		   "once, when it ends).\n# TYPE gpud_tasks_total counter\n");
	fprintf(o, "gpud_tasks_total{outcome=\"ok\"} %llu\n", (unsigned long long)UI_READ(s->ok));
	fprintf(o, "gpud_tasks_total{outcome=\"error\"} %llu\n",
		(unsigned long long)UI_READ(s->failed));
	fprintf(o, "gpud_tasks_total{outcome=\"timeout\"} %llu\n",
		(unsigned long long)UI_READ(s->timed_out));
	fprintf(o, "gpud_tasks_total{outcome=\"not_run\"} %llu\n",
		(unsigned long long)UI_READ(s->not_run));
	counter(o, "gpud_tasks_generated_total", "Tasks the generator yielded.",
		UI_READ(s->generated));
	if (UI_READ(h->flow.total) >= 0)
		gauge(o, "gpud_tasks_expected", "Tasks the generator said it would yield.",
		      (double)UI_READ(h->flow.total));
	/* Which share of the job this is: each rank's figures side by side in one
	 * dashboard (rank and ranks as labels). */
	fprintf(o,
		"# HELP gpud_rank_info This process's rank, the number of ranks and how ids "
		"are shared.\n# TYPE gpud_rank_info gauge\n"
		"gpud_rank_info{rank=\"%u\",ranks=\"%u\",shares=\"%s\"} 1\n",
		h->cfg->rank, h->cfg->ranks, h->claims ? "dynamic" : "static");
	if (h->claims) {
		struct claims *cl = h->claims;
		counter(o, "gpud_share_claims_total", "Claims this rank made (dynamic shares).",
			atomic_load_explicit(&cl->pub_claims, memory_order_relaxed));
		gauge(o, "gpud_share_claimed_tasks", "Task ids in this rank's claims.",
		      (double)atomic_load_explicit(&cl->pub_ids, memory_order_relaxed));
		gauge(o, "gpud_share_claim_seconds", "Seconds this rank spent claiming.",
		      (double)atomic_load_explicit(&cl->pub_ns, memory_order_relaxed) * 1e-9);
	}
	counter(o, "gpud_retries_total", "Task runs that failed and were run again.",
		UI_READ(s->retried));
	counter(o, "gpud_worker_restarts_total", "Worker processes started again.",
		UI_READ(s->worker_restarts));
	counter(o, "gpud_setup_failures_total", "Worker setups that failed.",
		UI_READ(s->setup_failures));
	gauge(o, "gpud_tasks_in_flight", "Tasks handed to workers and not finished.",
	      (double)UI_READ(h->flow.in_flight));
	gauge(o, "gpud_elapsed_seconds", "Seconds since the run started.",
	      (double)(wait_now_ns() - h->t_start_ns) * 1e-9);
	uint64_t stuck = atomic_load_explicit(&h->out.stuck_ns, memory_order_relaxed);
	gauge(o, "gpud_sink_stuck_seconds",
	      "Seconds the sink's current call has not returned for, once watched (0: none).",
	      stuck ? (double)wait_since(wait_now_ns(), stuck) * 1e-9 : 0);
	gauge(o, "gpud_run_finished", "1 once the run has ended.", exit_status >= 0);
	if (exit_status >= 0)
		gauge(o, "gpud_exit_status",
		      "The run's exit status (0 all ok, 1 some failed, "
		      "3 aborted).",
		      exit_status);

	fprintf(o, "# HELP gpud_task_seconds Time in process() of every task run that "
		   "returned (batched tasks: their call's time shared out).\n"
		   "# TYPE gpud_task_seconds histogram\n");
	uint64_t cum = 0;
	for (unsigned i = 0; i < METRICS_SEC_BUCKETS; i++) {
		cum += UI_READ(m->sec[i]);
		fprintf(o, "gpud_task_seconds_bucket{le=\"%g\"} %llu\n", metrics_sec_bounds[i],
			(unsigned long long)cum);
	}
	cum += UI_READ(m->sec[METRICS_SEC_BUCKETS]);
	fprintf(o, "gpud_task_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
	fprintf(o, "gpud_task_seconds_sum %.9g\ngpud_task_seconds_count %llu\n",
		UI_READ(m->sec_sum), (unsigned long long)cum);
	if (h->cfg->batch_size > 1) {
		fprintf(o, "# HELP gpud_batch_size Tasks per gpud_worker_process_batch call.\n"
			   "# TYPE gpud_batch_size histogram\n");
		cum = 0;
		for (unsigned b = 0; b < METRICS_BATCH_BUCKETS; b++) {
			cum += UI_READ(m->batch[b]);
			fprintf(o, "gpud_batch_size_bucket{le=\"%u\"} %llu\n", 1u << b,
				(unsigned long long)cum);
		}
		cum += UI_READ(m->batch[METRICS_BATCH_BUCKETS]);
		fprintf(o, "gpud_batch_size_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
		fprintf(o, "gpud_batch_size_sum %llu\ngpud_batch_size_count %llu\n",
			(unsigned long long)UI_READ(m->batch_sum), (unsigned long long)cum);
		fit_metrics(o, h);
		times_metrics(o, h);
	}
	per_gpu(o, h, nvml);
	stage_metrics(h, o);
}

/* The text in a malloc'd buffer. */
static char *render_text(struct metrics_srv *m, int exit_status, size_t *len)
{
	char *text = NULL;
	FILE *o = open_memstream(&text, len);
	if (!o)
		return NULL;
	render(m->h, o, exit_status, m->nvml);
	if (fclose(o) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

/* The file, replaced whole: written under a hidden temporary name beside it (one the
 * textfile collector does not read), then renamed over it. */
static void write_file(struct metrics_srv *m, int exit_status)
{
	const char *path = m->h->cfg->metrics_file;
	size_t len = 0;
	char *text = render_text(m, exit_status, &len);
	char tmp[4200];
	const char *slash = strrchr(path, '/');
	int dl = slash ? (int)(slash - path + 1) : 0;
	snprintf(tmp, sizeof tmp, "%.*s.%s.tmp-%ld", dl, path, slash ? slash + 1 : path,
		 (long)getpid());
	int fd = text ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644) : -1;
	int rc = fd < 0 ? -1 : io_write_all(fd, text, len);
	if (fd >= 0 && close(fd) < 0)
		rc = -1;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = -1;
	if (rc < 0) {
		int e = errno;
		if (fd >= 0)
			unlink(tmp);
		if (!m->file_failed)
			ui_say(m->h, UI_EVENT, "cannot write metrics_file %s: %s", path,
			       strerror(e));
		m->file_failed = true;
	}
	free(text);
}

static char *render_live(void *ctx, size_t *len)
{
	return render_text(ctx, -1, len);
}

static void *metrics_main(void *arg)
{
	struct metrics_srv *m = arg;
	const struct cfg *c = m->h->cfg;
	uint64_t period = (uint64_t)(c->metrics_interval * 1e9);
	uint64_t next = wait_now_ns() + period;
	struct pollfd pf[2 + HTTPD_MAX_CONN];
	for (;;) {
		uint64_t now = wait_now_ns();
		if (c->metrics_file && now >= next) {
			write_file(m, -1);
			next = now + period;
		}
		int timeout = c->metrics_file ? (int)((next - now) / 1000000u) + 1 : -1;
		unsigned n = 1;
		pf[0] = (struct pollfd){m->wake[0], POLLIN, 0};
		if (m->httpd) {
			n += httpd_pollfds(m->httpd, pf + 1);
			int t = httpd_timeout_ms(m->httpd, now);
			if (t >= 0 && (timeout < 0 || t < timeout))
				timeout = t;
		}
		int got = poll(pf, n, timeout);
		if (got < 0 && errno != EINTR)
			break;
		if (got > 0 && pf[0].revents)
			break;
		if (m->httpd)
			httpd_handle(m->httpd, pf + 1, got > 0 ? n - 1 : 0, wait_now_ns());
	}
	return NULL;
}

int metrics_start(struct host *h)
{
	const struct cfg *c = h->cfg;
	if (!c->metrics_file && !c->metrics_host)
		return 0;
	struct metrics_srv *m = calloc(1, sizeof *m);
	h->view.metrics = calloc(1, sizeof *h->view.metrics);
	if (!m || !h->view.metrics) {
		free(m);
		fprintf(LOG_ERR, "gpud: out of memory for the metrics\n");
		return -1;
	}
	m->h = h;
	m->listen_fd = -1;
	m->wake[0] = m->wake[1] = -1;
	h->view.srv = m;
	char why[300];
	if (c->metrics_host) {
		m->listen_fd = listen_on(c->metrics_host, c->metrics_port, why, sizeof why);
		if (m->listen_fd < 0) {
			fprintf(LOG_ERR, "gpud: %s: [ui] metrics_listen: %s\n", c->path, why);
			return -1;
		}
		m->httpd = httpd_new(m->listen_fd, render_live, m);
		if (!m->httpd) {
			fprintf(LOG_ERR, "gpud: out of memory for the metrics endpoint\n");
			return -1;
		}
	}
	if (pipe2(m->wake, O_CLOEXEC) < 0) {
		fprintf(LOG_ERR, "gpud: pipe: %s\n", strerror(errno));
		return -1;
	}
	m->nvml = nvml_open();
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int rc = pthread_create(&m->thread, NULL, metrics_main, m);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		fprintf(LOG_ERR, "gpud: cannot start the metrics thread: %s\n", strerror(rc));
		return -1;
	}
	m->running = true;
	return 0;
}

void metrics_stop(struct host *h, int exit_status)
{
	struct metrics_srv *m = h->view.srv;
	if (!m)
		return;
	if (m->running) {
		char b = 1;
		if (write(m->wake[1], &b, 1) < 0)
			perror("gpud: metrics");
		pthread_join(m->thread, NULL);
		m->running = false;
		if (h->cfg->metrics_file && exit_status >= 0)
			write_file(m, exit_status);
	}
	httpd_free(m->httpd);
	if (m->listen_fd >= 0)
		close(m->listen_fd);
	for (int i = 0; i < 2; i++)
		if (m->wake[i] >= 0)
			close(m->wake[i]);
	nvml_close(m->nvml);
	free(m);
	h->view.srv = NULL;
	free(h->view.metrics);
	h->view.metrics = NULL;
}
