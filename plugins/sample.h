/* SPDX-License-Identifier: MIT */
/*
 * Writing a whole sample in the framing gpud/plugin.h describes (GPUD_SAMPLE_MAGIC),
 * for the built-in plugins that make one: the `tar` generator (`members`) and the `jpeg`
 * stage (a sample in, the same sample with its image decoded out). Reading one is
 * plugin.h's gpud_sample_open/next/find, the helpers every plugin has.
 *
 * The writer lays members out one after another into a buffer of `cap` bytes; past the
 * capacity it writes nothing more but goes on counting, so that sample_end says the size
 * the whole sample needs (a generator's item then too large, a stage's result that does
 * not fit). Padding is zeroed: the same sample is the same bytes every time (the
 * journal compares samples of the inputs on --resume).
 */
#ifndef GPUD_PLUGINS_SAMPLE_H
#define GPUD_PLUGINS_SAMPLE_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <gpud/plugin.h>

struct sample_writer {
	unsigned char *base;
	size_t cap;
	size_t end; /* bytes the sample takes so far (written or not) */
	uint32_t count;
	bool over; /* past cap: nothing more is written */
};

static inline size_t sample_align(size_t at, size_t to)
{
	return (at + to - 1) & ~(to - 1);
}

/* Zeroes [from, to) where it lies within the buffer. */
static inline void sample_zero(struct sample_writer *w, size_t from, size_t to)
{
	if (!w->over && to > from && to <= w->cap)
		memset(w->base + from, 0, to - from);
}

/* Starts a sample of key `key` (key_len bytes) in buf. */
static inline void sample_begin(struct sample_writer *w, void *buf, size_t cap, const char *key,
				size_t key_len)
{
	*w = (struct sample_writer){.base = buf, .cap = cap, .end = GPUD_SAMPLE_HEADER + key_len};
	if (w->end > cap) {
		w->over = true;
		return;
	}
	uint32_t h[4] = {GPUD_SAMPLE_MAGIC, 0, (uint32_t)key_len, 0};
	memcpy(w->base, h, sizeof h);
	if (key_len)
		memcpy(w->base + GPUD_SAMPLE_HEADER, key, key_len);
}

/* Adds a member of `size` bytes: its header and name written, the place of its data
 * returned for the caller to fill (NULL once past the capacity). */
static inline void *sample_add(struct sample_writer *w, const char *name, size_t name_len,
			       size_t size)
{
	size_t hdr = sample_align(w->end, 8);
	size_t data = sample_align(hdr + GPUD_SAMPLE_MEMBER_HEADER + name_len, GPUD_SAMPLE_ALIGN);
	size_t end = data + size;
	w->count++;
	if (w->over || end > w->cap || end < data) {
		w->over = true;
		w->end = end;
		return NULL;
	}
	sample_zero(w, w->end, hdr);
	uint32_t h[2] = {(uint32_t)name_len, 0};
	uint64_t len = size;
	memcpy(w->base + hdr, h, sizeof h);
	memcpy(w->base + hdr + 8, &len, sizeof len);
	memcpy(w->base + hdr + GPUD_SAMPLE_MEMBER_HEADER, name, name_len);
	sample_zero(w, hdr + GPUD_SAMPLE_MEMBER_HEADER + name_len, data);
	w->end = end;
	return w->base + data;
}

/* Ends the sample: its member count written; the bytes it takes (more than cap when
 * w->over: nothing usable was written). */
static inline size_t sample_end(struct sample_writer *w)
{
	if (!w->over)
		memcpy(w->base + 4, &w->count, sizeof w->count);
	return w->end;
}

#endif /* GPUD_PLUGINS_SAMPLE_H */
