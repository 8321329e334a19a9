/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "job/keys.h"
#include "util/log.h"
#include "job/values.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job/suggest.h"

/* The field a row fills, and its size. */
#define FIELD(f) .off = offsetof(struct cfg, f), .width = sizeof(((struct cfg *)0)->f)

static int set_gpus(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		    size_t whylen);
static int set_journal(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		       size_t whylen);
static int set_listen(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		      size_t whylen);
static int set_python(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		      size_t whylen);

static const struct cfg_name retry_names[] = {{"none", 0},
					      {"error", CFG_RETRY_ERROR},
					      {"timeout", CFG_RETRY_TIMEOUT},
					      {"crash", CFG_RETRY_CRASH},
					      {NULL, 0}};
static const struct cfg_name pin_names[] = {{"auto", CFG_PIN_AUTO}, {"on", CFG_PIN_ON},
					    {"true", CFG_PIN_ON},   {"off", CFG_PIN_OFF},
					    {"false", CFG_PIN_OFF}, {NULL, 0}};
static const struct cfg_name shares_names[] = {
	{"static", CFG_SHARES_STATIC}, {"dynamic", CFG_SHARES_DYNAMIC}, {NULL, 0}};

#define TIMEOUT(f, what)                                                                           \
	{                                                                                          \
		"job", #f, CFG_REAL, FIELD(f),                                                     \
			.lo = 0, .hi = 1e7,                                                        \
			.expect = "expected seconds, 0 or more (0 = no limit)", .example = "2.5",  \
			.doc = what                                                                \
	}
#define UI_REAL(f, unit, what)                                                                     \
	{                                                                                          \
		"ui", #f, CFG_REAL, FIELD(f), .lo = 0, .lo_open = true, .hi = 1000,                \
					      .expect = "expected a number above 0 (" unit ")",    \
					      .example = "0.5", .doc = what                        \
	}

const struct cfg_key cfg_keys[] = {
	{"job", "gpus", CFG_CUSTOM, set_gpus, .example = "0,1",
	 .doc = "required: GPU ids, `all` (counted through CUDA by a helper process), or `auto` "
		"(the launcher's CUDA_VISIBLE_DEVICES)"},
	{"job", "workers_per_gpu", CFG_UINT, FIELD(workers_per_gpu), .min = 1, .max = 256,
	 .example = "2", .doc = "worker processes per GPU (per group of gpus_per_worker GPUs)"},
	{"job", "gpus_per_worker", CFG_UINT, FIELD(gpus_per_worker), .min = 1, .max = 256,
	 .example = "2",
	 .doc = "GPUs each worker sees: consecutive groups of gpus, CUDA_VISIBLE_DEVICES = "
		"the group's ids or tokens; must divide the GPU count"},
	{"job", "queue_size", CFG_UINT, FIELD(queue_size), .min = 1, .max = CFG_MAX_QUEUE,
	 .example = "64",
	 .doc = "most tasks in flight between generator and workers (backpressure)"},
	TIMEOUT(task_timeout, "seconds a task may run, fractions allowed; 0 = no limit"),
	{"job", "timeout_grace", CFG_REAL, FIELD(timeout_grace), .lo = 0, .hi = 1e7,
	 .expect = "expected seconds, 0 or more (0 = kill at task_timeout)", .example = "5",
	 .doc = "seconds a call interrupted at task_timeout (a Python worker's, or a plugin's "
		"with gpud_worker_interrupt) has to return before its worker is killed; 0 = "
		"kill at task_timeout"},
	TIMEOUT(setup_timeout, "seconds a worker's setup may take before it is killed"),
	TIMEOUT(cleanup_timeout, "seconds a worker's cleanup may take before it is killed"),
	TIMEOUT(drain_timeout, "seconds running tasks get after Ctrl-C or SIGTERM; 0 = no limit"),
	TIMEOUT(sink_timeout, "a sink call stuck this many seconds ends the run as SIGTERM does; "
			      "0 = never"),
	{"job", "base_seed", CFG_UINT, FIELD(base_seed), .min = 0, .max = UINT64_MAX,
	 .example = "7", .doc = "worker k gets seed base_seed + k"},
	{"job", "max_task_bytes", CFG_SIZE, FIELD(max_task_bytes), .max = CFG_MAX_BYTES,
	 .expect = "expected a size from 0 to 1G, like 4096, 64K or 1M", .example = "64K",
	 .doc = "largest task input (bytes, or K, M, G suffixes)"},
	{"job", "max_result_bytes", CFG_SIZE, FIELD(max_result_bytes), .max = CFG_MAX_BYTES,
	 .expect = "expected a size from 0 to 1G, like 4096, 64K or 1M", .example = "1M",
	 .doc = "largest result (bytes, or K, M, G suffixes)"},
	{"job", "max_retries", CFG_UINT, FIELD(max_retries), .min = 0, .max = 1000, .example = "2",
	 .doc = "runs again a task that failed, timed out or crashed its worker up to N more times"},
	{"job", "retry_on", CFG_FLAGS, FIELD(retry_on), .names = retry_names,
	 .expect = "expected a list of error, timeout and crash (like error,crash), or none",
	 .example = "error,crash", .doc = "which failures run again"},
	{"job", "max_worker_restarts", CFG_UINT, FIELD(max_worker_restarts), .min = 0,
	 .max = 100000, .example = "9",
	 .doc = "per GPU (or group of gpus_per_worker): replacements of crashed or timed-out "
		"workers before it is retired"},
	{"job", "ordered", CFG_BOOL, FIELD(ordered), .expect = "expected true or false",
	 .example = "true", .doc = "the sink gets outcomes in task-id order"},
	{"job", "log_dir", CFG_PATH, FIELD(log_dir), .at_off = offsetof(struct cfg, log_dir_at),
	 .example = "logs", .doc = "the run's folder: failures.jsonl, the dashboard's worker logs"},
	{"job", "batch_size", CFG_UINT, FIELD(batch_size), .min = 1, .max = CFG_MAX_BATCH,
	 .example = "8",
	 .doc = "most tasks a gpud_worker_process_batch call gets (lowered while calls run out of memory)"},
	{"job", "batch_wait_ms", CFG_REAL, FIELD(batch_wait_ms), .lo = 0, .hi = 60000,
	 .expect = "expected milliseconds from 0 to 60000", .example = "1.5",
	 .doc = "how long a worker waits to fill a batch"},
	{"job", "isolate_failures", CFG_BOOL, FIELD(isolate_failures),
	 .expect = "expected true or false", .example = "false",
	 .doc = "a process_batch call that fails as a whole (returns an error, a Python one "
		"raises) runs its tasks again in halves until each task that fails, fails "
		"alone with its own error and every other one gets its result; false = every "
		"task of the call fails with its error"},
	{"job", "max_in_flight", CFG_UINT, FIELD(max_in_flight), .min = 1, .max = CFG_MAX_IN_FLIGHT,
	 .example = "32",
	 .doc = "most tasks a worker with gpud_worker_submit (or an async def process) runs "
		"at once, finishing them in any order"},
	{"job", "pin_memory", CFG_ENUM, FIELD(pin_memory), .names = pin_names,
	 .expect = "expected auto, on or off", .example = "off",
	 .doc = "register the rings with CUDA (direct DMA)"},
	{"job", "journal", CFG_CUSTOM, set_journal, .expect = "expected a file name, or off",
	 .example = "job.journal", .doc = "finished tasks, for --resume; off = none"},
	{"job", "rank", CFG_UINT, FIELD(job_rank), .min = 0, .max = 1000000,
	 .expect = "expected a whole number up to 1000000", .example = "0",
	 .doc = "with ranks: this process is rank `rank` of `ranks`"},
	{"job", "ranks", CFG_UINT, FIELD(job_ranks), .min = 1, .max = 1000000,
	 .expect = "expected a whole number up to 1000000", .example = "1",
	 .doc = "with rank: how many ranks the job has"},
	{"job", "shares", CFG_ENUM, FIELD(shares), .names = shares_names,
	 .expect = "expected static or dynamic", .example = "dynamic",
	 .doc = "with ranks: static (chunk c of 64 ids to rank c mod ranks) or dynamic "
		"(chunks claimed as each rank needs them, in the claims folder)"},
	{"job", "claims", CFG_PATH, FIELD(claims), .at_off = offsetof(struct cfg, claims_at),
	 .example = "out/job.claims",
	 .doc = "with shares = dynamic: the folder of claims every rank sees (default: "
		"beside the job file, JOB.claims)"},
	{"job", "lease", CFG_REAL, FIELD(lease), .lo = 0.1, .hi = 1e6,
	 .expect = "expected seconds, from 0.1", .example = "60",
	 .doc = "with shares = dynamic: a rank whose heartbeat stands still this long is "
		"taken for lost, and the others finish its share (default 60)"},
	{"job", "python", CFG_CUSTOM, set_python,
	 .expect = "expected a Python interpreter or environment folder",
	 .example = "/usr/bin/python3",
	 .doc = "the Python the python plugins run on: an interpreter, a name on PATH or an "
		"environment folder (default: $VIRTUAL_ENV, $CONDA_PREFIX, python3 on PATH)"},

	UI_REAL(refresh_rate, "redraws a second", "dashboard redraws a second"),
	UI_REAL(plain_interval, "seconds", "seconds between plain-mode progress lines"),
	{"ui", "metrics_file", CFG_PATH, FIELD(metrics_file),
	 .at_off = offsetof(struct cfg, metrics_file_at), .example = "gpud.prom",
	 .doc = "Prometheus text, rewritten every metrics_interval"},
	{"ui", "metrics_listen", CFG_CUSTOM, set_listen,
	 .expect = "expected PORT or ADDRESS:PORT, like 127.0.0.1:9400 (a numeric IPv4 address, "
		   "port 1 to 65535)",
	 .example = "127.0.0.1:9400", .doc = "serve the same text on GET /metrics"},
	UI_REAL(metrics_interval, "seconds", "seconds between rewrites of metrics_file"),
};
const size_t cfg_n_keys = sizeof cfg_keys / sizeof *cfg_keys;

const struct cfg_key *cfg_key_find(const char *section, const char *name)
{
	for (size_t i = 0; i < cfg_n_keys; i++)
		if (strcmp(cfg_keys[i].section, section) == 0 &&
		    strcmp(cfg_keys[i].name, name) == 0)
			return &cfg_keys[i];
	return NULL;
}

size_t cfg_key_names(const char *section, const char **out, size_t cap)
{
	size_t n = 0;
	for (size_t i = 0; i < cfg_n_keys && n + 1 < cap; i++)
		if (strcmp(cfg_keys[i].section, section) == 0)
			out[n++] = cfg_keys[i].name;
	if (cap)
		out[n] = NULL;
	return n;
}

static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
	char *end;
	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -1;
	*out = v;
	return 0;
}

/* Stores u into the row's field, an unsigned of 1, 4 or 8 bytes. */
static void store(struct cfg *c, const struct cfg_key *k, uint64_t u)
{
	char *f = (char *)c + k->off;
	if (k->width == sizeof(uint64_t)) {
		uint64_t v = u;
		memcpy(f, &v, sizeof v);
	} else if (k->width == sizeof(uint32_t)) {
		uint32_t v = (uint32_t)u;
		memcpy(f, &v, sizeof v);
	} else {
		uint8_t v = (uint8_t)u;
		memcpy(f, &v, sizeof v);
	}
}

static int set_uint(struct cfg *c, const struct cfg_key *k, const char *v, char *why, size_t whylen)
{
	uint64_t u;
	if (parse_u64(v, k->min, k->max, &u) < 0) {
		if (k->expect)
			snprintf(why, whylen, "%s", k->expect);
		else if (k->max == UINT64_MAX)
			snprintf(why, whylen, "expected a whole number from %llu to 2^64-1",
				 (unsigned long long)k->min);
		else
			snprintf(why, whylen, "expected a whole number from %llu to %llu",
				 (unsigned long long)k->min, (unsigned long long)k->max);
		return -1;
	}
	store(c, k, u);
	return 0;
}

static int set_real(struct cfg *c, const struct cfg_key *k, const char *v, char *why, size_t whylen)
{
	char *end;
	errno = 0;
	double d = strtod(v, &end);
	if (end == v || *end || errno || !isfinite(d) || d < k->lo || (k->lo_open && d == k->lo) ||
	    d > k->hi) {
		snprintf(why, whylen, "%s", k->expect);
		return -1;
	}
	memcpy((char *)c + k->off, &d, sizeof d);
	return 0;
}

static const struct cfg_name bool_names[] = {{"true", 1}, {"yes", 1},   {"1", 1},
					     {"on", 1},   {"false", 0}, {"no", 0},
					     {"0", 0},    {"off", 0},   {NULL, 0}};

static const struct cfg_name *name_of(const struct cfg_name *names, const char *v)
{
	for (; names->name; names++)
		if (strcmp(names->name, v) == 0)
			return names;
	return NULL;
}

/* Names joined by commas (spaces and tabs around each ignored), or the one name whose
 * value is 0 alone. An unknown name, or none at all, is an error. */
static int parse_flags(const struct cfg_name *names, const char *v, unsigned *out)
{
	const struct cfg_name *n = name_of(names, v);
	if (n && n->value == 0) {
		*out = 0;
		return 0;
	}
	char *copy = strdup(v), *save = NULL;
	if (!copy)
		return -1;
	unsigned bits = 0;
	int rc = 0;
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ' || *t == '\t')
			t++;
		size_t len = strlen(t);
		while (len && (t[len - 1] == ' ' || t[len - 1] == '\t'))
			t[--len] = '\0';
		n = name_of(names, t);
		if (!n || n->value == 0)
			rc = -1;
		else
			bits |= n->value;
	}
	free(copy);
	if (rc == 0 && bits == 0)
		rc = -1;
	*out = bits;
	return rc;
}

static int set_path(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v)
{
	char **dst = (char **)((char *)c + k->off);
	free(*dst);
	*dst = cfg_resolve(v->base, v->text);
	if (k->at_off) {
		char **at = (char **)((char *)c + k->at_off);
		free(*at);
		*at = strdup(v->at);
	}
	return 0;
}

int cfg_key_set(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		size_t whylen)
{
	const struct cfg_name *n;
	unsigned bits;
	switch (k->kind) {
	case CFG_UINT:
		return set_uint(c, k, v->text, why, whylen);
	case CFG_SIZE: {
		uint64_t u;
		if (cfg_parse_size(v->text, k->max, &u) < 0) {
			snprintf(why, whylen, "%s", k->expect);
			return -1;
		}
		store(c, k, u);
		return 0;
	}
	case CFG_REAL:
		return set_real(c, k, v->text, why, whylen);
	case CFG_BOOL:
	case CFG_ENUM:
		n = name_of(k->kind == CFG_BOOL ? bool_names : k->names, v->text);
		if (!n) {
			snprintf(why, whylen, "%s", k->expect);
			return -1;
		}
		if (k->kind == CFG_BOOL)
			*(bool *)((char *)c + k->off) = n->value;
		else
			*(int *)((char *)c + k->off) = (int)n->value;
		return 0;
	case CFG_FLAGS:
		if (parse_flags(k->names, v->text, &bits) < 0) {
			snprintf(why, whylen, "%s", k->expect);
			return -1;
		}
		store(c, k, bits);
		return 0;
	case CFG_PATH:
		return set_path(c, k, v);
	case CFG_CUSTOM:
		return k->set(c, k, v, why, whylen);
	}
	return -1;
}

int cfg_gpu_list(const char *v, bool launcher, struct cfg_gpu_tok *out, size_t *n, char *why,
		 size_t whylen)
{
	const char *s = v;
	*n = 0;
	for (;;) {
		while (isspace((unsigned char)*s))
			s++;
		const char *start = s, *end;
		long id = -1;
		if (launcher && (!strncmp(s, "GPU-", 4) || !strncmp(s, "MIG-", 4))) {
			/* A UUID or MIG id: letters, digits, '-' and '/' after its prefix. */
			end = s + 4;
			while (isalnum((unsigned char)*end) || *end == '-' || *end == '/')
				end++;
			if (end == s + 4) {
				snprintf(why, whylen, "'%.4s' names no GPU", s);
				return -1;
			}
		} else {
			if (!isdigit((unsigned char)*s)) {
				snprintf(
					why, whylen, "%s",
					launcher
						? "expected a list of GPU ids like 0,1,2 or "
						  "GPU-/MIG- ids"
						: "expected a list of GPU ids like 0,1,2, 'all' or "
						  "'auto'");
				return -1;
			}
			char *e;
			errno = 0;
			id = strtol(s, &e, 10);
			if (errno || id > 65535) {
				snprintf(why, whylen, "GPU id too large");
				return -1;
			}
			end = e;
		}
		size_t len = (size_t)(end - start);
		for (size_t i = 0; i < *n; i++) {
			if (id >= 0 ? out[i].id == id
				    : out[i].len == len && !strncmp(out[i].text, start, len)) {
				snprintf(why, whylen, "GPU %.*s is listed twice", (int)len, start);
				return -1;
			}
		}
		if (*n >= CFG_MAX_GPUS) {
			snprintf(why, whylen, "more than %d GPUs", CFG_MAX_GPUS);
			return -1;
		}
		out[*n].text = start;
		out[*n].len = len;
		out[*n].id = (int)id;
		(*n)++;
		s = end;
		while (isspace((unsigned char)*s))
			s++;
		if (*s == '\0')
			return 0;
		if (*s != ',') {
			snprintf(why, whylen, "%s",
				 launcher ? "expected a list of GPU ids like 0,1,2 or GPU-/MIG- ids"
					  : "expected a list of GPU ids like 0,1,2 or 'all'");
			return -1;
		}
		s++;
	}
}

static int set_gpus(struct cfg *c, const struct cfg_key *k, const struct cfg_val *val, char *why,
		    size_t whylen)
{
	(void)k;
	const char *v = val->text;
	c->n_gpus = 0;
	c->gpus_all = false;
	c->gpus_auto = false;
	if (strcmp(v, "all") == 0) {
		c->gpus_all = true;
		return 0;
	}
	if (strcmp(v, "auto") == 0) {
		c->gpus_auto = true;
		return 0;
	}
	struct cfg_gpu_tok *tok = malloc(CFG_MAX_GPUS * sizeof *tok);
	size_t n = 0;
	if (!tok) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	int r = cfg_gpu_list(v, false, tok, &n, why, whylen);
	for (size_t i = 0; r == 0 && i < n; i++)
		c->gpus[i] = tok[i].id;
	if (r == 0)
		c->n_gpus = n;
	free(tok);
	return r;
}

/* journal = FILE or off; set here, not defaulted beside the job file. */
static int set_journal(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		       size_t whylen)
{
	free(c->journal);
	c->journal = NULL;
	c->journal_set = true;
	c->journal_off = strcmp(v->text, "off") == 0;
	free(c->journal_at);
	c->journal_at = strdup(v->at);
	if (c->journal_off)
		return 0;
	if (!*v->text) {
		snprintf(why, whylen, "%s", k->expect);
		return -1;
	}
	c->journal = cfg_resolve(v->base, v->text);
	return 0;
}

/* python = an interpreter or an environment folder; a bare name is looked up on PATH
 * (job/python.c), a path is taken from the job file's folder. */
static int set_python(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		      size_t whylen)
{
	free(c->python);
	c->python = NULL;
	free(c->python_at);
	c->python_at = strdup(v->at);
	if (!*v->text) {
		snprintf(why, whylen, "%s", k->expect);
		return -1;
	}
	c->python = strchr(v->text, '/') ? cfg_resolve(v->base, v->text) : strdup(v->text);
	return 0;
}

/* metrics_listen = HOST:PORT, a numeric IPv4 address (127.0.0.1 by default). */
static int set_listen(struct cfg *c, const struct cfg_key *k, const struct cfg_val *val, char *why,
		      size_t whylen)
{
	const char *v = val->text;
	const char *colon = strrchr(v, ':');
	const char *port = colon ? colon + 1 : v;
	uint64_t u;
	char host[64] = "127.0.0.1";
	if (parse_u64(port, 1, 65535, &u) < 0)
		goto bad;
	if (colon) {
		size_t n = (size_t)(colon - v);
		if (n == 0 || n >= sizeof host)
			goto bad;
		memcpy(host, v, n);
		host[n] = '\0';
		if (strcmp(host, "localhost") == 0)
			strcpy(host, "127.0.0.1");
		unsigned a, b, d, e;
		char tail;
		if (sscanf(host, "%u.%u.%u.%u%c", &a, &b, &d, &e, &tail) != 4 || a > 255 ||
		    b > 255 || d > 255 || e > 255)
			goto bad;
	}
	free(c->metrics_host);
	c->metrics_host = strdup(host);
	c->metrics_port = (unsigned)u;
	return 0;
bad:
	snprintf(why, whylen, "%s", k->expect);
	return -1;
}

bool keys_declared(const char *key, const char *const *declared)
{
	for (; *declared; declared++) {
		size_t n = strlen(*declared);
		if (n && (*declared)[n - 1] == '*' ? strncmp(key, *declared, n - 1) == 0
						   : strcmp(key, *declared) == 0)
			return 1;
	}
	return 0;
}

int keys_check(const struct cfg_section *s, const char *section, const char *plugin,
	       const char *const *declared, char *err, size_t errlen)
{
	if (!declared)
		return 0;
	for (size_t i = 0; i < s->count; i++) {
		const char *key = s->kv[i].key;
		if (keys_declared(key, declared))
			continue;
		/* The plugin was swapped with --set: the job file's keys were written for
		 * the one it replaced. Only keys typed for this plugin are held to it. */
		if (s->plugin_line < 0 && strncmp(s->where[i], "--set", 5) != 0) {
			fprintf(LOG_ERR,
				"gpud: %s: [%s] %s is not a key of plugin %s (put in place "
				"by --set); ignored\n",
				s->where[i], section, key, plugin);
			continue;
		}
		char list[512], hint[128] = "";
		const char *near = suggest(key, declared);
		if (near)
			snprintf(hint, sizeof hint, "did you mean '%s'? ", near);
		if (*declared)
			snprintf(err, errlen,
				 "%s: unknown key '%s' in [%s] for plugin %s (%saccepted: %s)",
				 s->where[i], key, section, plugin, hint,
				 suggest_list(declared, list, sizeof list));
		else
			snprintf(err, errlen,
				 "%s: unknown key '%s' in [%s]: plugin %s takes no keys",
				 s->where[i], key, section, plugin);
		return -1;
	}
	return 0;
}
