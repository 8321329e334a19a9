/* SPDX-License-Identifier: MIT */
/* Task names by id: a chained hash table that grows with the names held (names.h). */
#include <stdlib.h>
#include <string.h>

#include <gpud/plugin.h>

#include "util/names.h"

struct task_name {
	struct task_name *next;
	uint64_t id;
	char name[];
};

static size_t slot_of(const struct task_names *m, uint64_t id)
{
	uint64_t x = id * UINT64_C(0x9e3779b97f4a7c15);
	return (size_t)(x >> 32) & (m->nbucket - 1);
}

/* Twice the buckets once they hold as many names: chains stay short. */
static int grow(struct task_names *m)
{
	size_t nb = m->nbucket ? m->nbucket * 2 : 256;
	struct task_name **b = calloc(nb, sizeof *b);
	if (!b)
		return -1;
	struct task_names to = {b, nb, m->n};
	for (size_t i = 0; i < m->nbucket; i++)
		for (struct task_name *e = m->bucket[i], *next; e; e = next) {
			next = e->next;
			size_t s = slot_of(&to, e->id);
			e->next = b[s];
			b[s] = e;
		}
	free(m->bucket);
	*m = to;
	return 0;
}

int names_put(struct task_names *m, uint64_t id, const char *name)
{
	size_t len = strnlen(name, GPUD_NAME_MAX + 1);
	if (len > GPUD_NAME_MAX) {
		len = GPUD_NAME_MAX;
		while (len > 0 && ((unsigned char)name[len] & 0xc0) == 0x80)
			len--; /* not inside a character */
	}
	names_drop(m, id);
	if (m->n >= m->nbucket && grow(m) < 0)
		return -1;
	struct task_name *e = malloc(sizeof *e + len + 1);
	if (!e)
		return -1;
	e->id = id;
	memcpy(e->name, name, len);
	e->name[len] = '\0';
	size_t s = slot_of(m, id);
	e->next = m->bucket[s];
	m->bucket[s] = e;
	m->n++;
	return 0;
}

const char *names_get(const struct task_names *m, uint64_t id)
{
	if (!m->n)
		return NULL;
	for (const struct task_name *e = m->bucket[slot_of(m, id)]; e; e = e->next)
		if (e->id == id)
			return e->name;
	return NULL;
}

void names_drop(struct task_names *m, uint64_t id)
{
	if (!m->n)
		return;
	for (struct task_name **p = &m->bucket[slot_of(m, id)]; *p; p = &(*p)->next)
		if ((*p)->id == id) {
			struct task_name *e = *p;
			*p = e->next;
			free(e);
			m->n--;
			return;
		}
}

void names_free(struct task_names *m)
{
	for (size_t i = 0; i < m->nbucket; i++)
		for (struct task_name *e = m->bucket[i], *next; e; e = next) {
			next = e->next;
			free(e);
		}
	free(m->bucket);
	*m = (struct task_names){0};
}
