/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "record/journal.h"
#include "util/log.h"
#include "util/hash.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/textio.h"
#include "wait.h"

#define MAGIC "GPUDJNL1"
#define VERSION 2u /* 2: INPUT records; a journal of format 1 (none) is read too */
#define HDR_SIZE 64u
#define REC_SIZE 32u

enum { REC_DONE = 1, REC_FAILED = 2, REC_END = 3, REC_INPUT = 4, REC_SAMPLE = 5 };

struct jhdr {
	char magic[8];
	uint32_t version;
	uint32_t rec_size;
	uint64_t fingerprint;
	uint64_t created;
	uint8_t pad[24];
	uint64_t check;
};

struct jrec {
	uint32_t kind;
	uint32_t status;
	uint64_t a, b;
	uint64_t check;
};

_Static_assert(sizeof(struct jhdr) == HDR_SIZE, "journal header");
_Static_assert(sizeof(struct jrec) == REC_SIZE, "journal record");

/* A record's check word: its fields and its place in the file. */
static uint64_t rec_check(const struct jrec *r, uint64_t index)
{
	uint64_t h = hash_mix(UINT64_C(0x6a6f75726e616c31), index);
	h = hash_mix(h, (uint64_t)r->kind << 32 | r->status);
	h = hash_mix(h, r->a);
	return hash_mix(h, r->b);
}

static uint64_t hdr_check(const struct jhdr *h)
{
	uint64_t c = 0;
	const uint8_t *p = (const uint8_t *)h;
	for (size_t i = 0; i + 8 <= offsetof(struct jhdr, check); i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		c = hash_mix(c, v);
	}
	return c;
}

static uint64_t section_print(uint64_t h, const struct cfg_section *s)
{
	h = hash_str(h, s->plugin);
	for (size_t i = 0; i < s->count; i++) {
		struct stat st;
		/* The Python program's arguments (gpud.Dispatcher gives its workers sys.argv)
		 * say how it was started, not what the job is: a resume may differ there. */
		if (!strcmp(s->kv[i].key, "gpud_argv"))
			continue;
		h = hash_str(h, s->kv[i].key);
		h = hash_str(h, s->kv[i].value);
		/* An input file that changed makes another job (not one the plugin writes). */
		if (s->kv[i].value[0] == '/' && !inputs_output_key(s->kv[i].key) &&
		    stat(s->kv[i].value, &st) == 0 && S_ISREG(st.st_mode)) {
			h = hash_mix(h, (uint64_t)st.st_size);
			h = hash_mix(h, (uint64_t)st.st_mtim.tv_sec * 1000000000u +
						(uint64_t)st.st_mtim.tv_nsec);
		}
	}
	return h;
}

uint64_t journal_fingerprint(const struct cfg *c)
{
	uint64_t h = HASH_SEED;
	h = section_print(h, &c->worker);
	for (size_t i = 0; i < c->n_stages; i++) { /* CPU stages make the input too */
		h = hash_str(h, c->stages[i].name);
		h = section_print(h, &c->stages[i].sec);
	}
	h = section_print(h, &c->generator);
	/* The sink too: resuming into another output would leave the earlier results
	 * elsewhere (an output file is not an input: only its name counts). */
	h = hash_str(h, c->sink.plugin);
	for (size_t i = 0; i < c->sink.count; i++) {
		h = hash_str(h, c->sink.kv[i].key);
		h = hash_str(h, c->sink.kv[i].value);
	}
	/* A rank's journal is its own; with dynamic shares, whatever the number of ranks
	 * (a resume may run more or fewer: each goes on from its rank's claims). */
	h = hash_mix(h, (uint64_t)c->rank << 32 |
				(c->shares == CFG_SHARES_DYNAMIC ? 0xffffffffu : c->ranks));
	return hash_mix(h, c->base_seed);
}

/* ---- the done set ---- */

/* The window grows to word `w`. 0, or -1 when it cannot (out of memory, or a window no
 * allocation could hold: an id far past the rest, which a caller may have been handed
 * by a file or an output, is no reason to abort). */
static int ensure_word(struct journal *j, uint64_t w)
{
	uint64_t idx = w - j->base_word;
	if (idx < j->n_words)
		return 0;
	if (idx >= SIZE_MAX / 2 / sizeof *j->words)
		return -1;
	if (idx >= j->cap_words) {
		size_t cap = j->cap_words ? j->cap_words : 64;
		while (cap <= idx)
			cap *= 2;
		uint64_t *nw = realloc(j->words, cap * sizeof *nw);
		if (!nw)
			return -1;
		j->words = nw;
		uint8_t *nd = realloc(j->dirty, cap);
		if (!nd)
			return -1;
		j->dirty = nd;
		j->cap_words = cap;
	}
	memset(j->words + j->n_words, 0, (idx + 1 - j->n_words) * sizeof *j->words);
	memset(j->dirty + j->n_words, 0, idx + 1 - j->n_words);
	j->n_words = idx + 1;
	return 0;
}

/* Moves `low` past every done id, and drops the whole words below it that are written. */
static void advance(struct journal *j)
{
	for (;;) {
		/* Another rank's word (RANKS_CHUNK = 64): not ours to wait for. */
		if (j->low % 64 == 0 &&
		    (j->foreign ? j->foreign(j->foreign_ctx, j->low / 64)
				: j->ranks > 1 && (j->low / 64) % j->ranks != j->rank)) {
			j->low += 64;
			continue;
		}
		uint64_t idx = j->low / 64 - j->base_word;
		if (idx >= j->n_words || !(j->words[idx] >> (j->low % 64) & 1))
			break;
		if (j->low % 64 == 0 && j->words[idx] == UINT64_MAX)
			j->low += 64;
		else
			j->low++;
	}
	size_t drop = 0;
	while (drop < j->n_words && drop < j->low / 64 - j->base_word && !j->dirty[drop])
		drop++;
	if (drop) {
		memmove(j->words, j->words + drop, (j->n_words - drop) * sizeof *j->words);
		memmove(j->dirty, j->dirty + drop, j->n_words - drop);
		j->n_words -= drop;
		j->base_word += drop;
	}
}

/* 0, or -1 when the window cannot hold `id` (nothing changed). */
static int set_done(struct journal *j, uint64_t id, bool dirty)
{
	if (id < j->low)
		return 0;
	uint64_t w = id / 64;
	if (ensure_word(j, w) < 0)
		return -1;
	uint64_t *word = &j->words[w - j->base_word];
	uint64_t bit = UINT64_C(1) << (id % 64);
	if (*word & bit)
		return 0;
	*word |= bit;
	j->done++;
	if (dirty)
		j->dirty[w - j->base_word] = 1;
	return 0;
}

static void clear_done(struct journal *j, uint64_t id)
{
	uint64_t w = id / 64;
	if (id < j->low || w < j->base_word || w - j->base_word >= j->n_words)
		return;
	uint64_t *word = &j->words[w - j->base_word];
	uint64_t bit = UINT64_C(1) << (id % 64);
	if (*word & bit) {
		*word &= ~bit;
		j->done--;
	}
}

/* ---- records ---- */

static void put_rec(struct journal *j, uint32_t kind, uint32_t status, uint64_t a, uint64_t b)
{
	if (j->pending_len + REC_SIZE > j->pending_cap) {
		size_t cap = j->pending_cap ? 2 * j->pending_cap : 64 * REC_SIZE;
		uint8_t *p = realloc(j->pending, cap);
		if (!p) {
			perror("gpud: journal");
			abort();
		}
		j->pending = p;
		j->pending_cap = cap;
	}
	struct jrec r = {kind, status, a, b, 0};
	r.check = rec_check(&r, j->records + j->pending_len / REC_SIZE);
	memcpy(j->pending + j->pending_len, &r, REC_SIZE);
	j->pending_len += REC_SIZE;
}

/* Appends v to the growing array *a (*n used of *cap). 0, or -1 out of memory. */
static int push_u64(uint64_t **a, size_t *n, size_t *cap, uint64_t v)
{
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		uint64_t *p = realloc(*a, c * sizeof *p);
		if (!p)
			return -1;
		*a = p;
		*cap = c;
	}
	(*a)[(*n)++] = v;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

/* A FAILED record read: its id, its place among them, and whether it says failed (a
 * status 0 one says a failure was fixed later). */
struct fail_word {
	uint64_t id, seq;
	bool failed;
};

static int cmp_fail_word(const void *a, const void *b)
{
	const struct fail_word *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

/* By id, then by place in the file. */
static int cmp_sample(const void *a, const void *b)
{
	const struct journal_sample *x = a, *y = b;
	if (x->id != y->id)
		return x->id < y->id ? -1 : 1;
	return (x->seq > y->seq) - (x->seq < y->seq);
}

static uint64_t hash_bytes(uint64_t h, const uint8_t *p, size_t size)
{
	size_t i = 0;
	for (; i + 8 <= size; i += 8) {
		uint64_t v;
		memcpy(&v, p + i, 8);
		h = hash_mix(h, v);
	}
	uint64_t tail = 0;
	memcpy(&tail, p + i, size - i);
	return hash_mix(h, tail);
}

/* A 64-bit hash of an input, 8 bytes a step: its size and, of a large one, its first
 * and last 32 KiB (a sample is to tell another input, not to find an edit; hashing
 * whole 1 MiB inputs cost whole percents of a short run). */
#define SAMPLE_SPAN 32768u
static uint64_t input_hash(const void *data, size_t size)
{
	const uint8_t *p = data;
	uint64_t h = hash_mix(UINT64_C(0x73616d706c653031), size);
	if (size <= 2 * SAMPLE_SPAN)
		return hash_bytes(h, p, size);
	h = hash_bytes(h, p, SAMPLE_SPAN);
	return hash_bytes(h, p + size - SAMPLE_SPAN, SAMPLE_SPAN);
}

/* The first sample at or after `id` (samples are sorted by id), or NULL. */
static const struct journal_sample *sample_from(const struct journal *j, uint64_t id)
{
	size_t lo = 0, hi = j->n_samples;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (j->samples[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < j->n_samples ? &j->samples[lo] : NULL;
}

int journal_sample(struct journal *j, uint64_t id, const void *data, size_t size)
{
	uint64_t h = input_hash(data, size);
	const struct journal_sample *was = sample_from(j, id);
	if (was && was->id != id)
		was = NULL;
	if (was && j->compare_samples)
		return was->hash == h ? 0 : -1;
	if (!was || was->hash != h)
		put_rec(j, REC_SAMPLE, 0, id, h);
	return 0;
}

uint64_t journal_sample_from(const struct journal *j, uint64_t id)
{
	const struct journal_sample *s = j->compare_samples ? sample_from(j, id) : NULL;
	return s ? s->id : UINT64_MAX;
}

bool journal_samples_below(const struct journal *j, uint64_t id)
{
	return j->compare_samples && j->n_samples && j->samples[0].id < id;
}

static bool was_failure(const struct journal *j, uint64_t id)
{
	return j->n_fail && bsearch(&id, j->fail_ids, j->n_fail, sizeof id, cmp_u64);
}

/* Whether `id` was done in the journal as loaded (journal_sink_begin). */
static bool was_done(const struct journal *j, uint64_t id)
{
	uint64_t w = id / 64;
	if (id < j->was_low)
		return true;
	if (w < j->was_base || w - j->was_base >= j->was_n)
		return false;
	return j->was_words[w - j->was_base] >> (id % 64) & 1;
}

void journal_sink_begin(struct journal *j)
{
	j->was_dirty = j->dirty; /* all clear: the loaded words are all written */
	j->was_words = j->words;
	j->was_n = j->n_words;
	j->was_low = j->low;
	j->was_base = j->base_word;
	j->was_done = j->done;
	j->was_cap = j->cap_words;
	j->words = NULL;
	j->dirty = NULL;
	j->n_words = j->cap_words = 0;
	j->low = 0;
	j->base_word = 0;
	j->done = 0;
}

void journal_sink_cancel(struct journal *j)
{
	free(j->words);
	free(j->dirty);
	j->words = j->was_words;
	j->dirty = j->was_dirty;
	j->n_words = j->was_n;
	j->cap_words = j->was_cap;
	j->low = j->was_low;
	j->base_word = j->was_base;
	j->done = j->was_done;
	free(j->sink_fail);
	j->was_words = j->sink_fail = NULL;
	j->was_dirty = NULL;
	j->was_n = j->n_sink_fail = j->cap_sink_fail = 0;
}

int journal_sink_holds(struct journal *j, uint64_t id, int status)
{
	if (status == 0) {
		/* Written again only when the journal did not have it (a record lost in a
		 * crash, or a journal made anew). */
		return set_done(j, id, !was_done(j, id));
	}
	return push_u64(&j->sink_fail, &j->n_sink_fail, &j->cap_sink_fail,
			id << 2 | (uint64_t)(status & 3));
}

static void add_failure(struct journal *j, uint64_t id)
{
	/* Out of memory: its record is written all the same; only this run's count of
	 * failures misses it. */
	if (push_u64(&j->fail_ids, &j->n_fail, &j->cap_fail, id) < 0)
		perror("gpud: journal");
}

/* Whether the output holds a failure line for `id` (sink_fail, sorted). */
static int cmp_sink_fail(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a >> 2, y = *(const uint64_t *)b >> 2;
	return (x > y) - (x < y);
}

static bool output_failed(const struct journal *j, uint64_t id)
{
	uint64_t key = id << 2;
	return j->n_sink_fail &&
	       bsearch(&key, j->sink_fail, j->n_sink_fail, sizeof key, cmp_sink_fail) != NULL;
}

void journal_sink_end(struct journal *j, bool writes_failures)
{
	if (j->n_sink_fail)
		qsort(j->sink_fail, j->n_sink_fail, sizeof *j->sink_fail, cmp_sink_fail);
	/* The recorded failures: one the output now holds an ok line for was fixed by a
	 * retry (said once, so the next resume loads it as ok); one a sink that writes
	 * failures does not hold was lost with its output and runs again; the others
	 * stand, done, unless they are being retried. Only ok lines are in the done set
	 * yet. */
	size_t k = 0;
	for (size_t i = 0; i < j->n_fail; i++) {
		uint64_t id = j->fail_ids[i];
		if (journal_is_done(j, id)) {
			put_rec(j, REC_FAILED, 0, id, 0);
			if (!j->retrying)
				j->failed--;
			continue;
		}
		if (writes_failures && !output_failed(j, id)) {
			/* Said so (as for a fixed one), or the record would stand if it
			 * ends ok this time; if it fails again it is recorded again. */
			put_rec(j, REC_FAILED, 0, id, 0);
			if (!j->retrying)
				j->failed--;
			continue;
		}
		j->fail_ids[k++] = id;
	}
	size_t loaded = k;
	j->n_fail = k;
	if (!j->retrying)
		for (size_t i = 0; i < loaded; i++)
			set_done(j, j->fail_ids[i], !was_done(j, j->fail_ids[i]));
	/* The failures the output holds: an ok line for the same task wins; a retried
	 * one runs again; one the journal did not record is recorded. */
	for (size_t i = 0; i < j->n_sink_fail; i++) {
		uint64_t id = j->sink_fail[i] >> 2;
		int status = (int)(j->sink_fail[i] & 3);
		if (j->retrying || journal_is_done(j, id))
			continue;
		/* (A recorded failure is done by now: this one is new to the journal.) Out
		 * of memory for it: not done, it runs again. */
		if (set_done(j, id, !was_done(j, id)) < 0)
			continue;
		put_rec(j, REC_FAILED, (uint32_t)status, id, 0);
		add_failure(j, id);
		j->failed++;
	}
	if (j->n_fail)
		qsort(j->fail_ids, j->n_fail, sizeof *j->fail_ids, cmp_u64);
	free(j->was_words);
	free(j->was_dirty);
	free(j->sink_fail);
	j->was_words = j->sink_fail = NULL;
	j->was_dirty = NULL;
	j->was_n = j->n_sink_fail = j->cap_sink_fail = 0;
	j->was_low = j->was_base = 0;
}

void journal_mark(struct journal *j, uint64_t id, int status)
{
	if (j->fd < 0)
		return;
	if (status) {
		put_rec(j, REC_FAILED, (uint32_t)status, id, 0);
		j->failed++;
	} else if (j->retrying && was_failure(j, id)) {
		put_rec(j, REC_FAILED, 0, id, 0); /* it failed before; now it is ok */
	}
	if (set_done(j, id, true) < 0 && !j->mark_failed) {
		/* The run goes on; only a --resume is the worse for it. */
		j->mark_failed = true;
		fprintf(LOG_ERR,
			"gpud: the journal %s: out of memory to record task %llu done "
			"(and maybe others): a --resume runs them again\n",
			j->path, (unsigned long long)id);
	}
}

int journal_flush(struct journal *j, bool sync)
{
	if (j->fd < 0)
		return 0;
	for (size_t i = 0; i < j->n_words; i++) {
		if (j->dirty[i]) {
			put_rec(j, REC_DONE, 0, (j->base_word + i) * 64, j->words[i]);
			j->dirty[i] = 0;
		}
	}
	int rc = 0;
	if (j->pending_len) {
		rc = io_write_all(j->fd, j->pending, j->pending_len);
		if (rc == 0)
			j->records += j->pending_len / REC_SIZE;
		j->pending_len = 0;
	}
	advance(j);
	if (rc == 0 && sync)
		rc = fdatasync(j->fd);
	j->flushed_ns = wait_now_ns();
	return rc;
}

int journal_end(struct journal *j, uint64_t count)
{
	if (j->fd < 0)
		return 0;
	journal_flush(j, false);
	/* A resume that found everything done and ran nothing: the journal already ends
	 * so, and stays as it was. */
	if (j->ended && j->end_count == count && j->records == j->records_loaded)
		return 0;
	put_rec(j, REC_END, 0, count, 0);
	return journal_flush(j, true);
}

/* ---- files ---- */

static int open_file(struct journal *j, const char *path, int flags, char *why, size_t len)
{
	unsigned rank = j->rank, ranks = j->ranks; /* set by the caller before */
	bool (*foreign)(void *, uint64_t) = j->foreign;
	void *foreign_ctx = j->foreign_ctx;
	*j = (struct journal){.fd = -1,
			      .rank = rank,
			      .ranks = ranks,
			      .foreign = foreign,
			      .foreign_ctx = foreign_ctx};
	j->path = strdup(path);
	j->fd = open(path, flags | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (j->fd < 0) {
		snprintf(why, len, "cannot open the journal %s: %s", path, strerror(errno));
		return -1;
	}
	/* Never one of the descriptors workers are given (0-6). */
	if (j->fd < 10) {
		int hi = fcntl(j->fd, F_DUPFD_CLOEXEC, 10);
		close(j->fd);
		j->fd = hi;
	}
	return 0;
}

int journal_create(struct journal *j, const char *path, uint64_t fingerprint,
		   const struct journal_input *in, size_t n, char *why, size_t len)
{
	if (open_file(j, path, O_RDWR | O_CREAT | O_TRUNC, why, len) < 0)
		return -1;
	struct jhdr h = {.version = VERSION,
			 .rec_size = REC_SIZE,
			 .fingerprint = fingerprint,
			 .created = (uint64_t)time(NULL)};
	memcpy(h.magic, MAGIC, 8);
	h.check = hdr_check(&h);
	if (io_write_all(j->fd, (const uint8_t *)&h, sizeof h) < 0) {
		snprintf(why, len, "cannot write the journal %s: %s", path, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		put_rec(j, REC_INPUT, in[i].tag, in[i].a, in[i].b);
	if (journal_flush(j, false) < 0) {
		snprintf(why, len, "cannot write the journal %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

/* Takes in one valid record (the good-th). 0, or -1 with why. */
static int take_record(struct journal *j, const struct jrec *r, uint64_t good, char *why,
		       size_t len)
{
	if (r->kind == REC_DONE) {
		for (uint64_t m = r->b; m; m &= m - 1) {
			if (set_done(j, r->a + (uint64_t)__builtin_ctzll(m), false) < 0) {
				snprintf(why, len,
					 "out of memory for the journal %s (it records task %llu "
					 "done)",
					 j->path, (unsigned long long)r->a);
				return -1;
			}
		}
	} else if (r->kind == REC_FAILED) {
		/* status 0: a failure that later ended ok (kept, then dropped). */
		if (push_u64(&j->fail_ids, &j->n_fail, &j->cap_fail, r->a << 1 | (r->status != 0)) <
		    0)
			goto oom;
	} else if (r->kind == REC_SAMPLE) {
		if (j->n_samples == j->cap_samples) {
			size_t cap = j->cap_samples ? 2 * j->cap_samples : 64;
			struct journal_sample *sm = realloc(j->samples, cap * sizeof *sm);
			if (!sm)
				goto oom;
			j->samples = sm;
			j->cap_samples = cap;
		}
		j->samples[j->n_samples++] = (struct journal_sample){r->a, r->b, good};
	} else if (r->kind == REC_INPUT) {
		struct journal_input *in = realloc(j->inputs, (j->n_inputs + 1) * sizeof *in);
		if (!in)
			goto oom;
		j->inputs = in;
		in[j->n_inputs++] = (struct journal_input){.tag = r->status, .a = r->a, .b = r->b};
	} else {
		j->ended = true;
		j->end_count = r->a;
	}
	return 0;
oom:
	snprintf(why, len, "out of memory");
	return -1;
}

/* Reads the n records after the header up to the first bad one: *good is how many were
 * valid. 0, or -1 with why. */
static int read_records(struct journal *j, uint64_t n, uint64_t *good, char *why, size_t len)
{
	struct jrec buf[1024];
	*good = 0;
	while (*good < n) {
		size_t want = n - *good < 1024 ? (size_t)(n - *good) : 1024;
		ssize_t got =
			pread(j->fd, buf, want * REC_SIZE, (off_t)(HDR_SIZE + *good * REC_SIZE));
		if (got < (ssize_t)(want * REC_SIZE)) {
			snprintf(why, len, "cannot read the journal %s: %s", j->path,
				 got < 0 ? strerror(errno) : "short read");
			return -1;
		}
		for (size_t i = 0; i < want; i++) {
			struct jrec *r = &buf[i];
			if (r->check != rec_check(r, *good) || r->kind < REC_DONE ||
			    r->kind > REC_SAMPLE || (r->kind == REC_DONE && r->a % 64))
				return 0;
			if (take_record(j, r, *good, why, len) < 0)
				return -1;
			++*good;
		}
	}
	return 0;
}

/* The last word about each failed id holds: (id, place in the file) sorted, the last of
 * each id kept when it says failed. O(n log n): a job whose every task failed has as
 * many records. 0, or -1 out of memory. */
static int settle_failures(struct journal *j)
{
	size_t k = 0;
	if (j->n_fail) {
		struct fail_word *fw = malloc(j->n_fail * sizeof *fw);
		if (!fw)
			return -1;
		for (size_t i = 0; i < j->n_fail; i++)
			fw[i] = (struct fail_word){j->fail_ids[i] >> 1, i, j->fail_ids[i] & 1};
		qsort(fw, j->n_fail, sizeof *fw, cmp_fail_word);
		for (size_t i = 0; i < j->n_fail; i++)
			if ((i + 1 == j->n_fail || fw[i + 1].id != fw[i].id) && fw[i].failed)
				j->fail_ids[k++] = fw[i].id;
		free(fw);
	}
	j->n_fail = k; /* sorted by id, each once */
	j->failed = j->n_fail;
	return 0;
}

/* Samples by id; of two for one id (a run resumed with --force), the later. */
static void settle_samples(struct journal *j)
{
	if (!j->n_samples)
		return;
	qsort(j->samples, j->n_samples, sizeof *j->samples, cmp_sample);
	size_t k = 0;
	for (size_t i = 0; i < j->n_samples; i++) {
		if (k && j->samples[k - 1].id == j->samples[i].id)
			k--;
		j->samples[k++] = j->samples[i];
	}
	j->n_samples = k;
}

/* Reads the header and every record; the records past the first bad one are cut when
 * `cut`. 0, or -1 with why. */
static int load(struct journal *j, uint64_t *fingerprint, bool cut, char *why, size_t len)
{
	struct jhdr h;
	struct stat st;
	if (fstat(j->fd, &st) < 0 || pread(j->fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
	    memcmp(h.magic, MAGIC, 8) != 0 || h.check != hdr_check(&h)) {
		snprintf(why, len, "%s is not a gpud journal (or its header is damaged)", j->path);
		return -1;
	}
	if (h.version < 1 || h.version > VERSION || h.rec_size != REC_SIZE) {
		snprintf(why, len, "%s is a journal of format %u, this gpud reads formats 1 to %u",
			 j->path, h.version, VERSION);
		return -1;
	}
	*fingerprint = h.fingerprint;
	j->fingerprint = h.fingerprint;
	uint64_t good;
	if (read_records(j, ((uint64_t)st.st_size - HDR_SIZE) / REC_SIZE, &good, why, len) < 0)
		return -1;
	uint64_t end = HDR_SIZE + good * REC_SIZE;
	if (end < (uint64_t)st.st_size) {
		j->cut_bytes = (uint64_t)st.st_size - end;
		if (cut && ftruncate(j->fd, (off_t)end) < 0) {
			snprintf(why, len, "cannot cut the torn end of the journal %s: %s", j->path,
				 strerror(errno));
			return -1;
		}
	}
	j->records = good;
	j->records_loaded = good;
	if (settle_failures(j) < 0) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	settle_samples(j);
	return 0;
}

int journal_resume(struct journal *j, const char *path, uint64_t fingerprint,
		   const struct journal_input *in, size_t n, bool force, bool retry_failed,
		   char *why, size_t len)
{
	struct stat st;
	if (lstat(path, &st) < 0 && errno == ENOENT)
		return journal_create(j, path, fingerprint, in, n, why, len) < 0 ? -1 : 1;
	if (open_file(j, path, O_RDWR, why, len) < 0)
		return -1;
	uint64_t fp;
	if (load(j, &fp, true, why, len) < 0)
		return -1;
	char changed[900];
	if (!force && inputs_compare(j->inputs, j->n_inputs, in, n, changed, sizeof changed)) {
		snprintf(why, len,
			 "%s, so the task ids of the journal %s no longer name the same "
			 "tasks; run without --resume to start over, or add --force to resume "
			 "anyway",
			 changed, path);
		return -1;
	}
	if (fp != fingerprint && !force) {
		snprintf(why, len,
			 "the journal %s was written by another job (another worker, "
			 "generator, their keys or input files); run without --resume to start "
			 "over, or add --force to resume anyway",
			 path);
		return -1;
	}
	j->compare_samples = !force;
	if (retry_failed) {
		for (size_t i = 0; i < j->n_fail; i++)
			clear_done(j, j->fail_ids[i]);
		j->retrying = true;
		/* With failures to run again the run is not finished; with none it is, and
		 * stays as the journal says. */
		if (j->n_fail)
			j->ended = false;
		j->failed = 0; /* they run again; what fails now is counted anew */
	}
	advance(j);
	if (lseek(j->fd, 0, SEEK_END) < 0) {
		snprintf(why, len, "journal %s: %s", path, strerror(errno));
		return -1;
	}
	return 0;
}

int journal_read(struct journal *j, const char *path, char *why, size_t len)
{
	if (open_file(j, path, O_RDONLY, why, len) < 0)
		return -1;
	uint64_t fp;
	if (load(j, &fp, false, why, len) < 0)
		return -1;
	advance(j);
	return 0;
}

void journal_close(struct journal *j)
{
	if (j->fd >= 0)
		close(j->fd);
	free(j->path);
	free(j->words);
	free(j->dirty);
	free(j->fail_ids);
	free(j->pending);
	free(j->inputs);
	free(j->was_words);
	free(j->was_dirty);
	free(j->sink_fail);
	free(j->samples);
	*j = (struct journal){.fd = -1};
}
