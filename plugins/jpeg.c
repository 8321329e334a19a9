/* SPDX-License-Identifier: MIT */
/*
 * Worker `jpeg`, made to run as a CPU stage ([stage.NAME] plugin = jpeg): a task's
 * bytes are a JPEG file, its result the image as `height` x `width` x 3 uint8 RGB
 * pixels, row after row (C order, as numpy.frombuffer(r, numpy.uint8).reshape(height,
 * width, 3) reads it). libjpeg (libjpeg-turbo) decodes at the smallest of its DCT
 * scales (1/8, 2/8, 3/8 ... 8/8) whose image is at least the target in both
 * dimensions, which skips most of the work for a large photo made small, then a
 * separable triangle (bilinear) filter resizes to exactly height x width, widening its
 * support when it shrinks so that every source pixel counts (Pillow's BILINEAR).
 * The aspect ratio is not kept: crop first where it matters. Grayscale images come out
 * as RGB (three equal channels), CMYK and YCCK ones through the plain formula
 * r = c' x k' / 255 on the decoder's (inverted, Adobe) values.
 * A file the decoder cannot read fails its task alone with the decoder's message,
 * never retried (gpud_task_reject); so does a damaged one it could half read (its
 * warning), unless `strict = false`.
 * A whole sample (the `tar` generator's `members`, framed as gpud/plugin.h says) comes
 * out as the same sample with its image member (`image_member`, else the first jpg,
 * jpeg or png) replaced by its pixels, the other members passed on (sample_stage.h).
 * The decoder's memory is bounded before decoding: a progressive (or multi-scan) file
 * keeps the DCT coefficients of the whole image at full size whatever the scale, so a
 * few hundred bytes claiming 65500 x 65500 would take gigabytes. An image whose bound
 * is over `max_memory_mb` (256) is refused, naming its size; libjpeg's own limit
 * (max_memory_to_use) is the same, for anything the bound misses.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include <gpud/plugin.h>

#include "sample_stage.h"

GPUD_PLUGIN("worker", "jpeg", "1.0");
GPUD_PLUGIN_DESCRIPTION("CPU stage: JPEG bytes to height x width x 3 uint8 RGB pixels "
			"(libjpeg, DCT scaling then a bilinear resize)");
GPUD_PLUGIN_KEYS("height", "width", "strict", "max_memory_mb", "image_member");

/* The largest image decoded, after DCT scaling: 1 GiB of RGB pixels. */
#define MAX_PIXELS (UINT64_C(1) << 28)
#define MAX_SIDE 16384
/* The decoder's memory for one image (max_memory_mb): its default and largest. */
#define MEMORY_MB 256
#define MAX_MEMORY_MB 65536
#define MIB (UINT64_C(1) << 20)

/* libjpeg's errors and warnings: an error jumps back to decode(); so does a warning
 * when `strict`. */
struct jpeg_errors {
	struct jpeg_error_mgr pub;
	jmp_buf jump;
	int strict;
	char message[JMSG_LENGTH_MAX]; /* the error's, else the first warning's */
};

/* One output index's source span along a dimension and its weights. */
struct taps {
	int *first;     /* per output index: the first source index */
	int *count;     /* per output index: how many source indices */
	float *weights; /* per output index: `stride` weights, the first count of them used */
	int stride;
	int in, out; /* the source and target sizes they were made for */
};

struct jpeg_state {
	struct jpeg_decompress_struct d; /* made by setup, reused by every task */
	struct jpeg_errors errors;
	int made;
	int height, width;
	int strict;
	long max_memory_mb;
	char *image_member;    /* a whole sample's member to decode (sample_stage.h), or NULL */
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

/* The smallest DCT scale n/8 (n of 1 to 8) whose image covers the target: n. */
static int choose_scale(int iw, int ih, int w, int h)
{
	for (int n = 1; n < 8; n++)
		if (((int64_t)iw * n + 7) / 8 >= w && ((int64_t)ih * n + 7) / 8 >= h)
			return n;
	return 8;
}

static void on_error(j_common_ptr c)
{
	struct jpeg_errors *e = (struct jpeg_errors *)c->err;
	c->err->format_message(c, e->message);
	longjmp(e->jump, 1);
}

/* Level -1 is a warning (the data is damaged), higher ones are traces. */
static void on_message(j_common_ptr c, int level)
{
	struct jpeg_errors *e = (struct jpeg_errors *)c->err;
	if (level >= 0)
		return;
	if (c->err->num_warnings++ == 0)
		c->err->format_message(c, e->message);
	if (e->strict)
		longjmp(e->jump, 1);
}

/* About the most libjpeg holds to decode the image whose header `d` has read, in
 * bytes, whatever the scale (the bound is taken at full size): for a progressive or
 * multi-scan file (*whole set) the whole image's DCT coefficients, 64 of 2 bytes a
 * block of each component, its blocks padded to its sampling factors as libjpeg pads
 * them; for any file, rows of samples of the full width: three iMCU rows of each
 * component and an iMCU row of all of them upsampled. */
static uint64_t decoder_bytes(const struct jpeg_decompress_struct *d, int *whole)
{
	uint64_t coefficients = 0, rows = 0;
	uint64_t hmax = (uint64_t)d->max_h_samp_factor, vmax = (uint64_t)d->max_v_samp_factor;
	for (int c = 0; c < d->num_components; c++) {
		const jpeg_component_info *ci = &d->comp_info[c];
		uint64_t h = (uint64_t)ci->h_samp_factor, v = (uint64_t)ci->v_samp_factor;
		uint64_t bw =
			((uint64_t)d->image_width * h + hmax * DCTSIZE - 1) / (hmax * DCTSIZE);
		uint64_t bh =
			((uint64_t)d->image_height * v + vmax * DCTSIZE - 1) / (vmax * DCTSIZE);
		bw = (bw + h - 1) / h * h;
		bh = (bh + v - 1) / v * v;
		coefficients += bw * bh * DCTSIZE2 * sizeof(JCOEF);
		rows += bw * DCTSIZE * v * DCTSIZE * 3;
	}
	rows += (uint64_t)d->image_width * (uint64_t)d->num_components * vmax * DCTSIZE;
	*whole = d->progressive_mode || d->comps_in_scan < d->num_components;
	return (*whole ? coefficients : 0) + rows;
}

/* The decoder made, its errors and warnings coming to `s`; -1 out of memory. */
static int begin_decoder(struct jpeg_state *s)
{
	s->d.err = jpeg_std_error(&s->errors.pub);
	s->errors.pub.error_exit = on_error;
	s->errors.pub.emit_message = on_message;
	s->errors.strict = s->strict;
	if (setjmp(s->errors.jump))
		return -1;
	jpeg_create_decompress(&s->d);
	s->made = 1;
	return 0;
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
	    parse_side(info->args, "width", &s->width, err) < 0 ||
	    gpud_arg_parse_long(info->args, "max_memory_mb", MEMORY_MB, &s->max_memory_mb, err) < 0)
		goto fail;
	if (s->max_memory_mb < 1 || s->max_memory_mb > MAX_MEMORY_MB) {
		gpud_fail(err, "jpeg: max_memory_mb = %ld: expected 1 to %d (MiB)",
			  s->max_memory_mb, MAX_MEMORY_MB);
		goto fail;
	}
	if (strcmp(strict, "true") == 0 || strcmp(strict, "1") == 0) {
		s->strict = 1;
	} else if (strcmp(strict, "false") != 0 && strcmp(strict, "0") != 0) {
		gpud_fail(err, "jpeg: strict = '%s': expected true or false", strict);
		goto fail;
	}
	const char *im = gpud_arg(info->args, "image_member", NULL);
	if (im && !*im) {
		gpud_fail(err, "jpeg: image_member = '': name the sample's member to decode (jpg, "
			       "png, ...), or leave the key out for the first image member");
		goto fail;
	}
	if (im && !(s->image_member = strdup(im))) {
		gpud_fail(err, "jpeg: out of memory");
		goto fail;
	}
	if (begin_decoder(s) < 0) {
		gpud_fail(err, "jpeg: libjpeg: %s", s->errors.message);
		goto fail;
	}
	*state = s;
	return 0;
fail:
	free(s->image_member);
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

/* Task `task` decoded into its result; -1 after gpud_task_reject/fail. A libjpeg error
 * (or, when strict, a warning) jumps back here: the decoder is reset for the next task
 * and the task rejected with its message, never retried (its input will not change). */
static int decode(struct jpeg_state *s, struct gpud_task *task)
{
	size_t need = (size_t)s->width * (size_t)s->height * 3;
	if (need > task->result.capacity)
		return gpud_task_reject(task,
					"jpeg: the pixels of %d x %d x 3 take %zu bytes, over "
					"max_result_bytes (%zu): raise [job] max_result_bytes "
					"(and max_task_bytes, the next stage's input)",
					s->height, s->width, need, task->result.capacity);
	if (task->input_size > ULONG_MAX)
		return gpud_task_reject(task, "jpeg: %zu bytes is too large", task->input_size);
	struct jpeg_decompress_struct *d = &s->d;
	uint64_t cap = (uint64_t)s->max_memory_mb * MIB;
	volatile int decoding = 0; /* past the header */
	s->errors.message[0] = '\0';
	s->errors.pub.num_warnings = 0;
	if (setjmp(s->errors.jump)) {
		int over = s->errors.pub.msg_code == JERR_NO_BACKING_STORE;
		jpeg_abort_decompress(d);
		if (!decoding)
			return gpud_task_reject(task,
						"jpeg: not a JPEG it can read (%zu bytes): %s",
						task->input_size, s->errors.message);
		if (over)
			return gpud_task_reject(task,
						"jpeg: this %u x %u image needs more than "
						"max_memory_mb = %ld to decode (libjpeg: %s)",
						d->image_width, d->image_height, s->max_memory_mb,
						s->errors.message);
		return gpud_task_reject(task, "jpeg: cannot decode this %u x %u image: %s",
					d->image_width, d->image_height, s->errors.message);
	}
	/* libjpeg's own limit on what it allocates for an image; the bound below
	 * refuses first, and says why. */
	d->mem->max_memory_to_use = cap > LONG_MAX ? LONG_MAX : (long)cap;
	jpeg_mem_src(d, task->input, (unsigned long)task->input_size);
	/* An image is required: a stream of tables only is an error. With strict = false
	 * a header read with a warning only (extraneous bytes) goes on. */
	jpeg_read_header(d, TRUE);
	decoding = 1;
	int iw = (int)d->image_width, ih = (int)d->image_height;
	int whole = 0;
	uint64_t bytes = decoder_bytes(d, &whole);
	if (bytes > cap) {
		jpeg_abort_decompress(d);
		return gpud_task_reject(
			task,
			"jpeg: this %s %d x %d image needs about %llu MiB to decode (%s), over "
			"max_memory_mb = %ld: raise it, or make the image smaller first",
			d->progressive_mode ? "progressive"
			: whole             ? "multi-scan"
					    : "sequential",
			iw, ih, (unsigned long long)((bytes + MIB - 1) / MIB),
			whole ? "its DCT coefficients are kept whole at full size, at any scale"
			      : "rows of its full width",
			s->max_memory_mb);
	}
	int n = choose_scale(iw, ih, s->width, s->height);
	int cmyk = d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
	d->scale_num = (unsigned)n;
	d->scale_denom = 8;
	d->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	jpeg_calc_output_dimensions(d);
	int sw = (int)d->output_width, sh = (int)d->output_height;
	if ((uint64_t)sw * (uint64_t)sh > MAX_PIXELS) {
		jpeg_abort_decompress(d);
		return gpud_task_reject(task,
					"jpeg: an image of %d x %d (decoded at %d/8: %d x %d) is "
					"larger than this stage decodes (%llu pixels)",
					iw, ih, n, sw, sh, (unsigned long long)MAX_PIXELS);
	}
	size_t size = (size_t)sw * (size_t)sh * (cmyk ? 4 : 3);
	if (size > s->pixels_cap) {
		unsigned char *p = realloc(s->pixels, size);
		if (!p) {
			jpeg_abort_decompress(d);
			return gpud_task_fail(task, "jpeg: out of memory for %d x %d pixels", sw,
					      sh);
		}
		s->pixels = p;
		s->pixels_cap = size;
	}
	jpeg_start_decompress(d);
	size_t row = (size_t)sw * (size_t)d->output_components;
	while (d->output_scanline < d->output_height) {
		JSAMPROW r = s->pixels + (size_t)d->output_scanline * row;
		jpeg_read_scanlines(d, &r, 1);
	}
	jpeg_finish_decompress(d);
	if (cmyk)
		cmyk_to_rgb(s->pixels, (size_t)sw * (size_t)sh);
	if (resize(s, sw, sh, task->result.data) < 0)
		return gpud_task_fail(task, "jpeg: out of memory resizing %d x %d to %d x %d", sw,
				      sh, s->width, s->height);
	task->result.size = need;
	return 0;
}

static int decode_member(void *state, struct gpud_task *sub)
{
	return decode(state, sub);
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct jpeg_state *s = state;
	/* A whole sample (the tar generator's `members`): its image decoded, the rest
	 * passed on (sample_stage.h). A JPEG or PNG file never begins as one does. */
	if (gpud_sample_is(task->input, task->input_size))
		return sample_stage_run(task, s->image_member, decode_member, s);
	return decode(s, task);
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct jpeg_state *s = state;
	if (s->made)
		jpeg_destroy_decompress(&s->d);
	taps_free(&s->tx);
	taps_free(&s->ty);
	free(s->pixels);
	free(s->rows);
	free(s->image_member);
	free(s);
	return 0;
}
