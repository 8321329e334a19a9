/* SPDX-License-Identifier: MIT */
/*
 * Generator `tar`: the samples of WebDataset-style shards, read with libarchive.
 *
 * `path` is one glob (braces allowed: shards/{a,b}.tar, shards/train-*.tar.zst) naming
 * .tar, .tar.gz or .tar.zst shards (any format and filter libarchive reads), taken in
 * the glob's sorted order. A sample is a run of consecutive members whose names share a
 * key: the member's path up to the first dot of its file name (WebDataset's rule:
 * a/0001.jpg and a/0001.cls are sample a/0001). A task's bytes are its sample's member
 * whose extension (after that dot) is `member` (default jpg).
 *
 * open() reads every shard's headers once (a first pass: the data of a .tar is seeked
 * over, a compressed shard is decompressed), which gives the total, the task ids (in
 * shard order, then member order) and the keys; `keys_out = FILE` writes them there,
 * one "id<TAB>key<TAB>shard" line per task, so a sink's outputs (by task id) can be
 * joined with the samples' keys. next() then reads the shards again, in order.
 *
 * Failures, each one task's outcome (GPUD_GENERATOR_TASK_FAILED), the stream going on:
 * a sample without the member (naming key and shard); a damaged or truncated shard: the
 * samples before the damage are tasks, the damage is one more task that fails with
 * libarchive's message naming the shard (the sample it cut short, if any, is that task),
 * and the next shard follows. A shard that reads differently the second time (changed
 * meanwhile) fails each of its remaining tasks, naming it.
 */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpud/plugin.h>

#include "check.h"

GPUD_PLUGIN("generator", "tar", "1.0");
GPUD_PLUGIN_DESCRIPTION("the samples of WebDataset tar shards (path: a glob), one member each");
GPUD_PLUGIN_KEYS("path", "member", "keys_out");

/* One task: a sample, or the damage of a shard (damage != NULL). */
struct sample {
	char *key;
	char *damage;        /* the task's failure message, for a damaged shard's */
	uint32_t shard;      /* index into tar->shards */
	uint64_t first;      /* the shard's entry (header) index of its first member */
	uint64_t n_entries;  /* members (and other entries) it spans */
	int64_t member;      /* entry index of the member that is the task's bytes, or -1 */
	int64_t member_size; /* that member's size in bytes */
};

struct tar {
	char **shards;
	size_t n_shards;
	char *member;
	struct sample *s;
	size_t n, cap, next;
	/* The shard being read: its archive, its index, the next entry's index. */
	struct archive *a;
	uint32_t cur;
	uint64_t entry;
	bool broken; /* a read error in `cur`: every later task of it fails */
	char broken_msg[256];
};

static struct archive *open_shard(const char *path, struct gpud_error *err)
{
	struct archive *a = archive_read_new();
	if (!a) {
		gpud_fail(err, "tar: out of memory");
		return NULL;
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	if (archive_read_open_filename(a, path, 1 << 16) != ARCHIVE_OK) {
		gpud_fail(err, "tar: cannot read shard %s: %s", path, archive_error_string(a));
		archive_read_free(a);
		return NULL;
	}
	return a;
}

/* The key of member `name` (its path up to the first dot of its file name) and its
 * extension (after that dot; "" without one). */
static void split_name(const char *name, size_t *key_len, const char **ext)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const char *dot = strchr(base, '.');
	*key_len = dot ? (size_t)(dot - name) : strlen(name);
	*ext = dot ? dot + 1 : "";
}

static struct sample *add(struct tar *t)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;
		struct sample *p = realloc(t->s, cap * sizeof *p);
		if (!p)
			return NULL;
		t->s = p;
		t->cap = cap;
	}
	struct sample *s = &t->s[t->n++];
	*s = (struct sample){.member = -1};
	return s;
}

/* The first pass over shard `k`: its samples, and its damage as one more task. */
static int index_shard(struct tar *t, uint32_t k, struct gpud_error *err)
{
	const char *path = t->shards[k];
	struct archive *a = open_shard(path, err);
	if (!a)
		return -1;
	struct archive_entry *e;
	struct sample *cur = NULL;
	uint64_t idx = 0;
	int rc;
	while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
		const char *name = archive_entry_pathname(e);
		if (!name || archive_entry_filetype(e) != AE_IFREG) {
			if (cur)
				cur->n_entries++; /* a folder entry between members: skipped */
			idx++;
			continue;
		}
		size_t kl;
		const char *ext;
		split_name(name, &kl, &ext);
		if (!cur || strlen(cur->key) != kl || strncmp(cur->key, name, kl) != 0) {
			cur = add(t);
			if (!cur || !(cur->key = strndup(name, kl)))
				goto oom;
			cur->shard = k;
			cur->first = idx;
		}
		if (!strcmp(ext, t->member) && cur->member < 0) {
			cur->member = (int64_t)idx;
			cur->member_size = archive_entry_size(e);
		}
		cur->n_entries++;
		idx++;
	}
	if (rc != ARCHIVE_EOF) {
		/* The sample the damage cut short (its data may be gone) is the damage's task;
		 * with none under way, the damage is a task of its own. */
		struct sample *d = cur ? cur : add(t);
		if (!d)
			goto oom;
		char *msg;
		if (asprintf(&msg, "tar: shard %s is damaged%s%s%s: %s", path,
			     d->key ? " at sample '" : "", d->key ? d->key : "", d->key ? "'" : "",
			     archive_error_string(a) ? archive_error_string(a) : "read error") < 0)
			goto oom;
		d->damage = msg;
		d->shard = k;
	}
	archive_read_free(a);
	return 0;
oom:
	archive_read_free(a);
	return gpud_fail(err, "tar: out of memory");
}

static void free_tar(struct tar *t)
{
	if (!t)
		return;
	if (t->a)
		archive_read_free(t->a);
	for (size_t i = 0; i < t->n; i++) {
		free(t->s[i].key);
		free(t->s[i].damage);
	}
	free(t->s);
	for (size_t i = 0; i < t->n_shards; i++)
		free(t->shards[i]);
	free(t->shards);
	free(t->member);
	free(t);
}

/* The shards `path` names: a glob, sorted; none is an error naming the pattern. */
static int list_shards(const char *path, char ***out, size_t *n, struct gpud_error *err)
{
	glob_t g;
	int rc = glob(path, GLOB_BRACE | GLOB_ERR, NULL, &g);
	if (rc == GLOB_NOMATCH)
		return gpud_fail(err, "tar: path = '%s': no shard matches", path);
	if (rc != 0)
		return gpud_fail(err, "tar: path = '%s': cannot list: %s", path,
				 rc == GLOB_NOSPACE ? "out of memory" : strerror(errno));
	*out = calloc(g.gl_pathc, sizeof **out);
	if (!*out) {
		globfree(&g);
		return gpud_fail(err, "tar: out of memory");
	}
	for (size_t i = 0; i < g.gl_pathc; i++)
		if (!((*out)[i] = strdup(g.gl_pathv[i]))) {
			for (size_t k = 0; k < i; k++)
				free((*out)[k]);
			free(*out);
			globfree(&g);
			return gpud_fail(err, "tar: out of memory");
		}
	*n = g.gl_pathc;
	globfree(&g);
	return 0;
}

static int parse(const struct gpud_args *args, const char **path, const char **member,
		 struct gpud_error *err)
{
	*path = gpud_arg(args, "path", NULL);
	*member = gpud_arg(args, "member", "jpg");
	if (!*path || !**path)
		return gpud_fail(err, "tar: 'path' is required (the shards: a glob such as "
				      "shards/train-*.tar)");
	if (!**member)
		return gpud_fail(err,
				 "tar: member = '': name the member extension (jpg, png, ...)");
	return 0;
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *path, *member;
	if (parse(args, &path, &member, err) < 0)
		return -1;
	char **shards = NULL;
	size_t n = 0;
	if (list_shards(path, &shards, &n, err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			rc = check_file_readable("tar", shards[i], err);
		free(shards[i]);
	}
	free(shards);
	const char *keys = gpud_arg(args, "keys_out", NULL);
	if (rc == 0 && keys)
		rc = check_file_writable("tar", keys, err);
	return rc;
}

/* `keys_out`: every task's key, written whole then renamed into place; left alone when
 * it holds that already (a reader of it sees no change). A key ending in _out is never
 * taken for an input by gpud (record/inputs.h). */
static int write_keys(const struct tar *t, const char *path, struct gpud_error *err)
{
	char *text = NULL, *tmp = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	if (!m)
		return gpud_fail(err, "tar: out of memory");
	for (size_t i = 0; i < t->n; i++)
		fprintf(m, "%zu\t%s\t%s\n", i, t->s[i].key ? t->s[i].key : "",
			t->shards[t->s[i].shard]);
	if (fclose(m) != 0 || !text) {
		free(text);
		return gpud_fail(err, "tar: out of memory");
	}
	int rc = 0;
	FILE *old = fopen(path, "r");
	if (old) {
		char *was = malloc(len + 1);
		size_t got = was ? fread(was, 1, len + 1, old) : 0;
		bool same = was && got == len && memcmp(was, text, len) == 0;
		free(was);
		fclose(old);
		if (same)
			goto out;
	}
	if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
		tmp = NULL;
		rc = gpud_fail(err, "tar: out of memory");
		goto out;
	}
	FILE *f = fopen(tmp, "w");
	if (!f) {
		rc = gpud_fail(err, "tar: cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	size_t put = fwrite(text, 1, len, f);
	if (fclose(f) != 0 || put != len || rename(tmp, path) < 0) {
		rc = gpud_fail(err, "tar: cannot write %s: %s", path,
			       strerror(errno ? errno : EIO));
		unlink(tmp);
	}
out:
	free(tmp);
	free(text);
	return rc;
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	const char *path, *member;
	if (parse(args, &path, &member, err) < 0)
		return -1;
	struct tar *t = calloc(1, sizeof *t);
	if (!t || !(t->member = strdup(member))) {
		free(t);
		return gpud_fail(err, "tar: out of memory");
	}
	if (list_shards(path, &t->shards, &t->n_shards, err) < 0)
		goto fail;
	for (size_t k = 0; k < t->n_shards; k++)
		if (index_shard(t, (uint32_t)k, err) < 0)
			goto fail;
	const char *keys = gpud_arg(args, "keys_out", NULL);
	if (keys && write_keys(t, keys, err) < 0)
		goto fail;
	*state = t;
	return 0;
fail:
	free_tar(t);
	return -1;
}

/* Positions the reader at entry `want` of shard `k` (reopening it to go back). */
static int seek_entry(struct tar *t, uint32_t k, uint64_t want, struct gpud_error *err)
{
	if (t->a && (t->cur != k || t->entry > want)) {
		archive_read_free(t->a);
		t->a = NULL;
	}
	if (!t->a) {
		t->a = open_shard(t->shards[k], err);
		if (!t->a)
			return -1;
		t->cur = k;
		t->entry = 0;
		t->broken = false;
	}
	return 0;
}

/* Reads entries up to `s`'s member into item; the rest of the sample is left for the
 * next call to pass over. */
static int read_sample(struct tar *t, const struct sample *s, struct gpud_buf *item)
{
	struct archive_entry *e = NULL;
	while (t->entry <= (uint64_t)s->member) {
		int rc = archive_read_next_header(t->a, &e);
		if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
			snprintf(t->broken_msg, sizeof t->broken_msg, "%s",
				 rc == ARCHIVE_EOF            ? "it ends early"
				 : archive_error_string(t->a) ? archive_error_string(t->a)
							      : "read error");
			t->broken = true;
			return -1;
		}
		t->entry++;
	}
	int64_t size = archive_entry_size(e);
	if (size < 0 || size != s->member_size) {
		snprintf(t->broken_msg, sizeof t->broken_msg,
			 "member of sample '%s' is not as it was listed (changed since?)", s->key);
		t->broken = true;
		return -1;
	}
	item->size = (size_t)size;
	if (item->size > item->capacity)
		return 0; /* the host fails it as too large */
	size_t got = 0;
	while (got < item->size) {
		la_ssize_t r = archive_read_data(t->a, (char *)item->data + got, item->size - got);
		if (r < 0) {
			snprintf(t->broken_msg, sizeof t->broken_msg, "%s",
				 archive_error_string(t->a) ? archive_error_string(t->a)
							    : "read error");
			t->broken = true;
			return -1;
		}
		if (r == 0) {
			snprintf(t->broken_msg, sizeof t->broken_msg,
				 "member of sample '%s' ends early", s->key);
			t->broken = true;
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct tar *t = state;
	if (t->next == t->n)
		return 0;
	const struct sample *s = &t->s[t->next++];
	const char *shard = t->shards[s->shard];
	item->size = 0;
	if (s->damage) {
		gpud_fail(err, "%s", s->damage);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (s->member < 0) {
		gpud_fail(err, "tar: sample '%s' in shard %s has no '%s' member", s->key, shard,
			  t->member);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (t->a && t->cur == s->shard && t->broken) {
		gpud_fail(err, "tar: shard %s could not be read again up to sample '%s': %s", shard,
			  s->key, t->broken_msg);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (seek_entry(t, s->shard, (uint64_t)s->member, err) < 0) {
		/* A shard that was there for the first pass and is gone: each task of it
		 * fails, naming it. */
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (read_sample(t, s, item) < 0) {
		gpud_fail(err, "tar: shard %s, sample '%s': %s", shard, s->key, t->broken_msg);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	return 1;
}

/* Jumping is free: the next read positions itself (a shard's headers are read through
 * to its first sample wanted, a skipped shard is not opened). */
GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err)
{
	struct tar *t = state;
	(void)err;
	t->next = n > t->n - t->next ? t->n : t->next + n;
	return 0;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return (int64_t)((struct tar *)state)->n;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free_tar(state);
}
