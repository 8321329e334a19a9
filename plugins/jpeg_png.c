/* SPDX-License-Identifier: MIT */
/*
 * The jpeg stage's PNG decoder (libpng), giving the pixels Pillow's
 * Image.open(f).convert("RGB") gives: grey replicated to three channels (1, 2 and 4
 * bits scaled to 0..255), a palette looked up, alpha dropped without compositing (a
 * transparent pixel keeps its colour), 16-bit samples cut to their high byte, except
 * 16-bit grey without alpha, which Pillow opens as 32-bit integers and clips at 255
 * when it makes them RGB (any value over 255 is white): kept so, since the point is
 * Pillow's pixels. Interlaced (Adam7) files are read whole. libpng's warnings (an
 * ancillary chunk it skips) are not failures; its errors (a bad CRC in a critical
 * chunk, data that ends early) fail the image with libpng's message.
 */
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jpeg_image.h"

static const unsigned char signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

int png_sniff(const void *data, size_t size)
{
	return size >= sizeof signature && memcmp(data, signature, sizeof signature) == 0;
}

#ifndef GPUD_HAVE_PNG

int png_decode(const void *data, size_t size, uint64_t max_bytes, uint64_t max_pixels,
	       unsigned char **pixels, size_t *cap, int *w, int *h, char *message, size_t len)
{
	(void)data, (void)size, (void)max_bytes, (void)max_pixels, (void)pixels, (void)cap;
	(void)w, (void)h;
	snprintf(message, len,
		 "a PNG, and this jpeg stage was built without libpng (libpng-dev): it "
		 "decodes JPEG only");
	return -1;
}

#else

#include <png.h>

struct png_read {
	const unsigned char *data;
	size_t size, at;
	char *message;
	size_t len;
};

static void on_error(png_structp png, png_const_charp msg)
{
	struct png_read *r = png_get_error_ptr(png);
	snprintf(r->message, r->len, "%s", msg);
	png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg)
{
	(void)png, (void)msg;
}

static void on_read(png_structp png, png_bytep out, size_t n)
{
	struct png_read *r = png_get_io_ptr(png);
	if (n > r->size - r->at)
		png_error(png, "the file ends early (truncated)");
	memcpy(out, r->data + r->at, n);
	r->at += n;
}

/* Rows as libpng gave them (`channels` samples of `depth` bits, 8 or 16) made RGB as
 * Pillow's convert("RGB") makes them. */
static void to_rgb(const unsigned char *raw, size_t rowbytes, int w, int h, int channels, int depth,
		   unsigned char *out)
{
	for (int y = 0; y < h; y++) {
		const unsigned char *in = raw + (size_t)y * rowbytes;
		unsigned char *o = out + (size_t)y * (size_t)w * 3;
		for (int x = 0; x < w; x++, o += 3) {
			if (depth == 16) { /* grey alone: Pillow's "I" made RGB, clipped */
				unsigned v = (unsigned)in[2 * x] << 8 | in[2 * x + 1];
				o[0] = o[1] = o[2] = (unsigned char)(v > 255 ? 255 : v);
			} else if (channels <= 2) {
				o[0] = o[1] = o[2] = in[(size_t)x * (size_t)channels];
			} else {
				memcpy(o, in + (size_t)x * (size_t)channels, 3);
			}
		}
	}
}

int png_decode(const void *data, size_t size, uint64_t max_bytes, uint64_t max_pixels,
	       unsigned char **pixels, size_t *cap, int *w, int *h, char *message, size_t len)
{
	struct png_read r = {data, size, 0, message, len};
	png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r, on_error, on_warning);
	png_infop info = png ? png_create_info_struct(png) : NULL;
	unsigned char *volatile raw = NULL;
	png_bytep *volatile rows = NULL;
	int rc = -2;
	if (!info)
		goto done;
	if (setjmp(png_jmpbuf(png))) {
		rc = -1;
		goto done;
	}
	png_set_read_fn(png, &r, on_read);
	png_read_info(png, info);
	png_uint_32 width, height;
	int depth, type, interlace;
	png_get_IHDR(png, info, &width, &height, &depth, &type, &interlace, NULL, NULL);
	if ((uint64_t)width * height > max_pixels) {
		snprintf(message, len,
			 "this %u x %u PNG is larger than this stage decodes (%llu pixels)",
			 (unsigned)width, (unsigned)height, (unsigned long long)max_pixels);
		rc = -1;
		goto done;
	}
	int grey16 = depth == 16 && type == PNG_COLOR_TYPE_GRAY;
	if (type == PNG_COLOR_TYPE_PALETTE)
		png_set_palette_to_rgb(png);
	if (type == PNG_COLOR_TYPE_GRAY && depth < 8)
		png_set_expand_gray_1_2_4_to_8(png);
	if (depth == 16 && !grey16)
		png_set_strip_16(png); /* the high byte, as Pillow's ";16B" modes take it */
	png_set_interlace_handling(png);
	png_read_update_info(png, info);
	size_t rowbytes = png_get_rowbytes(png, info);
	int channels = png_get_channels(png, info), out_depth = png_get_bit_depth(png, info);
	/* 8-bit RGB is read straight into the pixels; anything else through its own
	 * rows first. */
	int direct = channels == 3 && out_depth == 8;
	uint64_t need = (direct ? 0 : (uint64_t)rowbytes * height) + (uint64_t)width * height * 3;
	if (need > max_bytes) {
		snprintf(message, len,
			 "this %u x %u PNG needs about %llu MiB to decode, over max_memory_mb = "
			 "%llu",
			 (unsigned)width, (unsigned)height,
			 (unsigned long long)((need + (1 << 20) - 1) >> 20),
			 (unsigned long long)(max_bytes >> 20));
		rc = -1;
		goto done;
	}
	if (channels < 1 || channels > 4 || (out_depth != 8 && !(out_depth == 16 && grey16)) ||
	    (grey16 && channels != 1)) {
		snprintf(message, len,
			 "a PNG of %d channels of %d bits, which this stage "
			 "does not convert",
			 channels, out_depth);
		rc = -1;
		goto done;
	}
	rows = malloc(sizeof *rows * height);
	size_t out = (size_t)width * height * 3;
	if (!rows || (!direct && !(raw = malloc(rowbytes * height))))
		goto done; /* -2 */
	if (out > *cap) {
		unsigned char *p = realloc(*pixels, out);
		if (!p)
			goto done;
		*pixels = p;
		*cap = out;
	}
	unsigned char *into = direct ? *pixels : raw;
	for (png_uint_32 y = 0; y < height; y++)
		rows[y] = into + (size_t)y * rowbytes;
	png_read_image(png, rows);
	if (!direct)
		to_rgb(raw, rowbytes, (int)width, (int)height, channels, out_depth, *pixels);
	*w = (int)width;
	*h = (int)height;
	rc = 0;
done:
	if (rc == -2)
		snprintf(message, len, "out of memory");
	png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
	free(rows);
	free(raw);
	return rc;
}

#endif
