/* SPDX-License-Identifier: MIT */
/* The job file: parsing (inih), `--set` overrides, validation, path resolution. */
#ifndef GPUD_CONFIG_H
#define GPUD_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gpud/plugin.h>

#include "job/values.h" /* cfg_parse_size, cfg_resolve */

#define CFG_MAX_BYTES (UINT32_C(1) << 30) /* largest max_task_bytes / max_result_bytes */
#define CFG_MAX_GPUS 1024
#define CFG_MAX_WORKERS 4096
#define CFG_MAX_QUEUE (1u << 24)
#define CFG_MAX_BATCH 65536
#define CFG_MAX_IN_FLIGHT 1024 /* within the default queue_size */
#define CFG_SETUP_TIMEOUT 1800 /* default setup_timeout: half an hour of model loading */
#define CFG_DRAIN_TIMEOUT 20   /* default drain_timeout: well under Slurm's 30 s KillWait */
#define CFG_TIMEOUT_GRACE 5    /* default timeout_grace: an interrupted call's time to return */
#define CFG_MAX_KEYS 4096      /* keys in one plugin section (the worker gets them all) */
/* Largest job file: it is read whole, and /dev/zero or a huge file must not take the
 * memory with it. Thousands of keys take well under a megabyte. */
#define CFG_MAX_FILE (8u << 20)

/* retry_on bits: which failures run again (up to max_retries). */
enum { CFG_RETRY_ERROR = 1, CFG_RETRY_TIMEOUT = 2, CFG_RETRY_CRASH = 4 };

enum { CFG_PIN_AUTO = 0, CFG_PIN_ON = 1, CFG_PIN_OFF = 2 }; /* = enum shm_pin */

/* A plugin section: [worker], [generator] or [sink]. */
struct cfg_section {
	bool present;
	int line;     /* of its first key, 0 when absent */
	char *plugin; /* as written (a name or a path, already resolved) */
	int plugin_line;
	struct gpud_kv *kv; /* every key but `plugin`, file order; owned */
	char **where;       /* kv[i]'s place: "file:line" or "--set ..."; owned */
	size_t count, cap;
	struct gpud_args args; /* view of kv for the plugin */
};

/* A [stage.NAME] section: a worker plugin run in a pool of CPU processes before the
 * GPU workers, in file order (run/stages.c). */
#define CFG_MAX_STAGES 16
struct cfg_stage {
	char *name;             /* NAME, owned */
	int line;               /* its header's line; 0 when it came from --set alone */
	unsigned workers;       /* 0: the default (cores left over by the GPU workers) */
	double task_timeout;    /* the stage's own, or -1: [job]'s */
	int max_retries;        /* the stage's own, or -1: [job]'s */
	struct cfg_section sec; /* plugin and its keys, as [worker]'s (minus `workers`) */
};

enum { CFG_SHARES_STATIC, CFG_SHARES_DYNAMIC };

struct cfg {
	char *path; /* the job file as given */
	char *dir;  /* its folder, absolute */

	/* [job] */
	int *gpus;
	size_t n_gpus;
	bool gpus_all;     /* `gpus = all`: resolved by discovery, n_gpus is 0 until then */
	bool gpus_auto;    /* `gpus = auto`: the launcher's CUDA_VISIBLE_DEVICES (ranks.c) */
	char **gpu_tokens; /* with gpus_auto: slot i's CUDA_VISIBLE_DEVICES token; gpus[i] = i */
	size_t gpu_token_from;    /* ... which is token gpu_token_from + i of the launcher's list */
	unsigned workers_per_gpu; /* workers per group of gpus_per_worker GPUs */
	unsigned gpus_per_worker; /* GPUs each worker sees (job/groups.h) */
	char *gpus_per_worker_at; /* where it was set ("file:line", "--set ..."), or NULL */
	unsigned queue_size;
	double task_timeout;    /* seconds; 0 = none */
	double timeout_grace;   /* seconds a call interrupted at task_timeout (a worker with
				   gpud_worker_interrupt) has to return before it is killed;
				   0 = killed at once, never interrupted */
	double cleanup_timeout; /* seconds a worker's cleanup may take; then it is killed */
	double setup_timeout;   /* seconds a worker's setup may take; then it is killed */
	double drain_timeout;   /* seconds running tasks get after Ctrl-C or SIGTERM; 0 = all */
	double sink_timeout;    /* a sink call stuck this long ends the run as SIGTERM; 0 = never */
	uint64_t base_seed;
	uint32_t max_task_bytes;
	uint32_t max_result_bytes;
	unsigned max_retries;
	unsigned retry_on;            /* CFG_RETRY_* bits */
	unsigned max_worker_restarts; /* per GPU */
	bool ordered;                 /* deliver outcomes to the sink in task-id order */
	unsigned batch_size;          /* most tasks per gpud_worker_process_batch call */
	double batch_wait_ms;         /* how long a worker waits to fill a batch; -1 not set
				       * (cfg_batch_wait_ms) */
	unsigned max_in_flight;       /* most tasks gpud_worker_submit holds at once */
	bool isolate_failures;        /* a batch that fails whole runs again split, to fail
				       * only the tasks that fail alone */
	int pin_memory;               /* CFG_PIN_AUTO, CFG_PIN_ON, CFG_PIN_OFF */
	char *log_dir;                /* where the dashboard puts worker output; NULL = a default */
	char *journal;                /* the journal of finished tasks; NULL with journal_off */
	bool journal_off;
	bool journal_set; /* given in the job file (not the default beside it) */
	/* Where journal, log_dir and metrics_file were set: "file:line" or "--set ...";
	 * NULL when not set (owned). */
	char *journal_at, *log_dir_at, *metrics_file_at;
	char *python, *python_at; /* [job] python and where it was set (job/python.h) */
	/* Ranks (ranks.h): [job] rank/ranks as given (job_ranks 0: not given), and the
	 * rank this process is, with where that came from. */
	unsigned job_rank, job_ranks;
	unsigned rank, ranks;
	int local_rank, local_size;
	char rank_source[48];
	/* Shares (ranks.h, claims.h): CFG_SHARES_STATIC (chunk c to rank c % ranks) or
	 * CFG_SHARES_DYNAMIC (chunks claimed in the `claims` folder as ranks need them);
	 * claims_at: where claims was set, NULL for the default beside the job file. */
	int shares;
	char *claims, *claims_at;
	double lease; /* seconds without a sign of life after which a rank is taken for lost */
	/* What every rank of one job shares, for `gpud merge` (ranks_apply): the worker's and
	 * the generator's plugins and keys as written ({rank} not put in), base_seed. */
	uint64_t job_id;
	/* What the claims folder of dynamic shares holds to: the generator's plugin and keys
	 * as written, the stream whose ids the claims share out (ranks_apply). */
	uint64_t stream_id;

	/* [ui] */
	double refresh_rate;   /* dashboard redraws a second */
	double plain_interval; /* seconds between plain-mode progress lines */
	char *metrics_file;    /* Prometheus text file, rewritten every metrics_interval */
	char *metrics_host;    /* metrics_listen address (numeric IPv4), NULL = none */
	unsigned metrics_port;
	double metrics_interval; /* seconds */

	struct cfg_section worker, generator, sink;
	struct cfg_stage *stages; /* [stage.NAME] sections, file order; owned */
	size_t n_stages;
};

/* What messages and c->path call a job built from `sets` alone (no job file). */
#define CFG_NO_FILE "(job from keys)"

/*
 * Loads the job file at `path` and applies `sets` ("SECTION.KEY=VALUE", in order);
 * path NULL: the job is the sets alone, its folder the current one (libgpud's
 * gpud_job_set). Returns 0, or -1 with one line in err: "file:line: what", or
 * "--set ...: what". On failure *c is freed.
 */
int cfg_load(struct cfg *c, const char *path, char *const *sets, size_t n_sets, char *err,
	     size_t errlen);
/* cfg_load, and on failure what is at fault in *at: CFG_AT_FILE (the file or one of its
 * lines), the index in `sets` of the set at fault, or CFG_AT_JOB (the job as a whole: a
 * required key missing, keys that do not go together). */
#define CFG_AT_JOB (-1L)
#define CFG_AT_FILE (-2L)
int cfg_load_at(struct cfg *c, const char *path, char *const *sets, size_t n_sets, char *err,
		size_t errlen, long *at);
void cfg_free(struct cfg *c);

/* The longest wait to fill a batch when batch_wait_ms is not set, behind a CPU stage:
 * a cap. The wait itself is the time the batch takes to fill at the rate tasks come
 * (the stage's), so a stage that is the bottleneck gives its GPU workers whole batches
 * (the GPU would idle anyway), while one that keeps up costs no wait. */
#define CFG_BATCH_WAIT_AUTO_MS 500

/* How long a worker waits to fill a batch, in ms: batch_wait_ms when set; else
 * CFG_BATCH_WAIT_AUTO_MS for a batching worker behind a CPU stage, 0 otherwise. */
static inline double cfg_batch_wait_ms(const struct cfg *c)
{
	if (c->batch_wait_ms >= 0)
		return c->batch_wait_ms;
	return c->n_stages && c->batch_size > 1 ? CFG_BATCH_WAIT_AUTO_MS : 0;
}

#endif /* GPUD_CONFIG_H */
