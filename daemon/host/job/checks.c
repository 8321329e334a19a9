/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "job/checks.h"
#include "util/textio.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job/keys.h"
#include "loader.h"
#include "util/say.h"
#include "view/metrics.h"

/* The folder part of `path` ("." when it has none), malloc'd. */
static char *parent_of(const char *path)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return strdup(".");
	if (slash == path)
		return strdup("/");
	return strndup(path, (size_t)(slash - path));
}

static int dir_writable(const char *dir, char *why, size_t len)
{
	struct stat st;
	if (stat(dir, &st) < 0) {
		snprintf(why, len, "no folder %s (%s)", dir, strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(why, len, "%s is not a folder", dir);
		return -1;
	}
	if (access(dir, W_OK | X_OK) < 0) {
		snprintf(why, len, "cannot write in %s: %s", dir, strerror(errno));
		return -1;
	}
	return 0;
}

int check_file_writable(const char *path, char *why, size_t len)
{
	struct stat st;
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			snprintf(why, len, "%s is a folder, not a file", path);
			return -1;
		}
		if (!S_ISREG(st.st_mode)) {
			snprintf(why, len, "%s is not a regular file", path);
			return -1;
		}
		if (access(path, W_OK) < 0) {
			snprintf(why, len, "cannot write %s: %s", path, strerror(errno));
			return -1;
		}
		return 0;
	}
	if (errno != ENOENT) {
		snprintf(why, len, "%s: %s", path, strerror(errno));
		return -1;
	}
	char *dir = parent_of(path);
	if (!dir) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	int rc = dir_writable(dir, why, len);
	free(dir);
	return rc;
}

int check_dir_usable(const char *dir, char *why, size_t len)
{
	struct stat st;
	if (stat(dir, &st) == 0)
		return dir_writable(dir, why, len);
	if (errno != ENOENT) {
		snprintf(why, len, "%s: %s", dir, strerror(errno));
		return -1;
	}
	char *parent = parent_of(dir);
	if (!parent) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	char sub[300];
	int rc = dir_writable(parent, sub, sizeof sub);
	if (rc < 0)
		snprintf(why, len, "cannot create %s: %s", dir, sub);
	free(parent);
	return rc;
}

/* The keys a host-side plugin declares (ABI 1.2), or NULL. */
static const char *const *declared(const struct plugin *pl)
{
	return pl->handle ? pl->keys : NULL;
}

const char **checks_worker_keys(char *text)
{
	char *k = strstr(text, "\nkeys");
	if (!k || (k[5] != '\n' && k[5] != '\0'))
		return NULL;
	size_t n = 0;
	for (char *p = k + 5; *p; p++)
		n += *p == '\n';
	const char **keys = calloc(n + 1, sizeof *keys);
	if (!keys)
		return NULL;
	size_t i = 0;
	char *save = NULL;
	for (char *line = strtok_r(k + 5, "\n", &save); line && i < n;
	     line = strtok_r(NULL, "\n", &save))
		keys[i++] = line;
	return keys;
}

int checks_keys(const struct plugin *gen_pl, const struct plugin *sink_pl, const struct cfg *c,
		const char *worker_out)
{
	char err[2048];
	char *copy = strdup(worker_out ? worker_out : "");
	const char **wk = copy ? checks_worker_keys(copy) : NULL;
	int rc = 0;
	if (keys_check(&c->worker, "worker", c->worker.plugin, wk, err, sizeof err) < 0 ||
	    keys_check(&c->generator, "generator", c->generator.plugin, declared(gen_pl), err,
		       sizeof err) < 0 ||
	    keys_check(&c->sink, "sink", c->sink.plugin, declared(sink_pl), err, sizeof err) < 0) {
		text_clean(err);
		say("%s", err);
		rc = -1;
	}
	free(wk);
	free(copy);
	return rc;
}

/* Where the key a plugin's message names ("KEY = 'value'": the form of the built-in
 * plugins' messages) was set ("file:line", "--set ..."), or NULL; of a key set twice,
 * the last (the one the plugin reads). */
static const char *key_named(const struct cfg_section *s, const char *message)
{
	const char *at = NULL;
	for (size_t i = 0; i < s->count; i++) {
		size_t kl = strlen(s->kv[i].key);
		for (const char *p = strstr(message, s->kv[i].key); p;
		     p = strstr(p + 1, s->kv[i].key))
			if ((p == message || p[-1] == ' ') && strncmp(p + kl, " = ", 3) == 0) {
				at = s->where ? s->where[i] : NULL;
				break;
			}
	}
	return at;
}

/* A plugin's own check, `fn` (its table's check: ABI 1.2, or NULL); says so on `out`,
 * naming `sym`, when it has none. */
static int plugin_check(int (*fn)(const struct gpud_args *, struct gpud_error *),
			const struct cfg_section *s, const char *kind, const char *sym, FILE *out)
{
	if (!fn) {
		fprintf(out,
			"  %s %s: not checked further (it has no %s); a run checks its "
			"arguments when it opens it\n",
			kind, s->plugin, sym);
		return 0;
	}
	struct gpud_error err;
	err.message[0] = '\0';
	if (fn(&s->args, &err) != 0) {
		text_clean(err.message);
		const char *at = key_named(s, err.message);
		say("%s%s%s %s: %s", at ? at : "", at ? ": " : "", kind, s->plugin,
		    err.message[0] ? err.message : "its check failed without a message");
		return -1;
	}
	return 0;
}

/* Stage key `key`'s value as a whole number and where it was set; 0 when absent or not
 * one (the plugin's own setup then says why). */
static long stage_key(const struct cfg_section *s, const char *key, const char **where)
{
	for (size_t i = 0; i < s->count; i++) {
		if (strcmp(s->kv[i].key, key) != 0)
			continue;
		char *end;
		long v = strtol(s->kv[i].value, &end, 10);
		*where = s->where[i];
		return *end || end == s->kv[i].value ? 0 : v;
	}
	return 0;
}

/* Whether a stage's plugin is the built-in jpeg stage (by name, or its file). */
static bool is_jpeg(const char *plugin)
{
	const char *base = strrchr(plugin, '/');
	base = base ? base + 1 : plugin;
	return !strcmp(base, "jpeg") || !strcmp(base, "worker-jpeg.so");
}

/* Stages whose output size their keys tell (the built-in jpeg stage: height x width x 3
 * bytes, the least any of its outputs takes) against [job] max_result_bytes, and the
 * next consumer's max_task_bytes: over either, every task would fail once the run
 * starts. A worker whose output size is not known cannot be checked here. */
static int check_stage_outputs(const struct cfg *c)
{
	for (size_t k = 0; k < c->n_stages; k++) {
		const struct cfg_section *s = &c->stages[k].sec;
		const char *hw = "", *ww = "";
		if (!s->plugin || !is_jpeg(s->plugin))
			continue;
		long h = stage_key(s, "height", &hw), w = stage_key(s, "width", &ww);
		if (h <= 0 || w <= 0)
			continue;
		unsigned long long need = (unsigned long long)h * (unsigned long long)w * 3;
		const char *key = need > c->max_result_bytes ? "max_result_bytes"
				  : need > c->max_task_bytes ? "max_task_bytes"
							     : NULL;
		if (!key)
			continue;
		unsigned long long have =
			need > c->max_result_bytes ? c->max_result_bytes : c->max_task_bytes;
		say("%s: [stage.%s] jpeg's pixels of height = %ld (%s) x width = %ld (%s) x 3 take "
		    "%llu bytes a task at the least, over [job] %s = %llu (%s): every task would "
		    "fail; raise %s to %lluK or more",
		    c->path, c->stages[k].name, h, hw, w, ww, need, key, have,
		    !strcmp(key, "max_result_bytes") ? "the stage's results"
						     : "the next stage's input",
		    key, (need + 1023) / 1024);
		return -1;
	}
	return 0;
}

int checks_dry(const struct gen_ops *gen, const struct sink_ops *sink, const struct cfg *c,
	       FILE *out)
{
	char why[600];
	if (check_stage_outputs(c) < 0)
		return -1;
	if (plugin_check(gen->check, &c->generator, "generator", "gpud_generator_check", out) < 0 ||
	    plugin_check(sink->check, &c->sink, "sink", "gpud_sink_check", out) < 0)
		return -1;
	if (c->log_dir && check_dir_usable(c->log_dir, why, sizeof why) < 0) {
		say("%s: [job] log_dir: %s", c->path, why);
		return -1;
	}
	if (c->journal && check_file_writable(c->journal, why, sizeof why) < 0) {
		say("%s: [job] journal: %s (journal = off runs without one)", c->path, why);
		return -1;
	}
	if (c->metrics_file && check_file_writable(c->metrics_file, why, sizeof why) < 0) {
		say("%s: [ui] metrics_file: %s", c->path, why);
		return -1;
	}
	if (c->metrics_host &&
	    metrics_can_listen(c->metrics_host, c->metrics_port, why, sizeof why) < 0) {
		say("%s: [ui] metrics_listen: %s", c->path, why);
		return -1;
	}
	return 0;
}
