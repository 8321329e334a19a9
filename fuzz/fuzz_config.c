/* SPDX-License-Identifier: MIT */
/* Fuzz target: the job-file parser, on arbitrary bytes. An input starting with "#SET "
 * has its first line split on spaces into --set arguments, so overrides are fuzzed
 * too. The parser must never crash, hang or leak, whatever the bytes. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "job/config.h"
#include "fuzz.h"

int fuzz_config_one(const uint8_t *data, size_t size)
{
	char *sets[16];
	size_t n_sets = 0;
	char *first = NULL;
	const uint8_t *body = data;
	size_t body_size = size;

	if (size > 5 && memcmp(data, "#SET ", 5) == 0) {
		const uint8_t *nl = memchr(data, '\n', size);
		size_t len = nl ? (size_t)(nl - data) : size;
		first = strndup((const char *)data + 5, len - 5);
		for (char *tok = strtok(first, " "); tok && n_sets < 16; tok = strtok(NULL, " "))
			sets[n_sets++] = tok;
		body = nl ? nl + 1 : data + size;
		body_size = size - (size_t)(body - data);
	}

	int fd = memfd_create("fuzz-job", MFD_CLOEXEC);
	if (fd < 0) {
		free(first);
		return 0;
	}
	if (write(fd, body, body_size) != (ssize_t)body_size) {
		close(fd);
		free(first);
		return 0;
	}
	char path[64], err[4096];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	struct cfg c;
	if (cfg_load(&c, path, sets, n_sets, err, sizeof err) == 0)
		cfg_free(&c);
	else if (!err[0] || strchr(err, '\n'))
		abort(); /* every error is one non-empty line */
	close(fd);
	free(first);
	return 0;
}

#ifdef GPUD_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_config_one(data, size);
}
#endif
