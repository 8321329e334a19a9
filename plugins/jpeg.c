/* SPDX-License-Identifier: MIT */
/*
 * Worker `jpeg`, made to run as a CPU stage ([stage.NAME] plugin = jpeg): a task's
 * bytes are a JPEG file, its result the image as `height` x `width` x 3 uint8 RGB
 * pixels, row after row (C order, as numpy.frombuffer(r, numpy.uint8).reshape(height,
 * width, 3) reads it). libjpeg-turbo's TurboJPEG decodes at the smallest of its DCT
 * scales (1/8, 1/4, 3/8, 1/2 ... 1) whose image is at least the target in both
 * dimensions, which skips most of the work for a large photo made small, then a
 * separable triangle (bilinear) filter resizes to exactly height x width, widening its
 * support when it shrinks so that every source pixel counts (Pillow's BILINEAR).
 * The aspect ratio is not kept: crop first where it matters. Grayscale images come out
 * as RGB (three equal channels), CMYK and YCCK ones through the plain formula
 * r = c' x k' / 255 on the decoder's (inverted, Adobe) values.
 * A file the decoder cannot read fails its task alone with the decoder's message,
 * never retried (gpud_task_reject); so does a damaged one it could half read (its
 * warning), unless `strict = false`.
 */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "jpeg", "1.0");
GPUD_PLUGIN_DESCRIPTION("CPU stage: JPEG bytes to height x width x 3 uint8 RGB pixels "
			"(TurboJPEG, DCT scaling then a bilinear resize)");
GPUD_PLUGIN_KEYS("height", "width", "strict");

/* The largest image decoded, after DCT scaling: 1 GiB of RGB pixels. */
#define MAX_PIXELS (UINT64_C(1) << 28)
#define MAX_SIDE 16384

/* One output index's source span along a dimension and its weights. */
struct taps {
	int *first;     /* per output index: the first source index */
	int *count;     /* per output index: how many source indices */
	float *weights; /* per output index: `stride` weights, the first count of them used */
	int stride;
	int in, out; /* the source and target sizes they were made for */
};

struct jpeg_state {
	tjhandle tj;
	int height, width;
	int strict;
	unsigned char *pixels; /* the decoded (DCT-scaled) image */
	size_t pixels_cap;
	float *rows; /* horizontally resized rows: scaled height x width x 3 */
	size_t rows_cap;
	struct taps tx, ty;
};

static void taps_free(struct taps *t)
{
	free(t->first);
	free(t->count);
	free(t->weights);
	memset(t, 0, sizeof *t);
}

/* The triangle filter's taps from `in` source pixels to `out` (Pillow's resampling
 * arithmetic: centre (i + 0.5) x scale, support 1 x max(scale, 1)). 0, or -1 out of
 * memory. Kept while the sizes repeat (every image of a data set the same size). */
static int taps_make(struct taps *t, int in, int out)
{
	if (t->first && t->in == in && t->out == out)
		return 0;
	taps_free(t);
	double scale = (double)in / out, filter_scale = scale < 1 ? 1 : scale;
	double support = filter_scale; /* the triangle's support is 1 */
	int stride = (int)support * 2 + 3;
	t->first = malloc(sizeof *t->first * (size_t)out);
	t->count = malloc(sizeof *t->count * (size_t)out);
	t->weights = malloc(sizeof *t->weights * (size_t)out * (size_t)stride);
	if (!t->first || !t->count || !t->weights) {
		taps_free(t);
		return -1;
	}
	for (int i = 0; i < out; i++) {
		double centre = (i + 0.5) * scale;
		int lo = (int)(centre - support + 0.5), hi = (int)(centre + support + 0.5);
		if (lo < 0)
			lo = 0;
		if (hi > in)
			hi = in;
		if (hi - lo > stride)
			hi = lo + stride;
		float *w = t->weights + (size_t)i * (size_t)stride;
		double sum = 0;
		for (int j = lo; j < hi; j++) {
			double d = (j - centre + 0.5) / filter_scale;
			double v = d < 0 ? 1 + d : 1 - d;
			w[j - lo] = (float)(v > 0 ? v : 0);
			sum += w[j - lo];
		}
		for (int j = lo; j < hi && sum > 0; j++)
			w[j - lo] = (float)(w[j - lo] / sum);
		t->first[i] = lo;
		t->count[i] = hi - lo;
	}
	t->stride = stride;
	t->in = in;
	t->out = out;
	return 0;
}

static unsigned char clamp8(float v)
{
	return v <= 0 ? 0 : v >= 255 ? 255 : (unsigned char)(v + 0.5f);
}

/* The decoded sw x sh image resized into `out` (height x width x 3). 0, or -1 out of
 * memory. */
static int resize(struct jpeg_state *s, int sw, int sh, unsigned char *out)
{
	int w = s->width, h = s->height;
	if (sw == w && sh == h) {
		memcpy(out, s->pixels, (size_t)w * (size_t)h * 3);
		return 0;
	}
	size_t need = (size_t)sh * (size_t)w * 3 * sizeof(float);
	if (need > s->rows_cap) {
		float *r = realloc(s->rows, need);
		if (!r)
			return -1;
		s->rows = r;
		s->rows_cap = need;
	}
	if (taps_make(&s->tx, sw, w) < 0 || taps_make(&s->ty, sh, h) < 0)
		return -1;
	const struct taps *tx = &s->tx, *ty = &s->ty;
	for (int y = 0; y < sh; y++) {
		const unsigned char *src = s->pixels + (size_t)y * (size_t)sw * 3;
		float *dst = s->rows + (size_t)y * (size_t)w * 3;
		for (int x = 0; x < w; x++) {
			const float *k = tx->weights + (size_t)x * (size_t)tx->stride;
			const unsigned char *p = src + (size_t)tx->first[x] * 3;
			float r = 0, g = 0, b = 0;
			for (int j = 0; j < tx->count[x]; j++, p += 3) {
				r += k[j] * p[0];
				g += k[j] * p[1];
				b += k[j] * p[2];
			}
			dst[3 * x] = r;
			dst[3 * x + 1] = g;
			dst[3 * x + 2] = b;
		}
	}
	size_t row = (size_t)w * 3;
	for (int y = 0; y < h; y++) {
		const float *k = ty->weights + (size_t)y * (size_t)ty->stride;
		const float *src = s->rows + (size_t)ty->first[y] * row;
		unsigned char *dst = out + (size_t)y * row;
		for (size_t x = 0; x < row; x++) {
			float v = 0;
			for (int j = 0; j < ty->count[y]; j++)
				v += k[j] * src[(size_t)j * row + x];
			dst[x] = clamp8(v);
		}
	}
	return 0;
}

/* The smallest DCT scale (no larger than 1) whose image covers the target. */
static tjscalingfactor choose_scale(int iw, int ih, int w, int h)
{
	tjscalingfactor best = {1, 1};
	int n = 0;
	tjscalingfactor *f = tjGetScalingFactors(&n);
	for (int i = 0; f && i < n; i++) {
		if (f[i].num > f[i].denom)
			continue;
		int sw = TJSCALED(iw, f[i]), sh = TJSCALED(ih, f[i]);
		if (sw < w || sh < h)
			continue;
		if ((double)f[i].num / f[i].denom < (double)best.num / best.denom)
			best = f[i];
	}
	return best;
}

static int parse_side(const struct gpud_args *args, const char *key, int *out,
		      struct gpud_error *err)
{
	long v;
	if (gpud_arg_parse_long(args, key, -1, &v, err) < 0)
		return -1;
	if (v == -1)
		return gpud_fail(err,
				 "jpeg: %s is required (the pixels out are height x width x 3 "
				 "uint8)",
				 key);
	if (v < 1 || v > MAX_SIDE)
		return gpud_fail(err, "jpeg: %s = %ld: expected 1 to %d", key, v, MAX_SIDE);
	*out = (int)v;
	return 0;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct jpeg_state *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "jpeg: out of memory");
	const char *strict = gpud_arg(info->args, "strict", "true");
	if (parse_side(info->args, "height", &s->height, err) < 0 ||
	    parse_side(info->args, "width", &s->width, err) < 0)
		goto fail;
	if (strcmp(strict, "true") == 0 || strcmp(strict, "1") == 0) {
		s->strict = 1;
	} else if (strcmp(strict, "false") != 0 && strcmp(strict, "0") != 0) {
		gpud_fail(err, "jpeg: strict = '%s': expected true or false", strict);
		goto fail;
	}
	s->tj = tjInitDecompress();
	if (!s->tj) {
		gpud_fail(err, "jpeg: TurboJPEG: %s", tjGetErrorStr2(NULL));
		goto fail;
	}
	*state = s;
	return 0;
fail:
	free(s);
	return -1;
}

/* CMYK pixels (4 bytes each, Adobe's inverted values as the decoder gives them) made
 * RGB in place. */
static void cmyk_to_rgb(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned k = p[4 * i + 3];
		p[3 * i] = (unsigned char)((p[4 * i] * k + 127) / 255);
		p[3 * i + 1] = (unsigned char)((p[4 * i + 1] * k + 127) / 255);
		p[3 * i + 2] = (unsigned char)((p[4 * i + 2] * k + 127) / 255);
	}
}

/* Task `task` decoded into its result; -1 after gpud_task_reject/fail. *tj_failed: a
 * TurboJPEG call failed (or only warned), so its handle is not to be used again. */
static int decode(struct jpeg_state *s, struct gpud_task *task, int *tj_failed)
{
	size_t need = (size_t)s->width * (size_t)s->height * 3;
	if (need > task->result.capacity)
		return gpud_task_reject(task,
					"jpeg: the pixels of %d x %d x 3 take %zu bytes, over "
					"max_result_bytes (%zu): raise [job] max_result_bytes "
					"(and max_task_bytes, the next stage's input)",
					s->height, s->width, need, task->result.capacity);
	int iw = 0, ih = 0, subsamp = -1, colorspace = -1;
	if (task->input_size > ULONG_MAX)
		return gpud_task_reject(task, "jpeg: %zu bytes is too large", task->input_size);
	*tj_failed = tjDecompressHeader3(s->tj, task->input, (unsigned long)task->input_size, &iw,
					 &ih, &subsamp, &colorspace) < 0;
	/* strict = false: a header read with a warning only (extraneous bytes) goes on. */
	if (*tj_failed && (s->strict || tjGetErrorCode(s->tj) != TJERR_WARNING))
		return gpud_task_reject(task, "jpeg: not a JPEG it can read (%zu bytes): %s",
					task->input_size, tjGetErrorStr2(s->tj));
	/* A header cut short can come back "read" with no frame in it: its sizes are not
	 * believed unless a JPEG could have them. */
	if (iw < 1 || ih < 1 || iw > 65535 || ih > 65535)
		return *tj_failed = 1,
		       gpud_task_reject(
			       task,
			       "jpeg: not a JPEG it can read (%zu bytes): no image size in "
			       "its header%s%s",
			       task->input_size, tjGetErrorStr2(s->tj)[0] ? ": " : "",
			       tjGetErrorStr2(s->tj));
	tjscalingfactor f = choose_scale(iw, ih, s->width, s->height);
	int sw = TJSCALED(iw, f), sh = TJSCALED(ih, f);
	int cmyk = colorspace == TJCS_CMYK || colorspace == TJCS_YCCK;
	if ((uint64_t)sw * (uint64_t)sh > MAX_PIXELS)
		return gpud_task_reject(task,
					"jpeg: an image of %d x %d (decoded at %d/%d: %d x %d) is "
					"larger than this stage decodes (%llu pixels)",
					iw, ih, f.num, f.denom, sw, sh,
					(unsigned long long)MAX_PIXELS);
	size_t size = (size_t)sw * (size_t)sh * (cmyk ? 4 : 3);
	if (size > s->pixels_cap) {
		unsigned char *p = realloc(s->pixels, size);
		if (!p)
			return gpud_task_fail(task, "jpeg: out of memory for %d x %d pixels", sw,
					      sh);
		s->pixels = p;
		s->pixels_cap = size;
	}
	int flags = s->strict ? TJFLAG_STOPONWARNING : 0;
	*tj_failed = tjDecompress2(s->tj, task->input, (unsigned long)task->input_size, s->pixels,
				   sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_RGB, flags) < 0;
	if (*tj_failed && (s->strict || tjGetErrorCode(s->tj) != TJERR_WARNING))
		return gpud_task_reject(task, "jpeg: cannot decode this %d x %d image: %s", iw, ih,
					tjGetErrorStr2(s->tj));
	if (cmyk)
		cmyk_to_rgb(s->pixels, (size_t)sw * (size_t)sh);
	if (resize(s, sw, sh, task->result.data) < 0)
		return gpud_task_fail(task, "jpeg: out of memory resizing %d x %d to %d x %d", sw,
				      sh, s->width, s->height);
	task->result.size = need;
	return 0;
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct jpeg_state *s = state;
	if (!s->tj) {
		s->tj = tjInitDecompress();
		if (!s->tj)
			return gpud_task_fatal(task, "jpeg: TurboJPEG: %s", tjGetErrorStr2(NULL));
	}
	int tj_failed = 0, rc = decode(s, task, &tj_failed);
	/* After an error (or a warning) a TurboJPEG handle of libjpeg-turbo 2.1 fails
	 * every later header with the same message: the next task gets a fresh one. */
	if (tj_failed) {
		tjDestroy(s->tj);
		s->tj = tjInitDecompress(); /* NULL: made again by the next task */
	}
	return rc;
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct jpeg_state *s = state;
	if (s->tj)
		tjDestroy(s->tj);
	taps_free(&s->tx);
	taps_free(&s->ty);
	free(s->pixels);
	free(s->rows);
	free(s);
	return 0;
}
