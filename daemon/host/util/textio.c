/* SPDX-License-Identifier: MIT */
#include "util/textio.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int io_write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

void io_json_string(FILE *f, const char *s)
{
	if (!s) {
		fputs("null", f);
		return;
	}
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

/* "8 MiB", "64 KiB", "100 bytes" (a static buffer: one at a time). */
static const char *cap_text(size_t cap)
{
	static char buf[32];
	if (cap && cap % (1u << 20) == 0)
		snprintf(buf, sizeof buf, "%zu MiB", cap >> 20);
	else if (cap && cap % 1024 == 0)
		snprintf(buf, sizeof buf, "%zu KiB", cap >> 10);
	else
		snprintf(buf, sizeof buf, "%zu bytes", cap);
	return buf;
}

char *io_read_small(const char *path, size_t cap, size_t *size, char *why, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(why, len, "%s", strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(why, len, "not a regular file");
		close(fd);
		return NULL;
	}
	if ((uint64_t)st.st_size > cap) {
		snprintf(why, len, "%lld bytes, more than the %s such a file may have",
			 (long long)st.st_size, cap_text(cap));
		close(fd);
		return NULL;
	}
	/* One byte more than its size: a file that grew since fstat is seen, not cut. A
	 * file of /proc or cgroupfs says 0 and holds what it holds when read: up to cap. */
	size_t want = st.st_size ? (size_t)st.st_size : cap;
	char *buf = malloc(want + 2);
	size_t n = 0;
	while (buf && n <= want) {
		ssize_t r = read(fd, buf + n, want + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(why, len, "%s", strerror(errno));
			free(buf);
			close(fd);
			return NULL;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (!buf) {
		snprintf(why, len, "out of memory");
		return NULL;
	}
	if (n > want) {
		if (st.st_size)
			snprintf(why, len, "it grew while read");
		else
			snprintf(why, len, "more than the %s such a file may have", cap_text(cap));
		free(buf);
		return NULL;
	}
	buf[n] = '\0';
	*size = n;
	return buf;
}

/* The length of the well-formed UTF-8 sequence at s (2 to 4 bytes; no overlong form,
 * no surrogate, nothing past U+10FFFF), or 0. */
static int utf8_sequence(const unsigned char *s)
{
	int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 ? 2 : 0;
	if (!n || (n == 3 && s[0] > 0xef))
		return 0;
	for (int i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0; /* also the NUL that ends a string cut inside a sequence */
	if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] > 0x9f) ||
	    (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] > 0x8f))
		return 0;
	return n;
}

void text_clean(char *s)
{
	unsigned char *p = (unsigned char *)s;
	while (*p) {
		if (*p < 0x80) {
			if (*p < 0x20 || *p == 0x7f)
				*p = '?';
			p++;
			continue;
		}
		int n = utf8_sequence(p);
		if (n) {
			p += n;
			continue;
		}
		/* A sequence cut short by the end (a message cut at its buffer's size) goes;
		 * any other byte that is no UTF-8 becomes '?'. */
		unsigned char *q = p + 1;
		while ((*q & 0xc0) == 0x80)
			q++;
		if (!*q && *p >= 0xc2 && *p <= 0xf4 &&
		    q - p < (*p >= 0xf0   ? 4
			     : *p >= 0xe0 ? 3
					  : 2)) {
			*p = '\0';
			break;
		}
		*p++ = '?';
	}
}
