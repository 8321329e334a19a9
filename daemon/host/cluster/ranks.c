/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "cluster/ranks.h"
#include "job/keys.h"
#include "util/hash.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An environment variable as a whole number: 1 with *out set, 0 when unset, -1 when set
 * but not a number (said in why). */
static int env_u64(const char *name, uint64_t *out, char *why, size_t len)
{
	const char *v = getenv(name);
	char *end;
	if (!v || !*v)
		return 0;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || *end || v[0] == '-') {
		snprintf(why, len, "%s = '%s' is not a whole number", name, v);
		return -1;
	}
	*out = n;
	return 1;
}

static int set(struct cfg *c, uint64_t rank, uint64_t ranks, const char *source, char *why,
	       size_t len)
{
	if (ranks < 1 || ranks > 1000000 || rank >= ranks) {
		snprintf(why, len,
			 "rank %llu of %llu (from %s): expected 0 <= rank < ranks <= 1000000",
			 (unsigned long long)rank, (unsigned long long)ranks, source);
		return -1;
	}
	c->rank = (unsigned)rank;
	c->ranks = (unsigned)ranks;
	snprintf(c->rank_source, sizeof c->rank_source, "%s", source);
	return 0;
}

/* This process's place among the ranks on its node (for gpus = auto), whatever says
 * which rank it is: Slurm's step, Open MPI's or MPICH's local rank. The launcher's
 * values are input: a size below 1 or a rank not below it is refused, naming them. */
static int local_place(struct cfg *c, char *why, size_t len)
{
	uint64_t lr = 0, ls = 1, steps;
	const char *rank_var = NULL, *size_var, *size_text;
	c->local_rank = 0;
	c->local_size = 1;
	if (env_u64("SLURM_STEP_NUM_TASKS", &steps, why, len) > 0) {
		int r = env_u64("SLURM_LOCALID", &lr, why, len);
		if (r < 0)
			return -1;
		rank_var = r ? "SLURM_LOCALID" : NULL;
		/* Tasks on this node: "N" or "N(xM)" when every node has N (else unknown). */
		size_var = "SLURM_STEP_TASKS_PER_NODE";
		size_text = getenv(size_var);
		char *end;
		unsigned long long per = size_text ? strtoull(size_text, &end, 10) : 1;
		if (!size_text)
			ls = 1;
		else if (end != size_text && isdigit((unsigned char)size_text[0]) &&
			 (*end == '\0' || (*end == '(' && !strchr(end, ','))))
			ls = per;
		else
			ls = 0, c->local_size = -1; /* differs by node: unknown */
	} else {
		size_var = "OMPI_COMM_WORLD_LOCAL_SIZE";
		int r = env_u64(size_var, &ls, why, len);
		if (r == 0)
			r = env_u64(size_var = "MPI_LOCALNRANKS", &ls, why, len);
		if (r < 0)
			return -1;
		if (r == 0)
			return 0;
		size_text = getenv(size_var);
		int a = env_u64("OMPI_COMM_WORLD_LOCAL_RANK", &lr, why, len);
		if (a < 0)
			return -1;
		rank_var = a ? "OMPI_COMM_WORLD_LOCAL_RANK" : NULL;
		int m = env_u64("MPI_LOCALRANKID", &lr, why, len);
		if (m < 0)
			return -1;
		if (m)
			rank_var = "MPI_LOCALRANKID";
	}
	if (c->local_size < 0) {
		/* The size is unknown; the rank is still bounded as any rank is. */
		if (lr >= 1000000) {
			snprintf(why, len, "%s = %llu: expected a local rank below 1000000",
				 rank_var, (unsigned long long)lr);
			return -1;
		}
		c->local_rank = (int)lr;
		return 0;
	}
	if (ls < 1 || ls > 1000000) {
		snprintf(why, len, "%s = '%s': expected from 1 to 1000000 tasks on this node",
			 size_var, size_text);
		return -1;
	}
	if (lr >= ls) {
		snprintf(why, len, "%s = %llu: expected a local rank below %s = %llu", rank_var,
			 (unsigned long long)lr, size_var, (unsigned long long)ls);
		return -1;
	}
	c->local_rank = (int)lr;
	c->local_size = (int)ls;
	return 0;
}

int ranks_detect(struct cfg *c, const char *cli, char *why, size_t len)
{
	uint64_t a, b;
	int r;
	if (local_place(c, why, len) < 0)
		return -1;
	if (cli) {
		char *end;
		errno = 0;
		a = strtoull(cli, &end, 10);
		if (end == cli || *end != '/' || errno) {
			snprintf(why, len, "--rank %s: expected K/N, like 2/8 (rank 2 of 8)", cli);
			return -1;
		}
		const char *n = end + 1;
		b = strtoull(n, &end, 10);
		if (end == n || *end || errno) {
			snprintf(why, len, "--rank %s: expected K/N, like 2/8 (rank 2 of 8)", cli);
			return -1;
		}
		return set(c, a, b, "--rank", why, len);
	}
	if (c->job_ranks)
		return set(c, c->job_rank, c->job_ranks, "[job] rank and ranks", why, len);

	/* Slurm: an array task, tasks of an srun step, or both (array index x step size). */
	uint64_t procid = 0, ntasks = 1, aid, amin = 0, acount, astep = 1;
	int in_step = env_u64("SLURM_STEP_NUM_TASKS", &ntasks, why, len);
	if (in_step < 0 || (in_step && env_u64("SLURM_PROCID", &procid, why, len) < 0))
		return -1;
	if (!in_step)
		ntasks = 1;
	int arr = env_u64("SLURM_ARRAY_TASK_ID", &aid, why, len);
	if (arr < 0)
		return -1;
	if (arr) {
		if (env_u64("SLURM_ARRAY_TASK_MIN", &amin, why, len) < 0 ||
		    env_u64("SLURM_ARRAY_TASK_STEP", &astep, why, len) < 0)
			return -1;
		if ((r = env_u64("SLURM_ARRAY_TASK_COUNT", &acount, why, len)) <= 0) {
			if (r == 0)
				snprintf(why, len,
					 "SLURM_ARRAY_TASK_ID is set but not "
					 "SLURM_ARRAY_TASK_COUNT");
			return -1;
		}
		if (astep == 0)
			astep = 1;
		if (aid < amin || (aid - amin) % astep) {
			snprintf(why, len,
				 "SLURM_ARRAY_TASK_ID %llu is not in the array (min %llu, "
				 "step %llu)",
				 (unsigned long long)aid, (unsigned long long)amin,
				 (unsigned long long)astep);
			return -1;
		}
		return set(c, (aid - amin) / astep * ntasks + procid, acount * ntasks,
			   in_step ? "Slurm array, srun step" : "Slurm array", why, len);
	}
	if (in_step)
		return set(c, procid, ntasks, "Slurm (srun)", why, len);
	if ((r = env_u64("OMPI_COMM_WORLD_SIZE", &b, why, len)) != 0) {
		if (r < 0 || env_u64("OMPI_COMM_WORLD_RANK", &a, why, len) <= 0) {
			if (r > 0)
				snprintf(why, len, "OMPI_COMM_WORLD_SIZE is set but not a rank");
			return -1;
		}
		return set(c, a, b, "Open MPI", why, len);
	}
	if ((r = env_u64("PMI_SIZE", &b, why, len)) != 0) {
		if (r < 0 || env_u64("PMI_RANK", &a, why, len) <= 0) {
			if (r > 0)
				snprintf(why, len, "PMI_SIZE is set but not PMI_RANK");
			return -1;
		}
		return set(c, a, b, "PMI", why, len);
	}
	return set(c, 0, 1, "none (one rank)", why, len);
}

/* `v` with {rank} and {ranks} put in (malloc'd). */
static char *subst(const char *v, unsigned rank, unsigned ranks)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);
	if (!f)
		return NULL;
	while (*v) {
		if (!strncmp(v, "{rank}", 6)) {
			fprintf(f, "%u", rank);
			v += 6;
		} else if (!strncmp(v, "{ranks}", 7)) {
			fprintf(f, "%u", ranks);
			v += 7;
		} else {
			fputc(*v++, f);
		}
	}
	fclose(f);
	return out;
}

static int subst_in(char **v, unsigned rank, unsigned ranks)
{
	if (!*v)
		return 0;
	char *n = subst(*v, rank, ranks);
	if (!n)
		return -1;
	free(*v);
	*v = n;
	return 0;
}

/* An output path N ranks would write together. */
static bool shared(const char *v, unsigned ranks)
{
	return ranks > 1 && v && strcmp(v, "-") != 0 && !strstr(v, "{rank}");
}

/* Sink keys that name what it writes. */
static bool output_key(const char *k)
{
	size_t n = strlen(k);
	return !strcmp(k, "path") || !strcmp(k, "dir") || !strcmp(k, "file") ||
	       (n > 5 && !strcmp(k + n - 5, "_path")) || (n > 4 && !strcmp(k + n - 4, "_dir")) ||
	       (n > 5 && !strcmp(k + n - 5, "_file"));
}

/* The job's identity over its ranks: taken before {rank} is put in, and without the
 * sink, whose outputs differ by rank. */
static uint64_t job_id(const struct cfg *c)
{
	uint64_t h = HASH_SEED;
	const struct cfg_section *secs[] = {&c->worker, &c->generator};
	for (size_t s = 0; s < 2; s++) {
		h = hash_str(h, secs[s]->plugin ? secs[s]->plugin : "");
		for (size_t i = 0; i < secs[s]->count; i++) {
			h = hash_str(h, secs[s]->kv[i].key);
			h = hash_str(h, secs[s]->kv[i].value);
		}
	}
	for (size_t s = 0; s < c->n_stages; s++) {
		const struct cfg_section *sec = &c->stages[s].sec;
		h = hash_str(h, c->stages[s].name);
		h = hash_str(h, sec->plugin ? sec->plugin : "");
		for (size_t i = 0; i < sec->count; i++) {
			h = hash_str(h, sec->kv[i].key);
			h = hash_str(h, sec->kv[i].value);
		}
	}
	char seed[32];
	snprintf(seed, sizeof seed, "%llu", (unsigned long long)c->base_seed);
	return hash_str(h, seed);
}

/* The stream the claims of dynamic shares share out: the generator's plugin and keys as
 * written. The worker's keys may differ between ranks (a slower node's batch size). */
static uint64_t stream_id(const struct cfg *c)
{
	uint64_t h = hash_str(HASH_SEED, c->generator.plugin ? c->generator.plugin : "");
	for (size_t i = 0; i < c->generator.count; i++) {
		h = hash_str(h, c->generator.kv[i].key);
		h = hash_str(h, c->generator.kv[i].value);
	}
	return h;
}

int ranks_apply(struct cfg *c, const char **stats_json, char **owned, char *why, size_t len)
{
	unsigned k = c->rank, n = c->ranks;
	c->job_id = job_id(c);
	c->stream_id = stream_id(c);
	static const char hint[] = "put {rank} in it, so each rank has its own";
	for (size_t i = 0; i < c->sink.count; i++) {
		if (output_key(c->sink.kv[i].key) && shared(c->sink.kv[i].value, n)) {
			snprintf(why, len,
				 "%s: [sink] %s = %s: %u ranks would write it together; %s",
				 c->sink.where[i], c->sink.kv[i].key, c->sink.kv[i].value, n, hint);
			return -1;
		}
	}
	/* A key ending in _out names a file any plugin writes (the tar generator's
	 * keys_out): the same rule. */
	const struct cfg_section *writers[] = {&c->worker, &c->generator};
	for (size_t s = 0; s < 2 + c->n_stages; s++) {
		const struct cfg_section *sec = s < 2 ? writers[s] : &c->stages[s - 2].sec;
		for (size_t i = 0; i < sec->count; i++) {
			const char *key = sec->kv[i].key;
			size_t kn = strlen(key);
			if (kn > 4 && !strcmp(key + kn - 4, "_out") &&
			    shared(sec->kv[i].value, n)) {
				snprintf(why, len,
					 "%s: %s = %s: %u ranks would write it together; %s",
					 sec->where[i], key, sec->kv[i].value, n, hint);
				return -1;
			}
		}
	}
	if (c->journal && c->journal_set && shared(c->journal, n)) {
		snprintf(why, len, "%s: [job] journal = %s: %u ranks would write it together; %s",
			 c->journal_at ? c->journal_at : c->path, c->journal, n, hint);
		return -1;
	}
	if (shared(c->log_dir, n)) {
		snprintf(why, len, "%s: [job] log_dir = %s: %u ranks would write it together; %s",
			 c->log_dir_at ? c->log_dir_at : c->path, c->log_dir, n, hint);
		return -1;
	}
	if (shared(c->metrics_file, n)) {
		snprintf(why, len,
			 "%s: [ui] metrics_file = %s: %u ranks would write it together; %s",
			 c->metrics_file_at ? c->metrics_file_at : c->path, c->metrics_file, n,
			 hint);
		return -1;
	}
	if (c->shares == CFG_SHARES_DYNAMIC && c->claims && strstr(c->claims, "{rank}")) {
		snprintf(why, len,
			 "%s: [job] claims = %s: the claims folder is every rank's (they take "
			 "chunks by claiming them there); leave {rank} out of it",
			 c->claims_at ? c->claims_at : c->path, c->claims);
		return -1;
	}
	if (stats_json && *stats_json && shared(*stats_json, n)) {
		snprintf(why, len, "--stats-json %s: %u ranks would write it together; %s",
			 *stats_json, n, hint);
		return -1;
	}
	struct cfg_section *secs[] = {&c->worker, &c->generator, &c->sink};
	for (size_t s = 0; s < 3; s++) {
		for (size_t i = 0; i < secs[s]->count; i++) {
			char *v = (char *)secs[s]->kv[i].value;
			if (subst_in(&v, k, n) < 0)
				goto oom;
			secs[s]->kv[i].value = v;
		}
	}
	/* The default journal, beside the job file, is ours to name per rank (with dynamic
	 * shares, with one rank too: a resume may run fewer ranks than the run it goes on
	 * from, and rank 0 of 1 goes on from rank 0's journal). */
	if (c->journal && !c->journal_set && (n > 1 || c->shares == CFG_SHARES_DYNAMIC)) {
		char *j = NULL;
		size_t l = strlen(c->journal);
		if (asprintf(&j, "%.*s.rank%u.journal", (int)(l - 8), c->journal, k) < 0)
			goto oom;
		free(c->journal);
		c->journal = j;
	}
	if (subst_in(&c->journal, k, n) < 0 || subst_in(&c->log_dir, k, n) < 0 ||
	    subst_in(&c->metrics_file, k, n) < 0 || subst_in(&c->claims, k, n) < 0)
		goto oom;
	if (stats_json && *stats_json) {
		*owned = subst(*stats_json, k, n);
		if (!*owned)
			goto oom;
		*stats_json = *owned;
	}
	return 0;
oom:
	snprintf(why, len, "out of memory");
	return -1;
}

int ranks_gpus_auto(struct cfg *c, char *why, size_t len)
{
	if (!c->gpus_auto)
		return 0;
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
	if (!cvd || !*cvd) {
		snprintf(why, len,
			 "%s: gpus = auto: CUDA_VISIBLE_DEVICES is not set, so the launcher "
			 "gave no GPUs to take (list them: gpus = 0,1; or gpus = all)",
			 c->path);
		return -1;
	}
	/* Its tokens, as they are: indices, GPU-... UUIDs or MIG-... ids, held to what
	 * gpus = 0,1 is held to (none empty, negative or listed twice). */
	struct cfg_gpu_tok *tok = malloc(CFG_MAX_GPUS * sizeof *tok);
	size_t t = 0;
	char bad[256];
	if (!tok) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	if (cfg_gpu_list(cvd, true, tok, &t, bad, sizeof bad) < 0) {
		snprintf(why, len, "%s: gpus = auto: CUDA_VISIBLE_DEVICES = '%s': %s", c->path, cvd,
			 bad);
		free(tok);
		return -1;
	}
	/* Ranks on one node that were all given the same list take a slice each, so no
	 * GPU is booked twice; a task Slurm gave GPUs of its own (--gpus-per-task) keeps
	 * them. */
	size_t from = 0, n = t;
	int lsz = c->local_size;
	/* Slurm bound GPUs to this task (--gpus-per-task: SLURMD_TRES_BIND=gpu:per_task:N),
	 * or gave it fewer than the node's: the list is its own. */
	const char *bind = getenv("SLURMD_TRES_BIND"), *on_node = getenv("SLURM_GPUS_ON_NODE");
	bool own = getenv("SLURM_GPUS_PER_TASK") || (bind && strstr(bind, "gpu")) ||
		   (on_node && strtoul(on_node, NULL, 10) > t);
	if (lsz != 1 && !own) {
		if (lsz < 0) {
			snprintf(
				why, len,
				"%s: gpus = auto: the tasks per node differ "
				"(SLURM_STEP_TASKS_PER_NODE = %s), so the node's GPUs cannot be split "
				"among its tasks; give each task its own (--gpus-per-task) or list them",
				c->path, getenv("SLURM_STEP_TASKS_PER_NODE"));
			free(tok);
			return -1;
		}
		if (t % (size_t)lsz) {
			snprintf(
				why, len,
				"%s: gpus = auto: %zu GPUs (CUDA_VISIBLE_DEVICES = %s) for "
				"%d ranks on this node: they cannot share them evenly without booking "
				"one twice",
				c->path, t, cvd, lsz);
			free(tok);
			return -1;
		}
		n = t / (size_t)lsz;
		from = (size_t)c->local_rank * n;
	}
	c->gpu_tokens = calloc(n, sizeof *c->gpu_tokens);
	bool oom = !c->gpu_tokens;
	for (size_t i = 0; c->gpu_tokens && i < n; i++) {
		c->gpu_tokens[i] = strndup(tok[from + i].text, tok[from + i].len);
		oom |= !c->gpu_tokens[i];
		c->gpus[i] = (int)i;
	}
	free(tok);
	c->n_gpus = n; /* what cfg_free frees, also on running out of memory */
	if (oom) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	c->gpu_token_from = from;
	if ((size_t)c->workers_per_gpu * c->n_gpus > CFG_MAX_WORKERS) {
		snprintf(why, len, "%s: %zu GPUs x %u workers_per_gpu is more than %d workers",
			 c->path, c->n_gpus, c->workers_per_gpu, CFG_MAX_WORKERS);
		return -1;
	}
	return 0;
}
