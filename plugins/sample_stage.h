/* SPDX-License-Identifier: MIT */
/*
 * A stage that decodes one member of a whole sample (gpud/plugin.h, GPUD_SAMPLE_MAGIC)
 * and passes the others on: the `jpeg` stage given a sample instead of an image file.
 *
 * The image member is the one named by the stage's `image_member` key, else the first
 * whose name is jpg (or ends in .jpg: "left.jpg"), else the first jpeg, else the first
 * png: a sample's photo is its jpg, a png beside it (a depth map, a mask) is passed on,
 * wherever it sorts in the shard. The result
 * is the same sample (key, members, order) with that member's bytes replaced by what
 * the stage's own decode makes of them, written in place in the result (no copy of the
 * pixels); every other member's bytes are copied as they came. The sample is the
 * generator's, hostile: a damaged one, or one without its image member, fails its task
 * for good (gpud_task_reject), naming what is wrong.
 */
#ifndef GPUD_PLUGINS_SAMPLE_STAGE_H
#define GPUD_PLUGINS_SAMPLE_STAGE_H

#include <stdio.h>
#include <string.h>

#include <gpud/plugin.h>

#include "sample.h"

/* Member name n (len bytes) as an image by its extension: 1 jpg, 2 jpeg, 3 png (the
 * lower taken first), 0 not an image. */
static inline int sample_stage_image_rank(const char *n, size_t len)
{
	static const char *const ext[] = {"jpg", "jpeg", "png"};
	for (size_t i = 0; i < sizeof ext / sizeof *ext; i++) {
		size_t e = strlen(ext[i]);
		if (len == e && !memcmp(n, ext[i], e))
			return (int)i + 1;
		if (len > e && n[len - e - 1] == '.' && !memcmp(n + len - e, ext[i], e))
			return (int)i + 1;
	}
	return 0;
}

/* The task's failure message, naming the sample and member it came from. */
static inline void sample_stage_name_it(struct gpud_task *task, const struct gpud_sample *s,
					const struct gpud_sample_member *m)
{
	if (!task->error)
		return;
	char was[sizeof task->error->message];
	memcpy(was, task->error->message, sizeof was);
	snprintf(task->error->message, sizeof task->error->message,
		 "%.700s (sample '%.*s', member '%.*s')", was,
		 (int)(s->key_len > 200 ? 200 : s->key_len), s->key,
		 (int)(m->name_len > 64 ? 64 : m->name_len), m->name);
}

/* Task `task`, whose input is a sample: its image member decoded by decode(state, sub),
 * sub being a task whose input is that member's bytes and whose result is its place in
 * task's result. 0, or -1 with task failed (decode's own failure kept, its message
 * naming the sample and member). `image_member` NULL or "": the first image by name. */
static inline int sample_stage_run(struct gpud_task *task, const char *image_member,
				   int (*decode)(void *state, struct gpud_task *sub), void *state)
{
	struct gpud_sample s, walk;
	struct gpud_sample_member m, img = {0};
	uint32_t at = UINT32_MAX;
	int rc;
	if (gpud_sample_open(&s, task->input, task->input_size) < 0)
		return gpud_task_reject(task,
					"sample: a damaged sample (%zu bytes): its key "
					"runs past its end",
					task->input_size);
	walk = s;
	size_t want = image_member ? strlen(image_member) : 0;
	int best = 4; /* the image rank of the member taken (sample_stage_image_rank) */
	for (uint32_t i = 0; (rc = gpud_sample_next(&walk, &m)) == 1; i++) {
		int rank =
			want ? (m.name_len == want && !memcmp(m.name, image_member, want) ? 1 : 0)
			     : sample_stage_image_rank(m.name, m.name_len);
		if (rank && rank < best) {
			best = rank;
			at = i;
			img = m;
		}
	}
	if (rc < 0)
		return gpud_task_reject(task,
					"sample: sample '%.*s' is damaged (%zu bytes): a member's "
					"length runs past its end",
					(int)(s.key_len > 200 ? 200 : s.key_len), s.key,
					task->input_size);
	if (at == UINT32_MAX)
		return gpud_task_reject(task, "sample: sample '%.*s' has no %s%s%s member (of %u)",
					(int)(s.key_len > 200 ? 200 : s.key_len), s.key,
					want ? "'" : "image (jpg, jpeg, png)",
					want ? image_member : "", want ? "'" : "", s.count);
	/* The members after the image take at most this much of the result's end. */
	size_t tail = 0;
	walk = s;
	for (uint32_t i = 0; gpud_sample_next(&walk, &m) == 1; i++)
		if (i > at)
			tail += 8 + GPUD_SAMPLE_MEMBER_HEADER + m.name_len + GPUD_SAMPLE_ALIGN +
				m.size;
	struct sample_writer w;
	sample_begin(&w, task->result.data, task->result.capacity, s.key, s.key_len);
	walk = s;
	for (uint32_t i = 0; gpud_sample_next(&walk, &m) == 1; i++) {
		if (i != at) {
			void *p = sample_add(&w, m.name, m.name_len, m.size);
			if (p)
				memcpy(p, m.data, m.size);
			continue;
		}
		/* The image: decoded straight into its place, then its size written. */
		size_t hdr = sample_align(w.end, 8);
		size_t data = sample_align(hdr + GPUD_SAMPLE_MEMBER_HEADER + m.name_len,
					   GPUD_SAMPLE_ALIGN);
		if (w.over || data + tail > w.cap)
			return gpud_task_reject(
				task,
				"sample: sample '%.*s' (%zu bytes) leaves no room for "
				"its decoded '%.*s' within max_result_bytes (%zu): "
				"raise [job] max_result_bytes",
				(int)(s.key_len > 200 ? 200 : s.key_len), s.key, task->input_size,
				(int)m.name_len, m.name, task->result.capacity);
		struct gpud_task sub = *task;
		sub.input = img.data;
		sub.input_size = img.size;
		sub.result = (struct gpud_buf){w.base + data, 0, w.cap - data - tail};
		sub.failed = 0;
		if (decode(state, &sub) < 0 || sub.failed) {
			task->failed = sub.failed ? sub.failed : GPUD_TASK_FAILED;
			sample_stage_name_it(task, &s, &m);
			return -1;
		}
		if (sub.result.size > sub.result.capacity)
			return gpud_task_fail(task,
					      "sample: the decoded member is larger than its room");
		if (!sample_add(&w, m.name, m.name_len, sub.result.size))
			return gpud_task_fail(task, "sample: the decoded member does not fit");
	}
	size_t size = sample_end(&w);
	if (w.over)
		return gpud_task_reject(task,
					"sample: sample '%.*s' takes %zu bytes decoded, over "
					"max_result_bytes (%zu): raise [job] max_result_bytes",
					(int)(s.key_len > 200 ? 200 : s.key_len), s.key, size,
					task->result.capacity);
	task->result.size = size;
	return 0;
}

#endif /* GPUD_PLUGINS_SAMPLE_STAGE_H */
