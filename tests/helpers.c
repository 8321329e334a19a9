/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "helpers.h"

#include <arpa/inet.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <criterion/criterion.h>

const char *t_env(const char *name)
{
	const char *v = getenv(name);
	cr_assert(v, "the test runner did not set %s", name);
	return v;
}

/* The folders this test process made. */
static char tmp_dirs[32][64];
static unsigned n_tmp_dirs;

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

/* Each test runs in its own process: its folders go when it exits, unless
 * GPUD_TEST_KEEP is set (to look at what a failing test left). */
static void remove_tmpdirs(void)
{
	for (unsigned i = 0; i < n_tmp_dirs && !getenv("GPUD_TEST_KEEP"); i++)
		nftw(tmp_dirs[i], remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

const char *t_tmpdir(void)
{
	cr_assert(n_tmp_dirs < sizeof tmp_dirs / sizeof tmp_dirs[0], "too many t_tmpdir()s");
	if (n_tmp_dirs == 0)
		atexit(remove_tmpdirs);
	char *dir = tmp_dirs[n_tmp_dirs];
	snprintf(dir, sizeof tmp_dirs[0], "/tmp/gpud-test-XXXXXX");
	cr_assert(mkdtemp(dir), "mkdtemp");
	n_tmp_dirs++;
	return dir;
}

char *t_write(const char *dir, const char *name, const char *text)
{
	char *path;
	cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
	FILE *f = fopen(path, "w");
	cr_assert(f, "cannot write %s", path);
	fputs(text, f);
	fclose(f);
	return path;
}

char *t_jobf(const char *dir, const char *fmt, ...)
{
	char *text;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&text, fmt, ap) > 0);
	va_end(ap);
	char *path = t_write(dir, "job.ini", text);
	free(text);
	return path;
}

char *t_read(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
		fwrite(chunk, 1, n, m);
	fclose(f);
	fclose(m);
	return buf;
}

char *t_read_in(const char *dir, const char *name)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	return t_read(path);
}

int t_gpud(const char *dir, const char *fmt, ...)
{
	char *args, *cmd;
	va_list ap;
	va_start(ap, fmt);
	cr_assert(vasprintf(&args, fmt, ap) > 0);
	va_end(ap);
	/* Bounded: a test that times out must not leave a run behind. */
	cr_assert(asprintf(&cmd,
			   "GPUD_PLUGIN_PATH='%s' timeout -k 5 240 '%s' %s >'%s/out' 2>'%s/err'",
			   t_env("FIXTURES"), t_env("GPUD"), args, dir, dir) > 0);
	int st = system(cmd);
	free(args);
	free(cmd);
	cr_assert(WIFEXITED(st), "gpud did not exit normally");
	return WEXITSTATUS(st);
}

int t_sh(const char *dir, const char *script)
{
	char *cmd;
	char *text;
	cr_assert(asprintf(&text, "%s\n%s", WAIT_FOR, script) > 0);
	free(t_write(dir, "script.sh", text));
	free(text);
	cr_assert(
		asprintf(&cmd,
			 "cd '%s' && GPUD='%s' GPUD_PLUGIN_PATH='%s' timeout -k 5 120 sh script.sh",
			 dir, t_env("GPUD"), t_env("FIXTURES")) > 0);
	int st = system(cmd);
	free(cmd);
	cr_assert(WIFEXITED(st), "the script did not exit normally");
	return WEXITSTATUS(st);
}

long t_read_long(const char *dir, const char *name)
{
	char *s = t_read_in(dir, name);
	cr_assert(s, "no file %s in %s", name, dir);
	long v = atol(s);
	free(s);
	return v;
}

size_t t_count_lines(const char *text, const char *prefix)
{
	size_t n = 0, pl = strlen(prefix);
	for (const char *p = text; p && *p;) {
		if (strncmp(p, prefix, pl) == 0)
			n++;
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return n;
}

/* A free loopback port (bound, then let go). */
unsigned t_free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof a;
	cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
		  getsockname(fd, (struct sockaddr *)&a, &len) == 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* GET `path` from 127.0.0.1:port; the whole answer (malloc'd), or NULL when nothing
 * listens. */
char *t_http_get(unsigned port, const char *path)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)port),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	char req[256];
	int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n", path);
	cr_assert_eq(write(fd, req, (size_t)n), n);
	size_t cap = 1 << 16, used = 0;
	char *buf = malloc(cap);
	ssize_t r;
	while ((r = read(fd, buf + used, cap - used - 1)) > 0) {
		used += (size_t)r;
		if (used + 1 == cap)
			buf = realloc(buf, cap *= 2);
	}
	buf[used] = '\0';
	close(fd);
	return buf;
}

/* Under AddressSanitizer: the test programs' own small allocations (paths, files read)
 * are not worth freeing one by one, so leak checking is off here; gpud and gpud-worker,
 * started by the tests, keep it on, and a leak there fails the test through their exit
 * status. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "detect_leaks=0";
}
