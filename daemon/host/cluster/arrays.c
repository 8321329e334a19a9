/* SPDX-License-Identifier: MIT */
/* `gpud merge-arrays OUT SHARD...`: the ranks' array shards (sinks npy and hdf5) joined
 * by task id. The work is the sink plugin's own (plugins/arrays/merge.c, exported as
 * gpud_array_merge_call), so gpud links nothing an array format needs: the format is the
 * first shard's (its magic bytes), the plugin found as the job would find it. */
#define _GNU_SOURCE
#include "cluster/arrays.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpud/gpud.h>

#include "loader.h"
#include "util/log.h"
#include "array_merge.h"

/* "npy", "hdf5", or NULL: what the file's first bytes say. */
static const char *format_of(const char *path)
{
	unsigned char m[8] = {0};
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	ssize_t n = read(fd, m, sizeof m);
	close(fd);
	if (n >= 6 && memcmp(m, "\x93NUMPY", 6) == 0)
		return "npy";
	if (n == 8 && memcmp(m, "\x89HDF\r\n\x1a\n", 8) == 0)
		return "hdf5";
	return NULL;
}

/* A message of the plugin's merge: to the log's stream of its level (standard error,
 * as the command writes it, or the caller's callback). */
static void merge_say(void *ctx, int level, const char *line)
{
	(void)ctx;
	fprintf(log_stream(level), "%s\n", line);
}

/* A refusal: logged, and kept in res->error. */
__attribute__((format(printf, 2, 3))) static int refuse(struct arrays_result *res, const char *fmt,
							...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(res->error, sizeof res->error, fmt, ap);
	va_end(ap);
	fprintf(LOG_ERR, "%s\n", res->error);
	return 2;
}

int arrays_merge(const char *out, const char *const *shards, size_t n_shards, const char *dataset,
		 struct arrays_result *res)
{
	res->error[0] = '\0';
	res->format = "";
	res->rows = res->failed = 0;
	if (!out || !*out || !shards || n_shards == 0)
		return refuse(res, "usage: gpud merge-arrays [--dataset NAME] OUT SHARD...");
	const char *first = shards[0];
	const char *fmt = format_of(first);
	if (!fmt)
		return refuse(res,
			      "gpud merge-arrays: %s is neither a .npy nor an HDF5 file (or "
			      "cannot be read)",
			      first);
	res->format = fmt;
	size_t ol = strlen(out);
	bool says_npy = ol > 4 && !strcmp(out + ol - 4, ".npy");
	bool says_h5 = (ol > 3 && !strcmp(out + ol - 3, ".h5")) ||
		       (ol > 5 && !strcmp(out + ol - 5, ".hdf5"));
	if ((says_npy && strcmp(fmt, "npy") != 0) || (says_h5 && strcmp(fmt, "hdf5") != 0))
		return refuse(res,
			      "gpud merge-arrays: the shards are %s files (%s is one), the "
			      "output %s is named for another format",
			      !strcmp(fmt, "npy") ? ".npy" : "HDF5", first, out);
	char err[1024];
	char *path = loader_find(fmt, LOADER_SINK, err, sizeof err);
	if (!path)
		return refuse(res, "gpud merge-arrays: %s", err);
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	int (*merge)(struct gpud_array_merge_call *) =
		h ? (int (*)(struct gpud_array_merge_call *))dlsym(h, "gpud_array_merge_call")
		  : NULL;
	if (!merge) {
		refuse(res, "gpud merge-arrays: %s: %s", path,
		       h ? "no gpud_array_merge_call in it (a plugin of an older gpud?)"
			 : dlerror());
		if (h)
			dlclose(h);
		free(path);
		return 2;
	}
	struct gpud_array_merge_call call = {
		.size = sizeof call,
		.out = out,
		.shards = shards,
		.n_shards = n_shards,
		.dataset = dataset,
		.say = merge_say,
	};
	int rc = merge(&call);
	dlclose(h);
	free(path);
	if (rc == 0 || rc == 1) {
		res->rows = call.rows;
		res->failed = call.failed;
	} else {
		snprintf(res->error, sizeof res->error, "%s",
			 call.error[0] ? call.error : "gpud merge-arrays: refused");
		rc = 2;
	}
	return rc;
}

static void usage_help(void)
{
	printf("usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n"
	       "joins the ranks' shards of an npy or hdf5 sink (with their .done "
	       "records) into OUT by task id;\nrefuses a task id done in two "
	       "shards or in none. exit status: 0 every row ok, 1 some rows\n"
	       "failed (zero, marked in OUT.done), 2 refused (nothing written)\n");
}

int arrays_parse(int argc, char *const *argv, struct arrays_args *a)
{
	*a = (struct arrays_args){.shards = calloc((size_t)argc + 1, sizeof(char *))};
	if (!a->shards) {
		fprintf(stderr, "gpud merge-arrays: out of memory\n");
		return 2;
	}
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage_help();
			return 0;
		}
	}
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--dataset") && i + 1 < argc) {
			a->dataset = argv[++i];
		} else if (!strncmp(argv[i], "--dataset=", 10)) {
			a->dataset = argv[i] + 10;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr,
				"gpud merge-arrays: unknown option %s\n"
				"usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n",
				argv[i]);
			return 2;
		} else if (!a->out) {
			a->out = argv[i];
		} else {
			a->shards[a->n_shards++] = argv[i];
		}
	}
	if (!a->out || !a->n_shards) {
		fprintf(stderr, "usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n");
		return 2;
	}
	return -1;
}
