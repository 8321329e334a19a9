/* SPDX-License-Identifier: MIT */
/* What the built-in plugins' check entry points share: looking at the files a run
 * would read or write, without opening them for writing or reading their data. */
#ifndef GPUD_PLUGINS_CHECK_H
#define GPUD_PLUGINS_CHECK_H

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpud/plugin.h>

/* A folder we may create files in. */
static inline int check_dir_writable(const char *who, const char *dir, struct gpud_error *err)
{
	struct stat st;
	if (stat(dir, &st) < 0)
		return gpud_fail(err, "%s: no folder %s (%s)", who, dir, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return gpud_fail(err, "%s: %s is not a folder", who, dir);
	if (access(dir, W_OK | X_OK) < 0)
		return gpud_fail(err, "%s: cannot write in %s: %s", who, dir, strerror(errno));
	return 0;
}

/* The folder of `path` ("." without one), in buf. */
static inline const char *check_parent(const char *path, char *buf, size_t len)
{
	const char *slash = strrchr(path, '/');
	if (!slash)
		return ".";
	size_t n = slash == path ? 1 : (size_t)(slash - path);
	if (n >= len)
		n = len - 1;
	memcpy(buf, path, n);
	buf[n] = '\0';
	return buf;
}

/* A file a run would create or replace: writable if it exists, else its folder. */
static inline int check_file_writable(const char *who, const char *path, struct gpud_error *err)
{
	struct stat st;
	char buf[4096];
	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return gpud_fail(err, "%s: %s is a folder, not a file", who, path);
		if (access(path, W_OK) < 0)
			return gpud_fail(err, "%s: cannot write %s: %s", who, path,
					 strerror(errno));
		return 0;
	}
	if (errno != ENOENT)
		return gpud_fail(err, "%s: %s: %s", who, path, strerror(errno));
	return check_dir_writable(who, check_parent(path, buf, sizeof buf), err);
}

/* A file a run would read. */
static inline int check_file_readable(const char *who, const char *path, struct gpud_error *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return gpud_fail(err, "%s: cannot open %s: %s", who, path, strerror(errno));
	if (S_ISDIR(st.st_mode))
		return gpud_fail(err, "%s: %s is a folder, not a file", who, path);
	if (access(path, R_OK) < 0)
		return gpud_fail(err, "%s: cannot read %s: %s", who, path, strerror(errno));
	return 0;
}

#endif
