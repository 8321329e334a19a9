/* SPDX-License-Identifier: MIT */
/* What the built-in plugins' check entry points share: looking at the files a run
 * would read or write, without opening them for writing or reading their data. */
#ifndef GPUD_PLUGINS_CHECK_H
#define GPUD_PLUGINS_CHECK_H

#include <errno.h>
#include <fcntl.h>
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

/* What a file that is not a regular file is ("a FIFO (named pipe)"), or NULL for a
 * regular file. The readers take regular files only: opening a FIFO waits for a writer
 * (with signals blocked, for ever), a device may never end (/dev/zero). */
static inline const char *check_not_regular(mode_t mode)
{
	if (S_ISREG(mode))
		return NULL;
	if (S_ISDIR(mode))
		return "a folder";
	if (S_ISFIFO(mode))
		return "a FIFO (named pipe)";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISSOCK(mode))
		return "a socket";
	return "not a file";
}

/* A file a run would read: a regular file we may read. */
static inline int check_file_readable(const char *who, const char *path, struct gpud_error *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return gpud_fail(err, "%s: cannot open %s: %s", who, path, strerror(errno));
	const char *what = check_not_regular(st.st_mode);
	if (what)
		return gpud_fail(err, "%s: %s is %s, not a regular file", who, path, what);
	if (access(path, R_OK) < 0)
		return gpud_fail(err, "%s: cannot read %s: %s", who, path, strerror(errno));
	return 0;
}

/* Opens a file a run reads, refusing what is not a regular file without waiting on it:
 * it is looked at first, then opened non-blocking (a FIFO put there meanwhile opens at
 * once and is refused), then made blocking again. The descriptor (close-on-exec), or -1
 * with err; *st is the file's status as opened. */
static inline int check_open_regular(const char *who, const char *path, struct stat *st,
				     struct gpud_error *err)
{
	if (check_file_readable(who, path, err) < 0)
		return -1;
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0)
		return gpud_fail(err, "%s: cannot open %s: %s", who, path, strerror(errno));
	const char *what = NULL;
	int flags;
	if (fstat(fd, st) < 0 || (what = check_not_regular(st->st_mode)) ||
	    (flags = fcntl(fd, F_GETFL)) < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
		int e = errno;
		close(fd);
		if (what)
			return gpud_fail(err, "%s: %s is %s, not a regular file", who, path, what);
		return gpud_fail(err, "%s: cannot open %s: %s", who, path, strerror(e));
	}
	return fd;
}

#endif
