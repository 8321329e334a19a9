/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "job/config.h"
#include "job/values.h"
#include "util/hash.h"
#include "util/textio.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ini.h>

#include "job/groups.h"
#include "job/keys.h"
#include "job/suggest.h"

/* Longest job-file line accepted. inih's default (200 bytes) would cut long values. */
#define CFG_MAX_LINE (1 << 20)

/* One `key = value` as read, before validation. line < 0: it came from --set. */
struct raw {
	char *section, *key, *value;
	int line;
	const char *set; /* the --set argument it came from */
	long set_index;  /* its index in cfg_load's sets, or CFG_AT_FILE */
};

struct parse {
	const char *path;
	FILE *f;
	char *linebuf;
	size_t linecap;
	int lineno;
	size_t bytes; /* read so far */
	struct raw *raw;
	size_t n_raw, cap_raw;
	size_t *slots; /* hash of (section, key) -> index in raw + 1; 0 = empty */
	size_t n_slots;
	struct {
		char *name;
		int line;
	} * sections;
	size_t n_sections, cap_sections;
	char *err;
	size_t errlen;
	bool failed;
	long at;    /* what is being read: CFG_AT_FILE, a set's index, CFG_AT_JOB */
	long blame; /* `at` when the first error was said */
};

static void fail(struct parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(struct parse *p, const char *fmt, ...)
{
	if (p->failed)
		return; /* keep the first error: later ones tend to follow from it */
	p->blame = p->at;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(p->err, p->errlen, fmt, ap);
	va_end(ap);
	/* Values are echoed: a control byte in one must not reach the terminal raw. */
	text_clean(p->err);
	p->failed = true;
}

static void *grow(void *arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return arr;
	size_t nc = *cap ? *cap * 2 : 16;
	void *a = realloc(arr, nc * elem);
	if (!a) {
		perror("gpud");
		abort(); /* out of memory while reading a job file: nothing sensible left */
	}
	*cap = nc;
	return a;
}

/* inih's reader: one line per call, so p->lineno is the line the handler sees. Lines
 * longer than inih's buffer or holding NUL bytes are errors, not silently cut. */
static char *reader(char *str, int num, void *stream)
{
	struct parse *p = stream;
	ssize_t n = getline(&p->linebuf, &p->linecap, p->f);
	if (n < 0)
		return NULL;
	p->lineno++;
	/* A file that grew after it was measured. */
	p->bytes += (size_t)n;
	if (p->bytes > CFG_MAX_FILE) {
		fail(p, "%s:%d: the job file grew past %u MiB while read", p->path, p->lineno,
		     CFG_MAX_FILE >> 20);
		return NULL;
	}
	if (memchr(p->linebuf, '\0', (size_t)n)) {
		fail(p, "%s:%d: binary data (a NUL byte) in the job file", p->path, p->lineno);
		n = 0;
	} else if (n >= num - 1) {
		fail(p, "%s:%d: line longer than %d bytes", p->path, p->lineno, num - 2);
		n = 0;
	}
	memcpy(str, p->linebuf, (size_t)n);
	str[n] = '\0';

	/* Note section headers here: inih reports a section only with its first key,
	 * so an empty or unknown [section] would otherwise pass unseen. */
	const char *s = str;
	while (isspace((unsigned char)*s))
		s++;
	if (*s == '[') {
		const char *e = strchr(s, ']');
		if (e) {
			p->sections = grow(p->sections, &p->cap_sections, p->n_sections,
					   sizeof *p->sections);
			p->sections[p->n_sections].name = strndup(s + 1, (size_t)(e - s - 1));
			p->sections[p->n_sections].line = p->lineno;
			p->n_sections++;
		}
	}
	return str;
}

static size_t hash_key(const char *section, const char *key)
{
	uint64_t h = hash_str(hash_str(HASH_SEED, section), key);
	return (size_t)(h ^ (h >> 29));
}

/* The slot of (section, key): where it is, or the empty slot where it would go. */
static size_t *slot_of(struct parse *p, const char *section, const char *key)
{
	size_t mask = p->n_slots - 1;
	for (size_t i = hash_key(section, key) & mask;; i = (i + 1) & mask) {
		size_t *s = &p->slots[i];
		if (*s == 0 || (strcmp(p->raw[*s - 1].section, section) == 0 &&
				strcmp(p->raw[*s - 1].key, key) == 0))
			return s;
	}
}

/* The key as read so far, or NULL: one hash lookup, so a file of many keys is read in
 * linear time. */
static struct raw *find_raw(struct parse *p, const char *section, const char *key)
{
	if (!p->n_slots)
		return NULL;
	size_t *s = slot_of(p, section, key);
	return *s ? &p->raw[*s - 1] : NULL;
}

static void add_raw(struct parse *p, struct raw r)
{
	if (2 * (p->n_raw + 1) > p->n_slots) {
		size_t n = p->n_slots ? 2 * p->n_slots : 64;
		size_t *slots = calloc(n, sizeof *slots);
		if (!slots) {
			perror("gpud");
			abort();
		}
		free(p->slots);
		p->slots = slots;
		p->n_slots = n;
		for (size_t i = 0; i < p->n_raw; i++)
			*slot_of(p, p->raw[i].section, p->raw[i].key) = i + 1;
	}
	p->raw = grow(p->raw, &p->cap_raw, p->n_raw, sizeof *p->raw);
	p->raw[p->n_raw++] = r;
	*slot_of(p, r.section, r.key) = p->n_raw;
}

static int handler(void *user, const char *section, const char *key, const char *value)
{
	struct parse *p = user;
	struct raw *old = find_raw(p, section, key);
	if (old) {
		fail(p, "%s:%d: [%s] %s is set twice (first on line %d)", p->path, p->lineno,
		     section, key, old->line);
		return 0;
	}
	if (*section == '\0') {
		fail(p, "%s:%d: '%s' comes before any [section]", p->path, p->lineno, key);
		return 0;
	}
	add_raw(p, (struct raw){strdup(section), strdup(key), strdup(value), p->lineno, NULL,
				CFG_AT_FILE});
	return 1;
}

/* Applies one "SECTION.KEY=VALUE" override, sets[index]. */
static void apply_set(struct parse *p, const char *set, long index)
{
	const char *dot = strchr(set, '.');
	const char *eq = strchr(set, '=');
	/* stage.NAME.KEY: the section is stage.NAME */
	if (dot && eq && dot < eq && (size_t)(dot - set) == 5 && !strncmp(set, "stage", 5)) {
		const char *d2 = strchr(dot + 1, '.');
		if (d2 && d2 < eq)
			dot = d2;
	}
	if (!dot || !eq || dot > eq || dot == set || eq == dot + 1) {
		fail(p, "--set %s: expected SECTION.KEY=VALUE", set);
		return;
	}
	char *section = strndup(set, (size_t)(dot - set));
	char *key = strndup(dot + 1, (size_t)(eq - dot - 1));
	const char *value = eq + 1;
	struct raw *old = find_raw(p, section, key);
	if (old) {
		free(old->value);
		old->value = strdup(value);
		old->line = -1;
		old->set = set;
		old->set_index = index;
		free(section);
		free(key);
		return;
	}
	add_raw(p, (struct raw){section, key, strdup(value), -1, set, index});
}

/* "file:line" or "--set X" for messages. */
static const char *where(const struct parse *p, const struct raw *r, char *buf, size_t len)
{
	if (r->line < 0)
		snprintf(buf, len, "--set %s", r->set);
	else
		snprintf(buf, len, "%s:%d", p->path, r->line);
	return buf;
}

static const char *const section_names[] = {"job", "worker", "generator", "sink", "ui", NULL};

/* "unknown key 'x' in [s] (did you mean 'y'?; known: ...)" */
static void unknown_key(struct parse *p, const struct raw *r)
{
	const char **known = calloc(cfg_n_keys + 1, sizeof *known);
	char loc[512], list[512], hint[128] = "";
	if (!known) {
		perror("gpud");
		abort(); /* as grow(): out of memory while reading a job file */
	}
	cfg_key_names(r->section, known, cfg_n_keys + 1);
	const char *near = suggest(r->key, known);
	if (near)
		snprintf(hint, sizeof hint, "did you mean '%s'? ", near);
	fail(p, "%s: unknown key '%s' in [%s] (%sknown: %s)", where(p, r, loc, sizeof loc), r->key,
	     r->section, hint, suggest_list(known, list, sizeof list));
	free(known);
}

/* A [job] or [ui] key: its row's parser, or unknown. */
static int key(struct parse *p, struct cfg *c, const struct raw *r)
{
	const struct cfg_key *k = cfg_key_find(r->section, r->key);
	if (!k) {
		unknown_key(p, r);
		return -1;
	}
	char loc[512], why[256] = "";
	/* --set values are typed relative to the current folder. */
	char *cwd = r->line < 0 ? getcwd(NULL, 0) : NULL;
	struct cfg_val v = {r->value, where(p, r, loc, sizeof loc), cwd ? cwd : c->dir};
	int rc = cfg_key_set(c, k, &v, why, sizeof why);
	free(cwd);
	if (rc < 0)
		fail(p, "%s: [%s] %s = '%s': %s", loc, r->section, r->key, r->value, why);
	return rc;
}

/* Whether a plugin-section value names a file, so a relative one is resolved: the
 * key says so (plugin, path, dir, file, script, *_path, *_dir, *_file, and *_out, a
 * file the plugin writes: record/inputs.h), or the value starts with ./ or ../ . */
static bool is_path_key(const char *key, const char *value)
{
	static const char *const exact[] = {"plugin", "path", "dir", "file", "script"};
	static const char *const suffix[] = {"_path", "_dir", "_file", "_out"};
	if (strncmp(value, "./", 2) == 0 || strncmp(value, "../", 3) == 0)
		return true;
	for (size_t i = 0; i < sizeof exact / sizeof *exact; i++)
		if (strcmp(key, exact[i]) == 0)
			return true;
	size_t kl = strlen(key);
	for (size_t i = 0; i < sizeof suffix / sizeof *suffix; i++) {
		size_t sl = strlen(suffix[i]);
		if (kl > sl && strcmp(key + kl - sl, suffix[i]) == 0)
			return true;
	}
	return false;
}

/* A plugin value that is a name (`jsonl`), not a path. */
static bool is_plugin_name(const char *v)
{
	return !strchr(v, '/') && !strstr(v, ".so");
}

/* A *_path value with colons is a list of folders (python_path = ./src:./vendor):
 * each is resolved. Any other path value is one path. */
static char *resolve_list(const char *base, const char *key, const char *v)
{
	size_t kl = strlen(key);
	if (!strchr(v, ':') || kl < 5 || strcmp(key + kl - 5, "_path") != 0)
		return cfg_resolve(base, v);
	char *copy = strdup(v), *out = NULL, *save = NULL;
	size_t len = 0;
	FILE *f = copy ? open_memstream(&out, &len) : NULL;
	if (!f) {
		free(copy);
		return NULL;
	}
	bool first = true;
	for (char *t = strtok_r(copy, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
		char *r = cfg_resolve(base, t);
		fprintf(f, "%s%s", first ? "" : ":", r ? r : t);
		free(r);
		first = false;
	}
	fclose(f);
	free(copy);
	return out;
}

static void section_add(struct parse *p, struct cfg *c, struct cfg_section *s, const struct raw *r)
{
	char *cwd = NULL;
	const char *base = c->dir;
	if (r->line < 0)
		base = cwd = getcwd(NULL, 0); /* --set values are typed relative to here */
	if (!base)
		base = ".";
	bool path = is_path_key(r->key, r->value);
	if (strcmp(r->key, "plugin") == 0) {
		char loc[512];
		if (r->value[0] == '\0') {
			fail(p, "%s: [%s] plugin is empty", where(p, r, loc, sizeof loc),
			     r->section);
		} else {
			s->plugin = is_plugin_name(r->value) ? strdup(r->value)
							     : cfg_resolve(base, r->value);
			s->plugin_line = r->line;
		}
	} else {
		size_t cap = s->cap;
		s->kv = grow(s->kv, &cap, s->count, sizeof *s->kv);
		cap = s->cap;
		s->where = grow(s->where, &cap, s->count, sizeof *s->where);
		s->cap = cap;
		char loc[512];
		s->where[s->count] = strdup(where(p, r, loc, sizeof loc));
		s->kv[s->count].key = strdup(r->key);
		s->kv[s->count].value =
			path ? resolve_list(base, r->key, r->value) : strdup(r->value);
		s->count++;
	}
	if (!s->present || (r->line > 0 && r->line < s->line))
		s->line = r->line;
	s->present = true;
	free(cwd);
}

/* "gpu" names the GPU workers' row (the dashboard, plain progress, --stats-json's
 * gpu_busy, the metrics' stage="gpu"): a stage may not take it. */
#define STAGE_GPU_TAKEN                                                                            \
	"the name gpu is the GPU workers' (their row on the dashboard, stage=\"gpu\" in "          \
	"the metrics); give the stage another name"

/* A stage's name: letters, digits, '_' and '-'. */
static bool stage_name_ok(const char *n)
{
	if (!*n)
		return false;
	for (; *n; n++)
		if (!isalnum((unsigned char)*n) && *n != '_' && *n != '-')
			return false;
	return true;
}

/* The stage named `name` ("decode" of [stage.decode]), added in order when new; NULL
 * (said) past CFG_MAX_STAGES. */
static struct cfg_stage *stage_get(struct parse *p, struct cfg *c, const char *name, int line)
{
	for (size_t i = 0; i < c->n_stages; i++)
		if (strcmp(c->stages[i].name, name) == 0)
			return &c->stages[i];
	if (c->n_stages >= CFG_MAX_STAGES) {
		fail(p, "%s:%d: more than %d [stage.NAME] sections", p->path, line, CFG_MAX_STAGES);
		return NULL;
	}
	if (!c->stages) {
		c->stages = calloc(CFG_MAX_STAGES, sizeof *c->stages);
		if (!c->stages) {
			perror("gpud");
			abort(); /* as grow() */
		}
	}
	struct cfg_stage *st = &c->stages[c->n_stages++];
	st->name = strdup(name);
	st->line = line > 0 ? line : 0;
	st->task_timeout = -1;
	st->max_retries = -1;
	return st;
}

/* A [stage.NAME] key: `workers`, `task_timeout` and `max_retries` are the stage's own,
 * the rest its plugin's. */
static int stage_key(struct parse *p, struct cfg *c, const struct raw *r)
{
	char loc[512];
	const char *name = r->section + 6;
	if (!stage_name_ok(name)) {
		fail(p, "%s: [%s]: a stage's name is letters, digits, '_' and '-'",
		     where(p, r, loc, sizeof loc), r->section);
		return -1;
	}
	if (strcmp(name, "gpu") == 0) {
		fail(p, "%s: [%s]: %s", where(p, r, loc, sizeof loc), r->section, STAGE_GPU_TAKEN);
		return -1;
	}
	struct cfg_stage *st = stage_get(p, c, name, r->line);
	if (!st)
		return -1;
	if (strcmp(r->key, "workers") == 0) {
		char *end;
		errno = 0;
		unsigned long v = strtoul(r->value, &end, 10);
		if (!isdigit((unsigned char)r->value[0]) || *end || errno || v < 1 ||
		    v > CFG_MAX_WORKERS) {
			fail(p, "%s: [%s] workers = '%s': expected a count from 1 to %d",
			     where(p, r, loc, sizeof loc), r->section, r->value, CFG_MAX_WORKERS);
			return -1;
		}
		st->workers = (unsigned)v;
		return 0;
	}
	if (strcmp(r->key, "task_timeout") == 0 || strcmp(r->key, "max_retries") == 0) {
		/* The stage's own, read by [job]'s row (its bounds, its message). */
		struct cfg scratch = {0};
		char why[256] = "";
		struct cfg_val v = {r->value, where(p, r, loc, sizeof loc), c->dir};
		if (cfg_key_set(&scratch, cfg_key_find("job", r->key), &v, why, sizeof why) < 0) {
			fail(p, "%s: [%s] %s = '%s': %s", loc, r->section, r->key, r->value, why);
			return -1;
		}
		if (r->key[0] == 't')
			st->task_timeout = scratch.task_timeout;
		else
			st->max_retries = (int)scratch.max_retries;
		return 0;
	}
	section_add(p, c, &st->sec, r);
	return 0;
}

/* Every [section] header names a known section, once. */
static int check_sections(struct parse *p, struct cfg *c)
{
	for (size_t i = 0; i < p->n_sections; i++) {
		const char *n = p->sections[i].name;
		if (strncmp(n, "stage.", 6) == 0 || strcmp(n, "stage") == 0) {
			if (strcmp(n, "stage") == 0 || !stage_name_ok(n + 6)) {
				fail(p,
				     "%s:%d: [%s]: a stage section is [stage.NAME], NAME letters, "
				     "digits, '_' and '-'",
				     p->path, p->sections[i].line, n);
				return -1;
			}
			if (strcmp(n + 6, "gpu") == 0) {
				fail(p, "%s:%d: [%s]: %s", p->path, p->sections[i].line, n,
				     STAGE_GPU_TAKEN);
				return -1;
			}
			for (size_t j = 0; j < i; j++) {
				if (strcmp(p->sections[j].name, n) == 0) {
					fail(p,
					     "%s:%d: section [%s] appears twice (first on line %d)",
					     p->path, p->sections[i].line, n, p->sections[j].line);
					return -1;
				}
			}
			if (!stage_get(p, c, n + 6, p->sections[i].line))
				return -1;
			continue;
		}
		if (strcmp(n, "job") && strcmp(n, "worker") && strcmp(n, "generator") &&
		    strcmp(n, "sink") && strcmp(n, "ui")) {
			const char *near = suggest(n, section_names);
			char hint[64] = "";
			if (near)
				snprintf(hint, sizeof hint, "did you mean [%s]? ", near);
			fail(p,
			     "%s:%d: unknown section [%s] (%sknown: job, worker, generator, sink, "
			     "ui, stage.NAME)",
			     p->path, p->sections[i].line, n, hint);
			return -1;
		}
		for (size_t j = 0; j < i; j++) {
			if (strcmp(p->sections[j].name, n) == 0) {
				fail(p, "%s:%d: section [%s] appears twice (first on line %d)",
				     p->path, p->sections[i].line, n, p->sections[j].line);
				return -1;
			}
		}
	}
	return 0;
}

/* Every key, file order then --set's: [job] and [ui] through their rows, the plugin
 * sections as they are. */
static int read_keys(struct parse *p, struct cfg *c)
{
	for (size_t i = 0; i < p->n_raw && !p->failed; i++) {
		struct raw *r = &p->raw[i];
		char loc[512];
		p->at = r->set_index;
		if (strcmp(r->section, "job") == 0 || strcmp(r->section, "ui") == 0) {
			if (key(p, c, r) < 0)
				return -1;
		} else if (strcmp(r->section, "worker") == 0) {
			section_add(p, c, &c->worker, r);
		} else if (strcmp(r->section, "generator") == 0) {
			section_add(p, c, &c->generator, r);
		} else if (strcmp(r->section, "sink") == 0) {
			section_add(p, c, &c->sink, r);
		} else if (strncmp(r->section, "stage.", 6) == 0) {
			if (stage_key(p, c, r) < 0)
				return -1;
		} else {
			fail(p,
			     "%s: unknown section [%s] (known: job, worker, generator, sink, ui, "
			     "stage.NAME)",
			     where(p, r, loc, sizeof loc), r->section);
			return -1;
		}
	}
	p->at = CFG_AT_JOB; /* from here, what the job as a whole lacks */
	return p->failed ? -1 : 0;
}

static int check_required(struct parse *p, struct cfg *c)
{
	if (!find_raw(p, "job", "gpus")) {
		fail(p, "%s: [job] gpus is required (a list of GPU ids like 0,1 or 'all')",
		     p->path);
		return -1;
	}
	if (!c->worker.plugin) {
		fail(p, "%s: [worker] plugin is required (the worker plugin's .so)", p->path);
		return -1;
	}
	if (!c->generator.plugin) {
		fail(p,
		     "%s: [generator] plugin is required (a built-in name like 'lines' or a .so)",
		     p->path);
		return -1;
	}
	if (!c->sink.plugin)
		c->sink.plugin = strdup("jsonl");
	for (size_t i = 0; i < c->n_stages; i++) {
		const struct cfg_stage *st = &c->stages[i];
		if (!st->sec.plugin) {
			if (st->line > 0)
				fail(p,
				     "%s:%d: [stage.%s] plugin is required (a worker plugin's .so, "
				     "or python)",
				     p->path, st->line, st->name);
			else
				fail(p, "%s: [stage.%s] plugin is required", p->path, st->name);
			return -1;
		}
	}
	return 0;
}

static int check_ranks(struct parse *p, struct cfg *c)
{
	bool has_rank = find_raw(p, "job", "rank"), has_ranks = find_raw(p, "job", "ranks");
	if (has_rank != has_ranks) {
		fail(p,
		     "%s: [job] rank and ranks go together (this process is rank `rank` of "
		     "`ranks`)",
		     p->path);
		return -1;
	}
	if (has_ranks && c->job_rank >= c->job_ranks) {
		fail(p, "%s: [job] rank = %u must be below ranks = %u", p->path, c->job_rank,
		     c->job_ranks);
		return -1;
	}
	return 0;
}

/* A worker holds at most queue_size tasks: max_in_flight above it could never be met
 * (an engine waiting for that many before it finishes any would wait for ever). */
static int check_in_flight(struct parse *p, const struct cfg *c)
{
	struct raw *r = find_raw(p, "job", "max_in_flight");
	if (!r || c->max_in_flight <= c->queue_size)
		return 0;
	char at[512], fed[160];
	size_t per = c->gpus_per_worker ? c->gpus_per_worker : 1;
	unsigned long long workers = (unsigned long long)(c->n_gpus / per) * c->workers_per_gpu;
	if (workers && !c->gpus_all && !c->gpus_auto)
		snprintf(fed, sizeof fed, "%llu (3 x max_in_flight x %llu worker%s)",
			 3ull * c->max_in_flight * workers, workers, workers == 1 ? "" : "s");
	else
		snprintf(fed, sizeof fed, "3 x max_in_flight x the workers");
	fail(p,
	     "%s: [job] max_in_flight = %u is more than queue_size = %u, the most tasks the "
	     "run holds: raise queue_size to at least %u, and to %s to keep each engine fed",
	     where(p, r, at, sizeof at), c->max_in_flight, c->queue_size, c->max_in_flight, fed);
	return -1;
}

/* A batching worker's calls get batch_size tasks when each worker may hold two
 * batches (one running, the next ready): with a queue_size set below that, what the
 * other workers (a CPU stage's, say) and the running batch hold leaves the next call
 * what is left of it, half a batch or less. Refused, saying what to give. */
static int check_batch_room(struct parse *p, const struct cfg *c)
{
	struct raw *r = find_raw(p, "job", "queue_size");
	size_t per = c->gpus_per_worker ? c->gpus_per_worker : 1;
	unsigned long long workers = (unsigned long long)(c->n_gpus / per) * c->workers_per_gpu;
	if (!r || c->batch_size <= 1 || !workers || c->gpus_all || c->gpus_auto)
		return 0;
	unsigned long long need = 2ull * c->batch_size * workers;
	if (need <= c->queue_size)
		return 0;
	char at[512];
	fail(p,
	     "%s: [job] queue_size = %u cannot hold 2 batches of batch_size = %u for each of "
	     "%llu worker%s, so calls would get fewer tasks: raise queue_size to %llu, or "
	     "lower batch_size",
	     where(p, r, at, sizeof at), c->queue_size, c->batch_size, workers,
	     workers == 1 ? "" : "s", need);
	return -1;
}

/* The journal: beside the job file by default, named after it (job.ini ->
 * job.journal), so a plain run can always be resumed. */
static void default_journal(struct cfg *c)
{
	const char *base = strrchr(c->path, '/');
	base = base ? base + 1 : c->path;
	size_t bl = strlen(base);
	if (bl > 4 && strcmp(base + bl - 4, ".ini") == 0)
		bl -= 4;
	if (!c->journal && !c->journal_off &&
	    asprintf(&c->journal, "%s/%.*s.journal", c->dir, (int)bl, base) < 0)
		c->journal = NULL;
	/* The claims of dynamic shares likewise (job.ini -> job.claims/). */
	if (!c->claims && asprintf(&c->claims, "%s/%.*s.claims", c->dir, (int)bl, base) < 0)
		c->claims = NULL;
}

/* The worker count and the plugin sections' sizes; then the plugins' views of them. */
static int check_sizes(struct parse *p, struct cfg *c)
{
	struct raw *gpw = find_raw(p, "job", "gpus_per_worker");
	if (gpw) {
		char loc[512];
		c->gpus_per_worker_at = strdup(where(p, gpw, loc, sizeof loc));
	}
	/* `all` and `auto` are counted at run start (run.c, ranks.c), and checked there. */
	char why[1024];
	if (!c->gpus_all && !c->gpus_auto && groups_check(c, why, sizeof why) < 0) {
		/* The line names gpus_per_worker's place; gpus may come from elsewhere. */
		struct raw *gr = find_raw(p, "job", "gpus");
		char loc[512], gloc[600] = "";
		if (gr && strncmp(where(p, gr, loc, sizeof loc), "--set", 5) == 0)
			snprintf(gloc, sizeof gloc, " (gpus from %s)", loc);
		fail(p, "%s%s", why, gloc);
		return -1;
	}
	struct cfg_section *secs[] = {&c->worker, &c->generator, &c->sink};
	static const char *const sec_names[] = {"worker", "generator", "sink"};
	for (size_t i = 0; i < 3; i++) {
		if (secs[i]->count > CFG_MAX_KEYS) {
			fail(p,
			     "%s: [%s] has %zu keys; at most %d are allowed (the %d-th is at %s)",
			     p->path, sec_names[i], secs[i]->count, CFG_MAX_KEYS, CFG_MAX_KEYS + 1,
			     secs[i]->where[CFG_MAX_KEYS]);
			return -1;
		}
		secs[i]->args.items = secs[i]->kv;
		secs[i]->args.count = secs[i]->count;
	}
	for (size_t i = 0; i < c->n_stages; i++) {
		struct cfg_section *s = &c->stages[i].sec;
		if (s->count > CFG_MAX_KEYS) {
			fail(p, "%s: [stage.%s] has %zu keys; at most %d are allowed", p->path,
			     c->stages[i].name, s->count, CFG_MAX_KEYS);
			return -1;
		}
		s->args.items = s->kv;
		s->args.count = s->count;
	}
	return 0;
}

/* Each key's own value is checked by its row (keys.c); what is left here are the rules
 * across keys and sections. */
static int validate(struct parse *p, struct cfg *c)
{
	if (check_sections(p, c) < 0 || read_keys(p, c) < 0 || check_required(p, c) < 0 ||
	    check_ranks(p, c) < 0 || check_in_flight(p, c) < 0 || check_batch_room(p, c) < 0)
		return -1;
	default_journal(c);
	return check_sizes(p, c);
}

static char *dir_of(const char *path)
{
	char *copy = strdup(path), *slash = strrchr(copy, '/'), *dir;
	if (!slash) {
		free(copy);
		return getcwd(NULL, 0);
	}
	if (slash == copy)
		slash[1] = '\0';
	else
		*slash = '\0';
	dir = realpath(copy, NULL);
	free(copy);
	return dir;
}

static void parse_free(struct parse *p)
{
	for (size_t i = 0; i < p->n_raw; i++) {
		free(p->raw[i].section);
		free(p->raw[i].key);
		free(p->raw[i].value);
	}
	for (size_t i = 0; i < p->n_sections; i++)
		free(p->sections[i].name);
	free(p->raw);
	free(p->slots);
	free(p->sections);
	free(p->linebuf);
}

/* Reads the job file into p's raw keys: 0, or -1 with the error in p. */
static int read_job_file(struct parse *p, struct cfg *c, const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(p->err, p->errlen,
			 "%s: is a folder; give the job file (an .ini file) itself", path);
		return -1;
	}
	/* Before opening: opening a FIFO waits for a writer. */
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(p->err, p->errlen,
			 "%s: not a regular file; a job file is an .ini file, read "
			 "whole",
			 path);
		return -1;
	}
	p->f = fopen(path, "r");
	if (!p->f) {
		snprintf(p->err, p->errlen, "%s: cannot open job file: %s", path, strerror(errno));
		return -1;
	}
	/* Checked on the open file, not the name: it is what will be read. */
	if (fstat(fileno(p->f), &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(p->err, p->errlen,
			 "%s: not a regular file; a job file is an .ini file, read "
			 "whole",
			 path);
		return -1;
	}
	if (st.st_size > (off_t)CFG_MAX_FILE) {
		snprintf(p->err, p->errlen,
			 "%s: %lld bytes, larger than the %u MiB a job file may have", path,
			 (long long)st.st_size, CFG_MAX_FILE >> 20);
		return -1;
	}
	c->dir = dir_of(path);
	if (!c->dir) {
		snprintf(p->err, p->errlen, "%s: cannot resolve its folder: %s", path,
			 strerror(errno));
		return -1;
	}

	/* Debian's inih takes its limits from these globals, not from INI_* macros. */
	ini_use_stack = false;
	ini_initial_alloc = CFG_MAX_LINE;
	ini_max_line = CFG_MAX_LINE;
	ini_allow_realloc = false;
	ini_allow_multiline = false;
	ini_stop_on_first_error = true;
	int line = ini_parse_stream(reader, p, handler, p);
	if (line != 0 && !p->failed) {
		if (line > 0)
			fail(p, "%s:%d: not a valid line (expected [section] or key = value)", path,
			     line);
		else
			fail(p, "%s: cannot read the job file", path);
	}
	return p->failed ? -1 : 0;
}

int cfg_load(struct cfg *c, const char *path, char *const *sets, size_t n_sets, char *err,
	     size_t errlen)
{
	return cfg_load_at(c, path, sets, n_sets, err, errlen, NULL);
}

int cfg_load_at(struct cfg *c, const char *path, char *const *sets, size_t n_sets, char *err,
		size_t errlen, long *at)
{
	struct parse p = {.path = path ? path : CFG_NO_FILE,
			  .err = err,
			  .errlen = errlen,
			  .at = path ? CFG_AT_FILE : CFG_AT_JOB,
			  .blame = path ? CFG_AT_FILE : CFG_AT_JOB};
	int rc = -1;

	*c = (struct cfg){
		.workers_per_gpu = 1,
		.gpus_per_worker = 1,
		.queue_size = 1024,
		.base_seed = 42,
		.max_task_bytes = 1u << 20,
		.max_result_bytes = 1u << 20,
		.max_worker_restarts = 3,
		.cleanup_timeout = 30,
		.timeout_grace = CFG_TIMEOUT_GRACE,
		.setup_timeout = CFG_SETUP_TIMEOUT,
		.drain_timeout = CFG_DRAIN_TIMEOUT,
		.lease = 60,
		.refresh_rate = 4,
		.retry_on = CFG_RETRY_ERROR | CFG_RETRY_TIMEOUT | CFG_RETRY_CRASH,
		.metrics_interval = 5,
		.batch_size = 1,
		.batch_wait_ms = -1, /* not set: cfg_batch_wait_ms */
		.max_in_flight = 1,
		.isolate_failures = true,
		.plain_interval = 5,
	};
	c->path = strdup(p.path);
	c->gpus = calloc(CFG_MAX_GPUS, sizeof *c->gpus);

	if (path ? read_job_file(&p, c, path) < 0 : !(c->dir = getcwd(NULL, 0))) {
		if (!path)
			snprintf(err, errlen, "cannot read the current folder: %s",
				 strerror(errno));
		goto out;
	}
	for (size_t i = 0; i < n_sets && !p.failed; i++) {
		p.at = (long)i;
		apply_set(&p, sets[i], (long)i);
	}
	p.at = CFG_AT_FILE; /* check_sections: the file's headers */
	if (p.failed || validate(&p, c) < 0)
		goto out;
	rc = 0;
out:
	if (at)
		*at = rc < 0 ? p.blame : CFG_AT_JOB;
	if (p.f)
		fclose(p.f);
	parse_free(&p);
	if (rc < 0)
		cfg_free(c);
	return rc;
}

static void section_free(struct cfg_section *s)
{
	for (size_t i = 0; i < s->count; i++) {
		free((char *)s->kv[i].key);
		free((char *)s->kv[i].value);
		free(s->where[i]);
	}
	free(s->kv);
	free(s->where);
	free(s->plugin);
}

void cfg_free(struct cfg *c)
{
	free(c->path);
	free(c->dir);
	free(c->gpus);
	for (size_t i = 0; c->gpu_tokens && i < c->n_gpus; i++)
		free(c->gpu_tokens[i]);
	free(c->gpu_tokens);
	free(c->gpus_per_worker_at);
	free(c->log_dir);
	free(c->python);
	free(c->python_at);
	free(c->journal);
	free(c->metrics_file);
	free(c->journal_at);
	free(c->claims);
	free(c->claims_at);
	free(c->log_dir_at);
	free(c->metrics_file_at);
	free(c->metrics_host);
	section_free(&c->worker);
	section_free(&c->generator);
	section_free(&c->sink);
	for (size_t i = 0; i < c->n_stages; i++) {
		free(c->stages[i].name);
		section_free(&c->stages[i].sec);
	}
	free(c->stages);
	*c = (struct cfg){0};
}
