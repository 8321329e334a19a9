/* SPDX-License-Identifier: MIT */
/*
 * The jpeg stage's parts beside its JPEG decoder (plugins/jpeg.c): the resize that
 * gives Pillow's Image.resize pixels (jpeg_resample.c) and the PNG decoder
 * (jpeg_png.c). Images are RGB, 3 bytes a pixel, rows packed.
 */
#ifndef GPUD_JPEG_IMAGE_H
#define GPUD_JPEG_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* Pillow's resampling filters, by the names its Image.Resampling gives them. */
enum resample_filter {
	RESAMPLE_NEAREST,
	RESAMPLE_BOX,
	RESAMPLE_BILINEAR,
	RESAMPLE_HAMMING,
	RESAMPLE_BICUBIC,
	RESAMPLE_LANCZOS,
};

/* One axis's fixed-point taps for a window of output indices. */
struct resample_taps {
	int *bounds; /* per window index: first source index, count */
	int32_t *k;  /* per window index: ksize coefficients, the first count used */
	int ksize;
	int in, out, first, n, filter; /* what they were made for (kept while it repeats) */
};

/* What a resize keeps between images: taps and the horizontal pass's rows. Zeroed to
 * start; resample_free releases it. */
struct resampler {
	struct resample_taps tx, ty;
	unsigned char *rows;
	size_t rows_cap;
	int32_t *acc;
	size_t acc_cap;
	unsigned char *cols; /* the horizontal pass's source, then result, columns first */
	size_t cols_cap;
};

/* The window [x0, x0 + w) x [y0, y0 + h) of the sw x sh image `src` resized to
 * ow x oh, as Pillow's Image.resize((ow, oh), filter) of the whole image then
 * crop((x0, y0, x0 + w, y0 + h)) gives it, written to `out` (w x h x 3). The window
 * must lie inside ow x oh. 0, or -1 out of memory. */
int resample_rgb(struct resampler *r, enum resample_filter filter, const unsigned char *src, int sw,
		 int sh, int ow, int oh, int x0, int y0, int w, int h, unsigned char *out);
void resample_free(struct resampler *r);

/* The 8-byte signature every PNG file starts with. */
int png_sniff(const void *data, size_t size);

/* A PNG's pixels as Pillow's Image.open(f).convert("RGB") gives them: `*pixels`
 * (realloc'd, `*cap` its size) gets *w x *h x 3 bytes. An image whose pixels as the
 * decoder holds them would take more than `max_bytes`, or over `max_pixels` pixels, is
 * refused before decoding. 0; -1 with `message` (size `len`) saying why; -2 out of
 * memory. Without libpng in the build: -1, saying so. */
int png_decode(const void *data, size_t size, uint64_t max_bytes, uint64_t max_pixels,
	       unsigned char **pixels, size_t *cap, int *w, int *h, char *message, size_t len);

#endif
