/* SPDX-License-Identifier: MIT */
/* `gpud merge-arrays OUT SHARD...`: the ranks' array shards (sinks npy and hdf5) joined
 * by task id. The work is the sink plugin's own (plugins/arrays/merge.c, exported as
 * gpud_array_merge), so gpud links nothing an array format needs: the format is the
 * first shard's (its magic bytes), the plugin found as the job would find it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <gpud/gpud.h>

#include "loader.h"
#include "util/log.h"

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

int gpud_merge_arrays(int argc, char *const *argv)
{
	const char *first = NULL;
	int positional = 0;
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n"
			       "joins the ranks' shards of an npy or hdf5 sink (with their .done "
			       "records) into OUT by task id;\nrefuses a task id done in two "
			       "shards or in none. exit status: 0 every row ok, 1 some rows\n"
			       "failed (zero, marked in OUT.done), 2 refused (nothing written)\n");
			return 0;
		}
		if (!strcmp(argv[i], "--dataset")) {
			i++;
			continue;
		}
		if (argv[i][0] != '-' && positional++ == 1)
			first = argv[i];
	}
	if (!first) {
		fprintf(LOG_ERR, "usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n");
		return 2;
	}
	const char *fmt = format_of(first);
	if (!fmt) {
		fprintf(LOG_ERR,
			"gpud merge-arrays: %s is neither a .npy nor an HDF5 file (or cannot be "
			"read)\n",
			first);
		return 2;
	}
	const char *out = NULL;
	for (int i = 0, k = 0; i < argc && !out; i++) {
		if (!strcmp(argv[i], "--dataset"))
			i++;
		else if (argv[i][0] != '-' && k++ == 0)
			out = argv[i];
	}
	size_t ol = out ? strlen(out) : 0;
	bool says_npy = ol > 4 && !strcmp(out + ol - 4, ".npy");
	bool says_h5 = (ol > 3 && !strcmp(out + ol - 3, ".h5")) ||
		       (ol > 5 && !strcmp(out + ol - 5, ".hdf5"));
	if ((says_npy && strcmp(fmt, "npy") != 0) || (says_h5 && strcmp(fmt, "hdf5") != 0)) {
		fprintf(LOG_ERR,
			"gpud merge-arrays: the shards are %s files (%s is one), the output %s "
			"is named for another format\n",
			fmt == NULL           ? "?"
			: !strcmp(fmt, "npy") ? ".npy"
					      : "HDF5",
			first, out);
		return 2;
	}
	char err[1024];
	char *path = loader_find(fmt, LOADER_SINK, err, sizeof err);
	if (!path) {
		fprintf(LOG_ERR, "gpud merge-arrays: %s\n", err);
		return 2;
	}
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	int (*merge)(int, char **) = h ? (int (*)(int, char **))dlsym(h, "gpud_array_merge") : NULL;
	if (!merge) {
		fprintf(LOG_ERR, "gpud merge-arrays: %s: %s\n", path,
			h ? "no gpud_array_merge in it" : dlerror());
		if (h)
			dlclose(h);
		free(path);
		return 2;
	}
	int rc = merge(argc, (char **)argv);
	dlclose(h);
	free(path);
	return rc;
}
