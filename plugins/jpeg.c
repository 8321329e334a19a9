/* SPDX-License-Identifier: MIT */
/*
 * Worker `jpeg`, made to run as a CPU stage ([stage.NAME] plugin = jpeg): a task's
 * bytes are a JPEG (or PNG) file, its result the image resized as the job says, as
 * `output = uint8` pixels (height x width x 3 RGB, row after row: C order, as
 * numpy.frombuffer(r, numpy.uint8).reshape(height, width, 3) reads it) or as
 * `output = float32` (3 x height x width, channel after channel, (x / 255 - mean) /
 * std in float32 as torchvision's ToTensor then Normalize make it).
 *
 * The size: `height` and `width` (the image resized to exactly that, the aspect ratio
 * not kept), or `resize = N` (its shorter side to N, the other int(N x long / short),
 * as torchvision's Resize(N)); then `crop = M`, an M x M centre crop (torchvision's
 * CenterCrop: top = round((h - M) / 2), halves to even as Python rounds).
 *
 * `mode = exact` (the default) decodes the whole image as Pillow does (libjpeg's
 * defaults: the accurate integer DCT, fancy upsampling, no DCT scaling) and resizes
 * with Pillow's arithmetic for `filter` (jpeg_resample.c): the result is
 * Image.open(f).convert("RGB").resize(size, filter) (then crop) of Pillow on the same
 * libjpeg, pixel for pixel. `mode = fast` lets libjpeg decode at the smallest of its
 * DCT scales 1/8, 1/4 and 1/2 whose image still covers the size (else whole), which
 * skips most of the work for a large photo made small, then resizes the same way: up
 * to tens of grey levels from Pillow's pixels where the image has fine detail.
 *
 * Grayscale images come out as RGB (three equal channels), CMYK and YCCK ones as
 * Pillow's convert("RGB") makes them from the decoder's (inverted, Adobe) values. A PNG
 * (known by its signature) is decoded by libpng (jpeg_png.c) where the build has it.
 * A file the decoder cannot read fails its task alone with the decoder's message,
 * never retried (gpud_task_reject); so does a damaged JPEG it could half read (its
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
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h> /* jpeglib.h needs FILE */
#include <stdlib.h>
#include <string.h>

#include <jerror.h>
#include <jpeglib.h>

#include <gpud/plugin.h>

#include "jpeg_image.h"
#include "sample_stage.h"

GPUD_PLUGIN("worker", "jpeg", "1.1");
GPUD_PLUGIN_DESCRIPTION("CPU stage: JPEG or PNG bytes to RGB pixels resized as Pillow "
			"resizes (uint8 HWC or normalised float32 CHW)");
GPUD_PLUGIN_KEYS("height", "width", "resize", "crop", "mode", "filter", "output", "mean", "std",
		 "strict", "max_memory_mb", "image_member");

/* The largest image decoded, after DCT scaling: 1 GiB of RGB pixels. */
#define MAX_PIXELS (UINT64_C(1) << 28)
#define MAX_SIDE 16384
/* The most a side may have once resized (before a crop). */
#define MAX_RESIZED (1 << 20)
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

static const char *const filter_names[] = {
	[RESAMPLE_NEAREST] = "nearest",   [RESAMPLE_BOX] = "box",
	[RESAMPLE_BILINEAR] = "bilinear", [RESAMPLE_HAMMING] = "hamming",
	[RESAMPLE_BICUBIC] = "bicubic",   [RESAMPLE_LANCZOS] = "lanczos",
};

struct jpeg_state {
	struct jpeg_decompress_struct d; /* made by setup, reused by every task */
	struct jpeg_errors errors;
	int made;
	int height, width; /* an exact size, or 0 */
	int resize;        /* the shorter side's, or 0 */
	int crop;          /* a centre crop's side, or 0 */
	int fast;          /* mode = fast: DCT scaling */
	enum resample_filter filter;
	int float32;       /* output = float32 */
	float lut[3][256]; /* float32: each channel's value of each level */
	int strict;
	long max_memory_mb;
	char *image_member;    /* a whole sample's member to decode (sample_stage.h), or NULL */
	unsigned char *pixels; /* the decoded (in fast mode, DCT-scaled) image */
	size_t pixels_cap;
	unsigned char *rgb; /* float32: the resized pixels before they are made floats */
	size_t rgb_cap;
	struct resampler rs;
};

/* Where the pixels out come from, for an iw x ih image: resized to rw x rh, of which
 * the window at (x0, y0) of w x h. */
struct geometry {
	int rw, rh, x0, y0, w, h;
};

/* Python's round() of n / 2: halves to even. */
static int half_to_even(int n)
{
	int q = n / 2;
	return n % 2 == 0 || q % 2 == 0 ? q : q + 1;
}

/* The geometry for an iw x ih image; 0, or -1 with `why` saying what does not fit. */
static int geometry_of(const struct jpeg_state *s, int iw, int ih, struct geometry *g, char *why,
		       size_t len)
{
	g->rw = iw;
	g->rh = ih;
	if (s->width) {
		g->rw = s->width;
		g->rh = s->height;
	} else if (s->resize) {
		int portrait = iw <= ih;
		int shorter = portrait ? iw : ih, longer = portrait ? ih : iw;
		double other = (double)((int64_t)s->resize * longer) / shorter;
		if (other > MAX_RESIZED) {
			snprintf(why, len,
				 "resize = %d makes this %d x %d image over %d pixels a side",
				 s->resize, iw, ih, MAX_RESIZED);
			return -1;
		}
		g->rw = portrait ? s->resize : (int)other;
		g->rh = portrait ? (int)other : s->resize;
	}
	g->x0 = g->y0 = 0;
	g->w = g->rw;
	g->h = g->rh;
	if (s->crop) {
		if (s->crop > g->rw || s->crop > g->rh) {
			int n = snprintf(why, len, "crop = %d is larger than this %d x %d image",
					 s->crop, iw, ih);
			if (n >= 0 && (size_t)n < len && (g->rw != iw || g->rh != ih))
				snprintf(why + n, len - (size_t)n, " resized (%d x %d)", g->rw,
					 g->rh);
			return -1;
		}
		g->x0 = half_to_even(g->rw - s->crop);
		g->y0 = half_to_even(g->rh - s->crop);
		g->w = g->h = s->crop;
	}
	if ((uint64_t)g->w * (uint64_t)g->h > MAX_PIXELS) {
		snprintf(why, len, "%d x %d pixels out is over this stage's %llu", g->w, g->h,
			 (unsigned long long)MAX_PIXELS);
		return -1;
	}
	return 0;
}

static size_t out_bytes(const struct jpeg_state *s, int w, int h)
{
	return (size_t)w * (size_t)h * 3 * (s->float32 ? sizeof(float) : 1);
}

/* Refused where the pixels out would not fit the result; -1 after rejecting. */
static int check_room(const struct jpeg_state *s, struct gpud_task *task, int w, int h)
{
	size_t need = out_bytes(s, w, h);
	if (need <= task->result.capacity)
		return 0;
	return gpud_task_reject(task,
				"jpeg: the pixels of %d x %d x 3 %s take %zu bytes, over "
				"max_result_bytes (%zu): raise [job] max_result_bytes "
				"(and max_task_bytes, the next stage's input)",
				h, w, s->float32 ? "float32" : "uint8", need,
				task->result.capacity);
}

/* The smallest DCT scale n/8 whose image covers the target: n of 1, 2, 4 or 8 only.
 * libjpeg-turbo's SIMD inverse DCTs are the 8x8 one and the reduced 4x4 and 2x2 (1x1
 * is the DC alone); 3/8, 5/8, 6/8 and 7/8 are scalar C, slower than the whole decode
 * (a 500 x 375 photo to 224 at 5/8 measured 7% fewer images/s than at 8/8). */
static int choose_scale(int iw, int ih, int w, int h)
{
	for (int n = 1; n < 8; n *= 2)
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

static int parse_size(const struct gpud_args *args, const char *key, int *out,
		      struct gpud_error *err)
{
	long v;
	if (gpud_arg_parse_long(args, key, 0, &v, err) < 0)
		return -1;
	if (gpud_arg(args, key, NULL) && (v < 1 || v > MAX_SIDE))
		return gpud_fail(err, "jpeg: %s = %ld: expected 1 to %d", key, v, MAX_SIDE);
	*out = (int)v;
	return 0;
}

/* `key` = one of `names` (n of them): its index, or -1 with `err` listing them. */
static int parse_choice(const struct gpud_args *args, const char *key, const char *fallback,
			const char *const *names, int n, int *out, struct gpud_error *err)
{
	const char *v = gpud_arg(args, key, fallback);
	for (int i = 0; i < n; i++)
		if (strcmp(v, names[i]) == 0) {
			*out = i;
			return 0;
		}
	char list[160] = "";
	for (int i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s",
			 i ? (i == n - 1 ? " or " : ", ") : "", names[i]);
	return gpud_fail(err, "jpeg: %s = '%s': expected %s", key, v, list);
}

/* A list of three numbers ("0.485,0.456,0.406"), finite; above 0 where `positive`. */
static int parse_three(const struct gpud_args *args, const char *key, double fallback, int positive,
		       float out[3], struct gpud_error *err)
{
	const char *v = gpud_arg(args, key, NULL);
	if (!v) {
		out[0] = out[1] = out[2] = (float)fallback;
		return 0;
	}
	const char *p = v;
	for (int i = 0; i < 3; i++) {
		char *end;
		while (*p == ' ' || (i == 0 && *p == '['))
			p++;
		double x = strtod(p, &end);
		if (end == p || !isfinite(x) || (positive && !(x > 0)))
			goto bad;
		out[i] = (float)x;
		p = end;
		while (*p == ' ')
			p++;
		if (i < 2 && *p++ != ',')
			goto bad;
	}
	if (*p == ']')
		p++;
	while (*p == ' ')
		p++;
	if (*p == '\0')
		return 0;
bad:
	return gpud_fail(err,
			 "jpeg: %s = '%s': expected three %snumbers, one a channel "
			 "(R,G,B), in 0..1 units as torchvision's Normalize takes them",
			 key, v, positive ? "positive " : "");
}

static int parse_keys(struct jpeg_state *s, const struct gpud_args *args, struct gpud_error *err)
{
	static const char *const modes[] = {"exact", "fast"};
	static const char *const outputs[] = {"uint8", "float32"};
	int filter, fast, float32;
	if (parse_size(args, "height", &s->height, err) < 0 ||
	    parse_size(args, "width", &s->width, err) < 0 ||
	    parse_size(args, "resize", &s->resize, err) < 0 ||
	    parse_size(args, "crop", &s->crop, err) < 0 ||
	    parse_choice(args, "mode", "exact", modes, 2, &fast, err) < 0 ||
	    parse_choice(args, "filter", "bilinear", filter_names,
			 (int)(sizeof filter_names / sizeof *filter_names), &filter, err) < 0 ||
	    parse_choice(args, "output", "uint8", outputs, 2, &float32, err) < 0)
		return -1;
	s->fast = fast;
	s->filter = (enum resample_filter)filter;
	s->float32 = float32;
	if (!s->height != !s->width)
		return gpud_fail(err,
				 "jpeg: %s is required with %s (the image resized to exactly "
				 "height x width)",
				 s->height ? "width" : "height", s->height ? "height" : "width");
	if (s->height && s->resize)
		return gpud_fail(err,
				 "jpeg: resize = %d and height/width: give one (resize "
				 "keeps the aspect ratio, height and width do not)",
				 s->resize);
	if (!s->height && !s->resize && !s->crop)
		return gpud_fail(err,
				 "jpeg: height is required (the size out: height and "
				 "width, or resize = N for the shorter side, and/or crop = M)");
	float mean[3], std[3];
	if (parse_three(args, "mean", 0, 0, mean, err) < 0 ||
	    parse_three(args, "std", 1, 1, std, err) < 0)
		return -1;
	if (!float32 && (gpud_arg(args, "mean", NULL) || gpud_arg(args, "std", NULL)))
		return gpud_fail(err, "jpeg: mean and std need output = float32 (uint8 pixels "
				      "are not normalised)");
	/* torchvision's arithmetic in float32: x / 255, then (v - mean) / std. */
	for (int c = 0; c < 3; c++)
		for (int v = 0; v < 256; v++) {
			float x = (float)v / 255.0f;
			s->lut[c][v] = (x - mean[c]) / std[c];
		}
	return 0;
}

GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err)
{
	struct jpeg_state *s = calloc(1, sizeof *s);
	if (!s)
		return gpud_fail(err, "jpeg: out of memory");
	const char *strict = gpud_arg(info->args, "strict", "true");
	if (parse_keys(s, info->args, err) < 0 ||
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
 * RGB in place, as Pillow's convert("RGB") makes them: its CMYK is 255 minus these, and
 * r = (255 - k) - (c x (255 - k)) / 255 with its rounding. */
static void cmyk_to_rgb(unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int nk = p[4 * i + 3];
		for (int c = 0; c < 3; c++) {
			int t = (255 - p[4 * i + c]) * nk + 128;
			int v = nk - (((t >> 8) + t) >> 8);
			p[3 * i + c] = (unsigned char)(v < 0 ? 0 : v);
		}
	}
}

static int grow(unsigned char **p, size_t *cap, size_t need)
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

/* The JPEG of `task` decoded into s->pixels (*sw x *sh, RGB) and its geometry set;
 * -1 after gpud_task_reject/fail. A libjpeg error (or, when strict, a warning) jumps
 * back here: the decoder is reset for the next task and the task rejected with its
 * message, never retried (its input will not change). */
static int decode_jpeg(struct jpeg_state *s, struct gpud_task *task, struct geometry *g, int *sw,
		       int *sh)
{
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
	 * a header read with a warning only (extraneous bytes) goes on. The header sets
	 * libjpeg's defaults, Pillow's: JDCT_ISLOW, fancy upsampling, scale 1/1. */
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
	char why[200];
	if (geometry_of(s, iw, ih, g, why, sizeof why) < 0) {
		jpeg_abort_decompress(d);
		return gpud_task_reject(task, "jpeg: %s", why);
	}
	if (check_room(s, task, g->w, g->h) < 0) {
		jpeg_abort_decompress(d);
		return -1;
	}
	int n = s->fast ? choose_scale(iw, ih, g->rw, g->rh) : 8;
	int cmyk = d->jpeg_color_space == JCS_CMYK || d->jpeg_color_space == JCS_YCCK;
	d->scale_num = (unsigned)n;
	d->scale_denom = 8;
	d->out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
	jpeg_calc_output_dimensions(d);
	*sw = (int)d->output_width;
	*sh = (int)d->output_height;
	if ((uint64_t)*sw * (uint64_t)*sh > MAX_PIXELS) {
		jpeg_abort_decompress(d);
		return gpud_task_reject(task,
					"jpeg: an image of %d x %d (decoded at %d/8: %d x %d) is "
					"larger than this stage decodes (%llu pixels)",
					iw, ih, n, *sw, *sh, (unsigned long long)MAX_PIXELS);
	}
	if (grow(&s->pixels, &s->pixels_cap, (size_t)*sw * (size_t)*sh * (cmyk ? 4 : 3)) < 0) {
		jpeg_abort_decompress(d);
		return gpud_task_fail(task, "jpeg: out of memory for %d x %d pixels", *sw, *sh);
	}
	jpeg_start_decompress(d);
	size_t row = (size_t)*sw * (size_t)d->output_components;
	while (d->output_scanline < d->output_height) {
		JSAMPROW r = s->pixels + (size_t)d->output_scanline * row;
		jpeg_read_scanlines(d, &r, 1);
	}
	jpeg_finish_decompress(d);
	if (cmyk)
		cmyk_to_rgb(s->pixels, (size_t)*sw * (size_t)*sh);
	return 0;
}

static int decode_png(struct jpeg_state *s, struct gpud_task *task, struct geometry *g, int *sw,
		      int *sh)
{
	char why[300];
	int rc = png_decode(task->input, task->input_size, (uint64_t)s->max_memory_mb * MIB,
			    MAX_PIXELS, &s->pixels, &s->pixels_cap, sw, sh, why, sizeof why);
	if (rc == -2)
		return gpud_task_fail(task, "jpeg: out of memory decoding a PNG");
	if (rc < 0)
		return gpud_task_reject(task, "jpeg: cannot decode this PNG (%zu bytes): %s",
					task->input_size, why);
	if (geometry_of(s, *sw, *sh, g, why, sizeof why) < 0)
		return gpud_task_reject(task, "jpeg: %s", why);
	return check_room(s, task, g->w, g->h);
}

/* The task's image decoded, resized and written as its result; -1 after
 * gpud_task_reject/fail. */
static int process(struct jpeg_state *s, struct gpud_task *task)
{
	/* A size known before decoding is checked before decoding. */
	if (s->crop && check_room(s, task, s->crop, s->crop) < 0)
		return -1;
	if (!s->crop && s->width && check_room(s, task, s->width, s->height) < 0)
		return -1;
	struct geometry g;
	int sw, sh;
	int rc = png_sniff(task->input, task->input_size) ? decode_png(s, task, &g, &sw, &sh)
							  : decode_jpeg(s, task, &g, &sw, &sh);
	if (rc < 0)
		return -1;
	unsigned char *out = task->result.data;
	size_t n = (size_t)g.w * (size_t)g.h;
	if (s->float32) {
		if (grow(&s->rgb, &s->rgb_cap, n * 3) < 0)
			return gpud_task_fail(task, "jpeg: out of memory");
		out = s->rgb;
	}
	if (resample_rgb(&s->rs, s->filter, s->pixels, sw, sh, g.rw, g.rh, g.x0, g.y0, g.w, g.h,
			 out) < 0)
		return gpud_task_fail(task, "jpeg: out of memory resizing %d x %d to %d x %d", sw,
				      sh, g.rw, g.rh);
	if (s->float32) {
		/* Channels first: the result need not be aligned for float. */
		unsigned char *dst = task->result.data;
		for (int c = 0; c < 3; c++)
			for (size_t i = 0; i < n; i++, dst += sizeof(float))
				memcpy(dst, &s->lut[c][out[3 * i + (size_t)c]], sizeof(float));
	}
	task->result.size = out_bytes(s, g.w, g.h);
	return 0;
}

static int decode_member(void *state, struct gpud_task *sub)
{
	return process(state, sub);
}

GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task)
{
	struct jpeg_state *s = state;
	/* A whole sample (the tar generator's `members`): its image decoded, the rest
	 * passed on (sample_stage.h). A JPEG or PNG file never begins as one does. */
	if (gpud_sample_is(task->input, task->input_size))
		return sample_stage_run(task, s->image_member, decode_member, s);
	return process(s, task);
}

GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	struct jpeg_state *s = state;
	if (s->made)
		jpeg_destroy_decompress(&s->d);
	resample_free(&s->rs);
	free(s->pixels);
	free(s->rgb);
	free(s->image_member);
	free(s);
	return 0;
}
