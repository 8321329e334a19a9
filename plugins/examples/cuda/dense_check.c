/* SPDX-License-Identifier: MIT */
/*
 * The dense example's CPU reference: recomputes W·x for every task and compares it
 * with what the GPU wrote (the `files` sink's raw float32 results).
 *   dense-check DIR COUNT IN_DIM OUT_DIM BASE_SEED INPUT_SEED
 * Prints the largest absolute and relative errors; exit 0 when every result is present
 * and within 1e-3 (relative to the row's scale), 1 otherwise.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "dense_common.h"

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: %s DIR COUNT IN_DIM OUT_DIM BASE_SEED INPUT_SEED\n",
			argv[0]);
		return 2;
	}
	const char *dir = argv[1];
	long count = atol(argv[2]);
	uint32_t in = (uint32_t)atol(argv[3]), out = (uint32_t)atol(argv[4]);
	uint64_t wseed = strtoull(argv[5], NULL, 10), iseed = strtoull(argv[6], NULL, 10);
	float *w = malloc(sizeof *w * in * out), *x = malloc(sizeof *x * in),
	      *got = malloc(sizeof *got * out);
	for (uint32_t o = 0; o < out; o++)
		for (uint32_t i = 0; i < in; i++)
			w[(size_t)o * in + i] = dense_weight(wseed, in, o, i);
	double max_abs = 0, max_rel = 0;
	long missing = 0, bad = 0;
	for (long k = 0; k < count; k++) {
		char path[4096];
		snprintf(path, sizeof path, "%s/%ld", dir, k);
		FILE *f = fopen(path, "rb");
		if (!f || fread(got, sizeof *got, out, f) != out) {
			missing++;
			if (f)
				fclose(f);
			continue;
		}
		fclose(f);
		for (uint32_t i = 0; i < in; i++)
			x[i] = dense_input(iseed, in, (uint64_t)k, i);
		for (uint32_t o = 0; o < out; o++) {
			double ref = 0, scale = 0;
			for (uint32_t i = 0; i < in; i++) {
				ref += (double)w[(size_t)o * in + i] * x[i];
				scale += fabs((double)w[(size_t)o * in + i] * x[i]);
			}
			double e = fabs(ref - got[o]);
			double r = e / (scale > 1e-30 ? scale : 1e-30);
			if (e > max_abs)
				max_abs = e;
			if (r > max_rel)
				max_rel = r;
			if (r > 1e-3)
				bad++;
		}
	}
	printf("dense-check: %ld results, %ld missing, %ld values off; max abs error %.3g, "
	       "max relative error %.3g\n",
	       count - missing, missing, bad, max_abs, max_rel);
	free(w);
	free(x);
	free(got);
	return missing || bad ? 1 : 0;
}
