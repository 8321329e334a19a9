/* SPDX-License-Identifier: MIT */
/*
 * The jpeg stage's resize, made to give the pixels Pillow's Image.resize gives (its
 * 8-bit path, Pillow 7 to 11): two separable passes, horizontal first, each output
 * pixel a weighted sum of the source pixels within the filter's support, the support
 * widened by the downscale factor so that every source pixel counts (antialiasing);
 * the weights normalised to sum 1, then made fixed point with 22 fractional bits
 * (32 - 8 - 2: room for 8 bits of value and for negative lobes), summed from a half
 * for rounding, and the sum clipped to 0..255 after each pass: the horizontal pass's
 * result is 8-bit, as Pillow keeps it. A pass whose size does not change is skipped,
 * as Pillow skips it. NEAREST is Pillow's affine scale instead: the source index of
 * output x is the integer part of (x + 0.5) x in / out, accumulated step by step in
 * double as Pillow does.
 *
 * Only a window of the output is computed (a centre crop): each output pixel depends
 * on its own taps only, so the window's pixels are those of the whole resize.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jpeg_image.h"

#define PRECISION_BITS (32 - 8 - 2)
/* Rows the horizontal pass turns on their side at a time. */
#define STRIP 64
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static double box_w(double x)
{
	return x > -0.5 && x <= 0.5 ? 1.0 : 0.0;
}

static double bilinear_w(double x)
{
	x = fabs(x);
	return x < 1.0 ? 1.0 - x : 0.0;
}

static double hamming_w(double x)
{
	x = fabs(x);
	if (x == 0.0)
		return 1.0;
	if (x >= 1.0)
		return 0.0;
	x *= M_PI;
	/* Pillow's constants are float literals: kept so. */
	return sin(x) / x * (0.54f + 0.46f * cos(x));
}

/* Keys' cubic convolution, a = -0.5. */
static double bicubic_w(double x)
{
	const double a = -0.5;
	x = fabs(x);
	if (x < 1.0)
		return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
	if (x < 2.0)
		return (((x - 5) * x + 8) * x - 4) * a;
	return 0.0;
}

static double sinc(double x)
{
	if (x == 0.0)
		return 1.0;
	x *= M_PI;
	return sin(x) / x;
}

static double lanczos_w(double x)
{
	return -3.0 <= x && x < 3.0 ? sinc(x) * sinc(x / 3) : 0.0;
}

static const struct {
	double (*w)(double);
	double support;
} filters[] = {
	[RESAMPLE_BOX] = {box_w, 0.5},         [RESAMPLE_BILINEAR] = {bilinear_w, 1.0},
	[RESAMPLE_HAMMING] = {hamming_w, 1.0}, [RESAMPLE_BICUBIC] = {bicubic_w, 2.0},
	[RESAMPLE_LANCZOS] = {lanczos_w, 3.0},
};

static void taps_free(struct resample_taps *t)
{
	free(t->bounds);
	free(t->k);
	memset(t, 0, sizeof *t);
}

/* The taps of output indices first .. first + n - 1 of a resize from `in` to `out`.
 * 0, or -1 out of memory. Kept while the sizes repeat. */
static int taps_make(struct resample_taps *t, int filter, int in, int out, int first, int n)
{
	if (t->bounds && t->filter == filter && t->in == in && t->out == out && t->first == first &&
	    t->n == n)
		return 0;
	taps_free(t);
	/* Pillow takes the span from a float box: in - 0 is exact in float for any
	 * size here. */
	double scale = (double)(float)in / out, filterscale = scale < 1.0 ? 1.0 : scale;
	double support = filters[filter].support * filterscale;
	double ceiled = ceil(support);
	if (ceiled * 2 + 1 > (double)in + 2)
		ceiled = in + 1; /* no source has more pixels than that to weigh */
	int ksize = (int)ceiled * 2 + 1;
	double *w = malloc(sizeof *w * (size_t)ksize);
	t->bounds = malloc(sizeof *t->bounds * 2 * (size_t)n);
	t->k = malloc(sizeof *t->k * (size_t)ksize * (size_t)n);
	if (!w || !t->bounds || !t->k) {
		free(w);
		taps_free(t);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		double centre = (first + i + 0.5) * scale, sum = 0.0, ss = 1.0 / filterscale;
		int lo = (int)(centre - support + 0.5), hi = (int)(centre + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > in)
			hi = in;
		int count = hi - lo;
		if (count > ksize)
			count = ksize;
		for (int j = 0; j < count; j++) {
			w[j] = filters[filter].w((j + lo - centre + 0.5) * ss);
			sum += w[j];
		}
		int32_t *k = t->k + (size_t)i * (size_t)ksize;
		for (int j = 0; j < count; j++) {
			double v = sum != 0.0 ? w[j] / sum : w[j];
			k[j] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS)
					       : 0.5 + v * (1 << PRECISION_BITS));
		}
		t->bounds[2 * i] = lo;
		t->bounds[2 * i + 1] = count;
	}
	free(w);
	t->ksize = ksize;
	t->filter = filter;
	t->in = in;
	t->out = out;
	t->first = first;
	t->n = n;
	return 0;
}

static unsigned char clip8(int32_t v)
{
	v >>= PRECISION_BITS; /* arithmetic: a negative sum stays negative */
	return v < 0 ? 0 : v > 255 ? 255 : (unsigned char)v;
}

/* The window's rows from `src` (rows of `width` bytes, its row 0 the source row
 * `y_first`): each a sum over whole rows, so the loops run along contiguous bytes. */
#if defined(__x86_64__) && defined(__GNUC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
/* x86-64's baseline (SSE2) has no 32-bit multiply a lane: a copy of the loops built for
 * AVX2 too, chosen at load where the CPU has it. */
__attribute__((target_clones("avx2", "default")))
#endif
#endif
static void
pass_vertical(const struct resample_taps *ty, const unsigned char *src, size_t width, int y_first,
	      int32_t *acc, unsigned char *dst)
{
	for (int y = 0; y < ty->n; y++) {
		const int32_t *k = ty->k + (size_t)y * (size_t)ty->ksize;
		const unsigned char *in = src + (size_t)(ty->bounds[2 * y] - y_first) * width;
		for (size_t x = 0; x < width; x++)
			acc[x] = 1 << (PRECISION_BITS - 1);
		for (int j = 0; j < ty->bounds[2 * y + 1]; j++, in += width)
			for (size_t x = 0; x < width; x++)
				acc[x] += in[x] * k[j];
		unsigned char *out = dst + (size_t)y * width;
		for (size_t x = 0; x < width; x++)
			out[x] = clip8(acc[x]);
	}
}

/* Rows [y_first, y_first + rows) of `src` (sw wide), the window's columns resized into
 * `dst` (rows of tx->n pixels). Done as a vertical pass over the image turned on its
 * side (`cols`: the source columns the taps read, then the results, each a run of
 * `rows` pixels), so that its sums run along contiguous bytes as the vertical pass's
 * do: integer sums, the same values in any order. */
static void pass_horizontal(const struct resample_taps *tx, const unsigned char *src, int sw,
			    int y_first, int rows, unsigned char *cols, int32_t *acc,
			    unsigned char *dst)
{
	int w = tx->n;
	int x_first = tx->bounds[0], x_last = tx->bounds[2 * (w - 1)] + tx->bounds[2 * (w - 1) + 1];
	size_t run = (size_t)rows * 3;
	for (int y = 0; y < rows; y++) {
		const unsigned char *in = src + ((size_t)(y_first + y) * (size_t)sw + x_first) * 3;
		unsigned char *out = cols + (size_t)y * 3;
		for (int x = x_first; x < x_last; x++, in += 3, out += run)
			memcpy(out, in, 3);
	}
	unsigned char *turned = cols + (size_t)(x_last - x_first) * run;
	pass_vertical(tx, cols, run, x_first, acc, turned);
	for (int x = 0; x < w; x++) {
		const unsigned char *in = turned + (size_t)x * run;
		unsigned char *out = dst + (size_t)x * 3;
		for (int y = 0; y < rows; y++, in += 3, out += (size_t)w * 3)
			memcpy(out, in, 3);
	}
}

/* Pillow's affine nearest scale: the source index of output x is the integer part of
 * its position, accumulated in double from the first output index as Pillow does. */
static int nearest(const unsigned char *src, int sw, int sh, int ow, int oh, int x0, int y0, int w,
		   int h, unsigned char *out)
{
	int *xs = malloc(sizeof *xs * (size_t)w);
	if (!xs)
		return -1;
	double step = (double)(float)sw / ow, pos = step * 0.5;
	for (int x = 0, n = 0; x < x0 + w; x++, pos += step) {
		if (x < x0)
			continue;
		int v = pos < 0.0 ? -1 : (int)pos;
		xs[n++] = v < 0 ? 0 : v >= sw ? sw - 1 : v;
	}
	double ystep = (double)(float)sh / oh, ypos = ystep * 0.5;
	for (int y = 0; y < y0; y++)
		ypos += ystep;
	for (int y = 0; y < h; y++, ypos += ystep) {
		int v = ypos < 0.0 ? -1 : (int)ypos;
		v = v < 0 ? 0 : v >= sh ? sh - 1 : v;
		const unsigned char *in = src + (size_t)v * (size_t)sw * 3;
		unsigned char *o = out + (size_t)y * (size_t)w * 3;
		for (int x = 0; x < w; x++)
			memcpy(o + 3 * x, in + 3 * (size_t)xs[x], 3);
	}
	free(xs);
	return 0;
}

static int grow_bytes(unsigned char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return 0;
	unsigned char *q = realloc(*p, need);
	if (!q)
		return -1;
	*p = q;
	*cap = need;
	return 0;
}

static int grow_acc(struct resampler *r, size_t n)
{
	if (n <= r->acc_cap)
		return 0;
	int32_t *a = realloc(r->acc, sizeof *a * n);
	if (!a)
		return -1;
	r->acc = a;
	r->acc_cap = n;
	return 0;
}

int resample_rgb(struct resampler *r, enum resample_filter filter, const unsigned char *src, int sw,
		 int sh, int ow, int oh, int x0, int y0, int w, int h, unsigned char *out)
{
	if (filter == RESAMPLE_NEAREST && (sw != ow || sh != oh))
		return nearest(src, sw, sh, ow, oh, x0, y0, w, h, out);
	int horizontal = sw != ow, vertical = sh != oh;
	/* Rows the vertical pass reads: [y_first, y_last). */
	int y_first = y0, y_last = y0 + h;
	if (vertical) {
		if (taps_make(&r->ty, filter, sh, oh, y0, h) < 0)
			return -1;
		y_first = r->ty.bounds[0];
		y_last = r->ty.bounds[2 * (h - 1)] + r->ty.bounds[2 * (h - 1) + 1];
	}
	/* The horizontal pass's rows (or the source's window columns as they are). */
	const unsigned char *rows;
	size_t width = (size_t)w * 3;
	if (horizontal || x0 != 0 || w != sw) {
		size_t need = (size_t)(y_last - y_first) * width;
		if (need > r->rows_cap) {
			unsigned char *p = realloc(r->rows, need);
			if (!p)
				return -1;
			r->rows = p;
			r->rows_cap = need;
		}
		if (horizontal) {
			if (taps_make(&r->tx, filter, sw, ow, x0, w) < 0)
				return -1;
			/* In strips of rows: the turned copy stays small (and in cache). */
			const int *b = r->tx.bounds;
			size_t run = (size_t)STRIP * 3;
			size_t ncols =
				(size_t)(b[2 * (w - 1)] + b[2 * (w - 1) + 1] - b[0]) + (size_t)w;
			if (grow_bytes(&r->cols, &r->cols_cap, ncols * run) < 0 ||
			    grow_acc(r, run) < 0)
				return -1;
			for (int y = y_first; y < y_last; y += STRIP)
				pass_horizontal(&r->tx, src, sw, y,
						y_last - y < STRIP ? y_last - y : STRIP, r->cols,
						r->acc, r->rows + (size_t)(y - y_first) * width);
		} else {
			for (int y = y_first; y < y_last; y++)
				memcpy(r->rows + (size_t)(y - y_first) * width,
				       src + ((size_t)y * (size_t)sw + (size_t)x0) * 3, width);
		}
		rows = r->rows;
	} else {
		rows = src + (size_t)y_first * width;
	}
	if (!vertical) {
		memcpy(out, rows + (size_t)(y0 - y_first) * width, (size_t)h * width);
		return 0;
	}
	if (grow_acc(r, width) < 0)
		return -1;
	pass_vertical(&r->ty, rows, width, y_first, r->acc, out);
	return 0;
}

void resample_free(struct resampler *r)
{
	taps_free(&r->tx);
	taps_free(&r->ty);
	free(r->rows);
	free(r->acc);
	free(r->cols);
	memset(r, 0, sizeof *r);
}
