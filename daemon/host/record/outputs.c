/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "record/outputs.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "record/files.h"

/* One file the run writes or reads, and what named it. */
struct named {
	const char *what; /* "[job] journal" */
	const char *at;   /* "job.ini:4", "--set ...", or NULL */
	const char *path; /* as resolved by cfg_load / ranks_apply */
	bool writes;
	/* Its identity: dev/ino when it exists, the canonical name always (NULL: skip,
	 * not a regular file, like /dev/null or a folder). */
	bool exists;
	dev_t dev;
	ino_t ino;
	char *canon;
};

/* The real path of `path`'s folder, then its name: what the file will be once made. */
static char *canon_new(const char *path)
{
	const char *slash = strrchr(path, '/');
	char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
	/* A folder not made yet either: its own folder's real path, and so on up. */
	char *real = dir ? realpath(dir, NULL) : NULL, *out = NULL;
	if (!real && dir && strchr(dir, '/') && strcmp(dir, "/"))
		real = canon_new(dir);
	if (!real ||
	    asprintf(&out, "%s/%s", strcmp(real, "/") ? real : "", slash ? slash + 1 : path) < 0)
		out = strdup(path);
	free(dir);
	free(real);
	return out;
}

static void identify(struct named *n)
{
	struct stat st;
	n->canon = NULL;
	if (stat(n->path, &st) == 0) {
		if (!S_ISREG(st.st_mode))
			return; /* /dev/null, a folder: not a file one output destroys */
		n->exists = true;
		n->dev = st.st_dev;
		n->ino = st.st_ino;
		n->canon = realpath(n->path, NULL);
		if (!n->canon)
			n->canon = strdup(n->path);
		return;
	}
	/* A symlink to a file not made yet names its target. */
	char target[PATH_MAX];
	ssize_t l = errno == ENOENT ? readlink(n->path, target, sizeof target - 1) : -1;
	if (l > 0) {
		target[l] = '\0';
		const char *slash = strrchr(n->path, '/');
		char *full = NULL;
		if (target[0] == '/' || !slash)
			full = strdup(target);
		else if (asprintf(&full, "%.*s/%s", (int)(slash - n->path), n->path, target) < 0)
			full = NULL;
		n->canon = full ? canon_new(full) : NULL;
		free(full);
		if (n->canon)
			return;
	}
	n->canon = canon_new(n->path);
}

static bool same(const struct named *a, const struct named *b)
{
	if (!a->canon || !b->canon)
		return false;
	if (a->exists && b->exists)
		return a->dev == b->dev && a->ino == b->ino;
	return strcmp(a->canon, b->canon) == 0;
}

/* "job.ini:4: [job] journal", or the key alone when it was not written anywhere. */
static void name_of(const struct named *n, char *buf, size_t len)
{
	if (n->at)
		snprintf(buf, len, "%s: %s", n->at, n->what);
	else
		snprintf(buf, len, "%s", n->what);
}

bool outputs_file_key(const char *k, const char *v)
{
	size_t n = strlen(k);
	if (!strcmp(v, "-") || !*v)
		return false;
	if (n > 5 && !strcmp(k + n - 5, "_path") && strchr(v, ':'))
		return false; /* python_path = ./a:./b: folders */
	return !strcmp(k, "path") || !strcmp(k, "file") || (n > 5 && !strcmp(k + n - 5, "_path")) ||
	       (n > 5 && !strcmp(k + n - 5, "_file"));
}

/* A dashboard log of log_dir: worker-<n>.log there. */
static bool worker_log(const char *canon, const char *dir)
{
	size_t dl = strlen(dir);
	unsigned k;
	int end = -1;
	if (!dir[0] || strncmp(canon, dir, dl) != 0 || canon[dl] != '/')
		return false;
	sscanf(canon + dl + 1, "worker-%u.log%n", &k, &end);
	return end > 0 && canon[dl + 1 + (size_t)end] == '\0';
}

/* Whether folder `dir` is `top`, or (with `below`) a folder somewhere under it. */
static bool in_folder(const char *dir, const char *top, bool below)
{
	size_t tl = strlen(top);
	if (strcmp(dir, top) == 0)
		return true;
	return below && strncmp(dir, top, tl) == 0 && (top[tl - 1] == '/' || dir[tl] == '/');
}

static bool truthy(const char *v)
{
	return !strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "on");
}

/* A file the run writes in a folder a generator key names (inputs.h: its files as
 * listed, the folders below too with recursive = true) changes the input set as the
 * run goes, so every --resume would refuse the journal ("the folder ... changed"). The
 * written files `f` (n), and the folders the run writes files in (log_dir, a sink's dir
 * or *_dir key). 0, or -1 with why. */
static int outside_inputs(const struct cfg *c, const struct named *f, size_t n, char *why,
			  size_t len)
{
	const struct cfg_section *g = &c->generator, *k = &c->sink;
	bool below = false;
	for (size_t i = 0; i < g->count; i++)
		if (!strcmp(g->kv[i].key, "recursive"))
			below = truthy(g->kv[i].value);
	int rc = 0;
	for (size_t i = 0; i < g->count && !rc; i++) {
		struct stat st;
		const char *v = g->kv[i].value;
		/* (A key that names one file and holds a folder is the plugin's to refuse.) */
		if (!strcmp(g->kv[i].key, "plugin") || outputs_file_key(g->kv[i].key, v) || !*v ||
		    stat(v, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		char *top = realpath(v, NULL);
		if (!top)
			continue;
		struct named in = {.what = "", .at = g->where[i], .path = v};
		char what[300], a[700], b[700];
		snprintf(what, sizeof what, "[generator] %s", g->kv[i].key);
		in.what = what;
		name_of(&in, b, sizeof b);
		/* The files: by the folder they are (or will be) in. */
		for (size_t j = 0; j < n && !rc; j++) {
			if (!f[j].writes || !f[j].canon)
				continue;
			const char *slash = strrchr(f[j].canon, '/');
			char *dir =
				slash ? strndup(f[j].canon, slash == f[j].canon
								    ? 1
								    : (size_t)(slash - f[j].canon))
				      : NULL;
			if (dir && in_folder(dir, top, below)) {
				name_of(&f[j], a, sizeof a);
				bool named =
					!f[j].at && strstr(a, f[j].path); /* --stats-json PATH */
				snprintf(why, len,
					 "%s%s%s lies in the folder %s that %s names: the "
					 "run would change the generator's input as it writes "
					 "(and every --resume would refuse it); put it elsewhere",
					 a, named ? "" : " = ", named ? "" : f[j].path, top, b);
				rc = -1;
			}
			free(dir);
		}
		/* The folders it writes files in. */
		for (size_t j = 0; j <= k->count && !rc; j++) {
			const char *key = j < k->count ? k->kv[j].key : NULL, *dv;
			struct named w;
			char wwhat[300];
			if (key) {
				size_t kl = strlen(key);
				if (strcmp(key, "dir") &&
				    !(kl > 4 && !strcmp(key + kl - 4, "_dir")))
					continue;
				snprintf(wwhat, sizeof wwhat, "[sink] %s", key);
				w = (struct named){
					.what = wwhat, .at = k->where[j], .path = k->kv[j].value};
			} else if (c->log_dir) {
				w = (struct named){.what = "[job] log_dir",
						   .at = c->log_dir_at,
						   .path = c->log_dir};
			} else {
				continue;
			}
			dv = w.path;
			if (!*dv)
				continue;
			char *dir = stat(dv, &st) == 0 ? realpath(dv, NULL) : canon_new(dv);
			if (dir && in_folder(dir, top, below)) {
				name_of(&w, a, sizeof a);
				snprintf(why, len,
					 "%s = %s is (or lies in) the folder %s that %s "
					 "names: the run would change the generator's input as it "
					 "writes files there (and every --resume would refuse it); "
					 "put them elsewhere",
					 a, w.path, top, b);
				rc = -1;
			}
			free(dir);
		}
		free(top);
	}
	return rc;
}

static void add(struct named *f, size_t *n, const char *what, const char *at, const char *path,
		bool writes)
{
	f[*n] = (struct named){.what = what, .at = at, .path = path, .writes = writes};
	(*n)++;
}

int outputs_distinct(const struct cfg *c, const char *stats_json, char *why, size_t len)
{
	size_t cap = 8 + c->sink.count + c->generator.count + c->worker.count, n = 0;
	for (size_t i = 0; i < c->n_stages; i++)
		cap += c->stages[i].sec.count;
	struct named *f = calloc(cap, sizeof *f);
	char *failures = NULL, *log_dir = NULL, stats_label[300];
	snprintf(stats_label, sizeof stats_label, "--stats-json %s", stats_json ? stats_json : "");
	int rc = 0;
	if (!f) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	add(f, &n, "the job file", NULL, c->path, false);
	if (c->journal)
		add(f, &n,
		    c->journal_at ? "[job] journal"
				  : "[job] journal (the default, beside the job file)",
		    c->journal_at, c->journal, true);
	if (c->metrics_file)
		add(f, &n, "[ui] metrics_file", c->metrics_file_at, c->metrics_file, true);
	if (stats_json && strcmp(stats_json, "-"))
		add(f, &n, stats_label, NULL, stats_json, true);
	if (c->log_dir && asprintf(&failures, "%s/%s", c->log_dir, FILES_FAILURES) >= 0)
		add(f, &n, "[job] log_dir's " FILES_FAILURES, c->log_dir_at, failures, true);
	const struct cfg_section *secs[] = {&c->sink, &c->generator, &c->worker};
	static const char *const names[] = {"[sink] ", "[generator] ", "[worker] "};
	char(*what)[80] = calloc(cap, sizeof *what);
	for (size_t s = 0; what && s < 3; s++) {
		for (size_t i = 0; i < secs[s]->count; i++) {
			if (!outputs_file_key(secs[s]->kv[i].key, secs[s]->kv[i].value))
				continue;
			snprintf(what[n], sizeof what[n], "%s%s", names[s], secs[s]->kv[i].key);
			add(f, &n, what[n], secs[s]->where[i], secs[s]->kv[i].value, s == 0);
		}
	}
	for (size_t s = 0; what && s < c->n_stages;
	     s++) { /* a stage's files: read, as the worker's */
		const struct cfg_section *sec = &c->stages[s].sec;
		for (size_t i = 0; i < sec->count; i++) {
			if (!outputs_file_key(sec->kv[i].key, sec->kv[i].value))
				continue;
			snprintf(what[n], sizeof what[n], "[stage.%.40s] %.30s", c->stages[s].name,
				 sec->kv[i].key);
			add(f, &n, what[n], sec->where[i], sec->kv[i].value, false);
		}
	}
	for (size_t i = 0; i < n; i++)
		identify(&f[i]);
	if (c->log_dir) {
		struct stat st;
		log_dir = stat(c->log_dir, &st) == 0 ? realpath(c->log_dir, NULL)
						     : canon_new(c->log_dir);
	}
	char a[700], b[700];
	for (size_t i = 0; i < n && !rc; i++) {
		for (size_t j = 0; j < i && !rc; j++) {
			if (!(f[i].writes || f[j].writes) || !same(&f[i], &f[j]))
				continue;
			name_of(&f[j], a, sizeof a);
			name_of(&f[i], b, sizeof b);
			snprintf(why, len,
				 "%s and %s are the same file (%s): the run would %s; give "
				 "each its own",
				 a, b, f[i].canon,
				 f[i].writes && f[j].writes ? "write one over the other"
							    : "write over what it reads");
			rc = -1;
		}
		if (!rc && f[i].writes && log_dir && f[i].canon &&
		    worker_log(f[i].canon, log_dir)) {
			name_of(&f[i], a, sizeof a);
			snprintf(why, len,
				 "%s = %s is a worker log of %s%s[job] log_dir (the dashboard "
				 "writes worker-<n>.log there); give it another name",
				 a, f[i].path, c->log_dir_at ? c->log_dir_at : "",
				 c->log_dir_at ? ": " : "");
			rc = -1;
		}
	}
	if (!rc && what)
		rc = outside_inputs(c, f, n, why, len);
	if (!what) {
		snprintf(why, len, "out of memory");
		rc = -1;
	}
	for (size_t i = 0; i < n; i++)
		free(f[i].canon);
	free(f);
	free(what);
	free(failures);
	free(log_dir);
	return rc;
}

bool outputs_sink_fills(const struct cfg *c, char *what, size_t len)
{
	const struct cfg_section *k = &c->sink;
	for (size_t i = 0; i < k->count; i++)
		if (!strcmp(k->kv[i].key, "append") && truthy(k->kv[i].value))
			return false; /* added to, not emptied */
	for (size_t i = 0; i < k->count; i++) {
		struct stat st;
		const char *v = k->kv[i].value;
		if (outputs_file_key(k->kv[i].key, v) && stat(v, &st) == 0 && S_ISREG(st.st_mode) &&
		    st.st_size > 0) {
			snprintf(what, len, "[sink] %s = %s", k->kv[i].key, v);
			return true;
		}
	}
	return false;
}
