/* SPDX-License-Identifier: MIT */
/* The inputs a job names, as they are now: see inputs.h. */
#define _GNU_SOURCE
#include "record/inputs.h"
#include "util/hash.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/config.h"

static uint64_t mtime_ns(const struct stat *st)
{
	return (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec;
}

static bool truthy(const char *v)
{
	return v &&
	       (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on"));
}

/* Adds the files of folder `rel` (relative to the open folder fd) to *count and *sum.
 * Each file's hash is added, so the order readdir gives does not matter. */
static int list_folder(int fd, const char *path, const char *rel, bool recursive, uint64_t *count,
		       uint64_t *sum, char *why, size_t len)
{
	DIR *d = fdopendir(fd);
	if (!d) {
		snprintf(why, len, "cannot read folder %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	int rc = 0;
	struct dirent *e;
	/* errno is cleared before each readdir: its NULL is an error only when set. */
	while (rc == 0 && (errno = 0, e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char name[4096];
		snprintf(name, sizeof name, "%s%s%s", rel, *rel ? "/" : "", e->d_name);
		struct stat lst, st;
		if (fstatat(dirfd(d), e->d_name, &lst, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* gone since it was listed */
		/* A link is followed, as the generator follows it (one stat more). */
		st = lst;
		if (S_ISLNK(lst.st_mode) && fstatat(dirfd(d), e->d_name, &st, 0) < 0)
			continue;
		if (S_ISDIR(lst.st_mode)) {
			if (!recursive)
				continue;
			int sub = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (sub < 0) {
				snprintf(why, len, "cannot read folder %s/%s: %s", path, name,
					 strerror(errno));
				rc = -1;
			} else {
				rc = list_folder(sub, path, name, recursive, count, sum, why, len);
			}
		} else if (S_ISREG(st.st_mode)) {
			uint64_t h = hash_str(HASH_SEED, name);
			h = hash_mix(h, (uint64_t)st.st_size);
			*sum += hash_mix(h, mtime_ns(&st));
			(*count)++;
		}
	}
	if (rc == 0 && errno) {
		snprintf(why, len, "cannot read folder %s: %s", path, strerror(errno));
		rc = -1;
	}
	closedir(d);
	return rc;
}

/* Adds `in` to *out (its key made from section and key). 0, or -1 (out of memory). */
static int push(struct journal_input **out, size_t *n, struct journal_input in, const char *section,
		const char *key, const char *v, char *why, size_t len)
{
	uint64_t t = hash_str(hash_str(hash_str(HASH_SEED, section), key), v);
	in.tag = ((uint32_t)(t ^ t >> 32) & ~1u) | (in.tag & 1);
	struct journal_input *more = realloc(*out, (*n + 1) * sizeof *more);
	if (!more || asprintf(&in.key, "%s.%s", section, key) < 0) {
		if (more)
			*out = more;
		free(in.own);
		snprintf(why, len, "out of memory");
		return -1;
	}
	*out = more;
	(*out)[(*n)++] = in;
	return 0;
}

/* A generator's value that is an absolute glob (the tar generator's shards): each
 * regular file it matches, as an input of its own. */
static int scan_glob(const char *section, const char *key, const char *v,
		     struct journal_input **out, size_t *n, char *why, size_t len)
{
	glob_t g;
	if (glob(v, GLOB_BRACE, NULL, &g) != 0)
		return 0; /* no match: the generator says so */
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
		struct stat st;
		if (stat(g.gl_pathv[i], &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		struct journal_input in = {.a = (uint64_t)st.st_size, .b = mtime_ns(&st)};
		if (!(in.own = strdup(g.gl_pathv[i]))) {
			snprintf(why, len, "out of memory");
			rc = -1;
			break;
		}
		in.path = in.own;
		rc = push(out, n, in, section, key, in.own, why, len);
	}
	globfree(&g);
	return rc;
}

static int scan_section(const char *section, const struct cfg_section *s, bool folders,
			struct journal_input **out, size_t *n, char *why, size_t len)
{
	bool recursive = false;
	for (size_t i = 0; i < s->count; i++)
		if (!strcmp(s->kv[i].key, "recursive"))
			recursive = truthy(s->kv[i].value);
	for (size_t i = 0; i < s->count; i++) {
		const char *v = s->kv[i].value;
		struct stat st;
		if (v[0] != '/' || !strcmp(s->kv[i].key, "plugin") ||
		    inputs_output_key(s->kv[i].key))
			continue;
		if (stat(v, &st) < 0) {
			if (folders && strpbrk(v, "*?[{") &&
			    scan_glob(section, s->kv[i].key, v, out, n, why, len) < 0)
				return -1;
			continue;
		}
		bool folder = S_ISDIR(st.st_mode);
		if (!(S_ISREG(st.st_mode) || (folder && folders)))
			continue;
		struct journal_input in = {.path = v};
		if (folder) {
			int fd = open(v, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0) {
				snprintf(why, len, "cannot read folder %s: %s", v, strerror(errno));
				return -1;
			}
			if (list_folder(fd, v, "", recursive, &in.a, &in.b, why, len) < 0)
				return -1;
		} else {
			in.a = (uint64_t)st.st_size;
			in.b = mtime_ns(&st);
		}
		in.tag = folder;
		if (push(out, n, in, section, s->kv[i].key, v, why, len) < 0)
			return -1;
	}
	return 0;
}

int inputs_scan(const struct cfg *c, struct journal_input **out, size_t *n, char *why, size_t len)
{
	*out = NULL;
	*n = 0;
	int rc = scan_section("worker", &c->worker, false, out, n, why, len);
	for (size_t i = 0; rc == 0 && i < c->n_stages; i++) { /* a stage's files, as the worker's */
		char section[80];
		snprintf(section, sizeof section, "stage.%s", c->stages[i].name);
		rc = scan_section(section, &c->stages[i].sec, false, out, n, why, len);
	}
	if (rc < 0 || scan_section("generator", &c->generator, true, out, n, why, len) < 0) {
		inputs_free(*out, *n);
		*out = NULL;
		*n = 0;
		return -1;
	}
	return 0;
}

void inputs_free(struct journal_input *in, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(in[i].key);
		free(in[i].own);
	}
	free(in);
}

const char *inputs_stdin_key(const struct cfg *c)
{
	for (size_t i = 0; i < c->generator.count; i++) {
		const char *v = c->generator.kv[i].value;
		struct stat st;
		if (!strcmp(v, "-") ||
		    (v[0] == '/' && stat(v, &st) == 0 &&
		     (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode) || S_ISSOCK(st.st_mode))))
			return c->generator.kv[i].key;
	}
	return NULL;
}

int inputs_compare(const struct journal_input *was, size_t n_was, const struct journal_input *now,
		   size_t n_now, char *why, size_t len)
{
	for (size_t i = 0; i < n_now; i++) {
		const struct journal_input *b = &now[i], *a = NULL;
		for (size_t k = 0; k < n_was && !a; k++)
			if (was[k].tag == b->tag)
				a = &was[k];
		if (!a || (a->a == b->a && a->b == b->b))
			continue;
		if (!(b->tag & 1))
			snprintf(why, len,
				 "the file %s named by %s changed since the journaled run "
				 "(%llu bytes then, %llu now%s)",
				 b->path, b->key, (unsigned long long)a->a,
				 (unsigned long long)b->a, a->a == b->a ? "; modified since" : "");
		else if (a->a != b->a)
			snprintf(why, len,
				 "the folder %s named by %s changed since the journaled "
				 "run: %llu files then, %llu now",
				 b->path, b->key, (unsigned long long)a->a,
				 (unsigned long long)b->a);
		else
			snprintf(why, len,
				 "the folder %s named by %s changed since the journaled "
				 "run: it holds %llu files as it did, but their names, sizes or "
				 "times differ",
				 b->path, b->key, (unsigned long long)b->a);
		return 1;
	}
	return 0;
}
