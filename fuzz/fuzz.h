/* SPDX-License-Identifier: MIT */
/* The fuzz targets' entry points: plain functions, so the test suite can replay saved
 * inputs without libFuzzer (tests/test_fuzz_regress.c). */
#ifndef GPUD_FUZZ_H
#define GPUD_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Parses `data` as a job file (its first line may carry --set arguments, see there). */
int fuzz_config_one(const uint8_t *data, size_t size);
/* Decodes `data` as a result ring written by a worker, as the host does. */
int fuzz_ring_one(const uint8_t *data, size_t size);

#endif
