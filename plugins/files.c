/* SPDX-License-Identifier: MIT */
/*
 * Generator `files`: the paths of the regular files under `dir` whose names match
 * `pattern` (a glob, default *), sorted bytewise for a reproducible task order; with
 * `recursive = true`, in every folder below too (symbolic links to folders are not
 * followed, so a link cannot make it loop). Each task's input is the file's path.
 * A folder that cannot be read is an error naming it, not a silent gap.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("generator", "files", "1.0");
GPUD_PLUGIN_DESCRIPTION("the paths of the files under dir matching pattern, sorted");
GPUD_PLUGIN_KEYS("dir", "pattern", "recursive");

struct files {
	char **paths;
	size_t n, cap, next;
};

static int add(struct files *f, char *path)
{
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 256;
		char **p = realloc(f->paths, cap * sizeof *p);
		if (!p)
			return -1;
		f->paths = p;
		f->cap = cap;
	}
	f->paths[f->n++] = path;
	return 0;
}

static int scan(struct files *f, const char *dir, const char *pattern, bool recursive,
		struct gpud_error *err)
{
	DIR *d = opendir(dir);
	if (!d)
		return gpud_fail(err, "files: cannot read folder %s: %s", dir, strerror(errno));
	struct dirent *e;
	int rc = 0;
	errno = 0;
	while (rc == 0 && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		char *path;
		if (asprintf(&path, "%s/%s", dir, e->d_name) < 0) {
			rc = gpud_fail(err, "files: out of memory");
			break;
		}
		struct stat lst, st;
		if (lstat(path, &lst) < 0) {
			rc = gpud_fail(err, "files: cannot stat %s: %s", path, strerror(errno));
			free(path);
			break;
		}
		if (S_ISDIR(lst.st_mode)) {
			if (recursive)
				rc = scan(f, path, pattern, recursive, err);
			free(path);
		} else if (stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
			   fnmatch(pattern, e->d_name, 0) == 0) {
			if (add(f, path) < 0) {
				free(path);
				rc = gpud_fail(err, "files: out of memory");
			}
		} else {
			free(path);
		}
		errno = 0;
	}
	if (rc == 0 && errno)
		rc = gpud_fail(err, "files: reading folder %s: %s", dir, strerror(errno));
	closedir(d);
	return rc;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void free_files(struct files *f)
{
	for (size_t i = 0; i < f->n; i++)
		free(f->paths[i]);
	free(f->paths);
	free(f);
}

static int parse(const struct gpud_args *args, const char **dir, bool *recursive,
		 struct gpud_error *err)
{
	const char *rec = gpud_arg(args, "recursive", "false");
	*dir = gpud_arg(args, "dir", NULL);
	if (!*dir)
		return gpud_fail(err, "files: 'dir' is required (the folder to list)");
	if (!strcmp(rec, "true") || !strcmp(rec, "yes") || !strcmp(rec, "1") || !strcmp(rec, "on"))
		*recursive = true;
	else if (!strcmp(rec, "false") || !strcmp(rec, "no") || !strcmp(rec, "0") ||
		 !strcmp(rec, "off"))
		*recursive = false;
	else
		return gpud_fail(err, "files: recursive = '%s': expected true or false", rec);
	return 0;
}

/* The folder is opened and closed, not listed: that is the run's work. */
GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *dir;
	bool recursive;
	if (parse(args, &dir, &recursive, err) < 0)
		return -1;
	DIR *d = opendir(dir);
	if (!d)
		return gpud_fail(err, "files: cannot read folder %s: %s", dir, strerror(errno));
	closedir(d);
	return 0;
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	const char *dir;
	const char *pattern = gpud_arg(args, "pattern", "*");
	bool recursive;
	if (parse(args, &dir, &recursive, err) < 0)
		return -1;
	struct files *f = calloc(1, sizeof *f);
	if (!f)
		return gpud_fail(err, "files: out of memory");
	size_t dl = strlen(dir);
	char *root = strndup(dir, dl > 1 && dir[dl - 1] == '/' ? dl - 1 : dl);
	int rc = root ? scan(f, root, pattern, recursive, err)
		      : gpud_fail(err, "files: out of memory");
	free(root);
	if (rc < 0) {
		free_files(f);
		return -1;
	}
	qsort(f->paths, f->n, sizeof *f->paths, by_name);
	*state = f;
	return 0;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct files *f = state;
	(void)err;
	if (f->next == f->n)
		return 0;
	const char *p = f->paths[f->next++];
	item->size = strlen(p);
	if (item->size <= item->capacity)
		memcpy(item->data, p, item->size);
	return 1;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return (int64_t)((struct files *)state)->n;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free_files(state);
}
