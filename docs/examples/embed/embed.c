/* SPDX-License-Identifier: MIT */
/* Embedding gpud: tasks from an in-memory array through a generator callback, every
 * result checked in a sink callback. The worker is the `upper` example plugin
 * (docs/examples/upper.c), which upper-cases its input after [worker] prefix.
 *   cc embed.c $(pkg-config --cflags --libs libgpud) -o embed
 *   ./embed ./libupper.so */
#include <stdio.h>
#include <string.h>

#include <gpud/gpud.h>

static const char *const words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta"};
#define N_WORDS (sizeof words / sizeof *words)

struct feed {
	size_t next;
};

static int feed_next(void *ctx, struct gpud_buf *item, struct gpud_error *err)
{
	struct feed *f = ctx;
	if (f->next == N_WORDS)
		return 0;
	size_t n = strlen(words[f->next]);
	if (n > item->capacity)
		return gpud_fail(err, "word %zu does not fit", f->next);
	memcpy(item->data, words[f->next++], n);
	item->size = n;
	return 1;
}

static int64_t feed_total(void *ctx)
{
	(void)ctx;
	return N_WORDS;
}

struct check {
	unsigned ok[N_WORDS], wrong;
};

static int check_event(void *ctx, const struct gpud_event *ev, struct gpud_error *err)
{
	struct check *c = ctx;
	char want[64];
	if (ev->kind != GPUD_TASK_OK)
		return ev->kind == GPUD_TASK_ERROR
			       ? gpud_fail(err, "task %llu failed: %s",
					   (unsigned long long)ev->task_id, ev->message)
			       : 0;
	const char *w = words[ev->task_id];
	want[0] = '>';
	for (size_t i = 0; w[i]; i++)
		want[i + 1] = (char)(w[i] - 'a' + 'A');
	if (ev->result_size == strlen(w) + 1 && !memcmp(ev->result, want, ev->result_size))
		c->ok[ev->task_id]++;
	else
		c->wrong++;
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s WORKER_PLUGIN.so\n", argv[0]);
		return 2;
	}
	if (gpud_api_version() >> 16 != GPUD_API_MAJOR) {
		fprintf(stderr, "libgpud %s is not API %d\n", gpud_version(), GPUD_API_MAJOR);
		return 2;
	}
	struct feed feed = {0};
	struct check check = {{0}, 0};
	const struct gpud_generator_ops gen = {
		.size = sizeof gen, .next = feed_next, .total = feed_total};
	const struct gpud_sink_ops sink = {.size = sizeof sink, .event = check_event};
	gpud_job *job = gpud_job_new();
	if (!job || gpud_job_set(job, "job.gpus", "0,1") < 0 ||
	    gpud_job_set(job, "worker.plugin", argv[1]) < 0 ||
	    gpud_job_set(job, "worker.prefix", ">") < 0 ||
	    gpud_job_set_generator(job, &gen, &feed) < 0 ||
	    gpud_job_set_sink(job, &sink, &check) < 0) {
		fprintf(stderr, "embed: %s\n", gpud_job_error(job));
		gpud_job_free(job);
		return 2;
	}
	struct gpud_run_options opts = {.size = sizeof opts, .ui = GPUD_UI_OFF};
	int status = gpud_job_run(job, &opts);
	if (status != 0)
		fprintf(stderr, "embed: run ended with %d: %s\n", status, gpud_job_error(job));
	unsigned good = 0;
	for (size_t i = 0; i < N_WORDS; i++)
		good += check.ok[i] == 1;
	printf("embed: %u of %zu results checked ok, %u wrong; %llu ok in the stats\n", good,
	       N_WORDS, check.wrong, (unsigned long long)gpud_job_stats(job)->ok);
	gpud_job_free(job);
	return status != 0 ? status : good == N_WORDS && !check.wrong ? 0 : 1;
}
