/* SPDX-License-Identifier: MIT */
/* The keys of a job file, two kinds:
 * - the keys gpud reads itself, [job] and [ui]: one table, a row per key with its parser,
 *   the field it fills, its bounds and a line saying what it is (as nginx's
 *   ngx_command_t), so the known names, the parsing and the limits cannot drift apart;
 * - the keys a plugin declares (gpud_plugin_keys, ABI 1.2): every other key of its
 *   section is refused with its place in the job file and the nearest declared key. */
#ifndef GPUD_KEYS_H
#define GPUD_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/config.h"

/* How a row's value is read. */
enum cfg_kind {
	CFG_UINT,  /* a whole number from min to max, into an unsigned field of `width` bytes */
	CFG_SIZE,  /* bytes with an optional K, M or G (cfg_parse_size), at most max */
	CFG_REAL,  /* a number from lo (excluded when lo_open) to hi, into a double */
	CFG_BOOL,  /* true/yes/1/on or false/no/0/off, into a bool */
	CFG_ENUM,  /* one of `names`, its value into an int */
	CFG_FLAGS, /* names joined by commas, their values or'ed into an unsigned; a name of
		    * value 0 (none) stands alone */
	CFG_PATH,  /* a path, resolved against the job file's folder (--set: the current one),
		    * into a malloc'd char *; where it was set into the char * at at_off */
	CFG_CUSTOM /* the row's own parser, `set` */
};

/* A value's name, for CFG_ENUM and CFG_FLAGS; a list ends with a NULL name. */
struct cfg_name {
	const char *name;
	unsigned value;
};

/* A value being set. */
struct cfg_val {
	const char *text; /* as written */
	const char *at;   /* "file:line" or "--set ..." */
	const char *base; /* the folder a relative path starts from */
};

struct cfg_key;

/* Reads v into c. Returns 0, or -1 with why ("expected ...", no place) set. */
typedef int cfg_set_fn(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		       size_t whylen);

struct cfg_key {
	const char *section; /* "job" or "ui" */
	const char *name;
	enum cfg_kind kind;
	cfg_set_fn *set;              /* CFG_CUSTOM only */
	size_t off, width;            /* the field: offsetof and sizeof in struct cfg */
	uint64_t min, max;            /* CFG_UINT, CFG_SIZE (min is 0) */
	double lo, hi;                /* CFG_REAL */
	bool lo_open;                 /* CFG_REAL: lo itself is refused */
	const struct cfg_name *names; /* CFG_ENUM, CFG_FLAGS */
	size_t at_off;                /* CFG_PATH: the char * keeping where it was set; 0 none */
	/* The error's "expected ..." for a bad value; NULL for CFG_UINT: "expected a whole
	 * number from MIN to MAX". */
	const char *expect;
	const char *example; /* a value that is accepted */
	const char *doc;     /* what the key does, one line */
};

/* Every key of [job], then every key of [ui], in the order error messages list them. */
extern const struct cfg_key cfg_keys[];
extern const size_t cfg_n_keys;

/* The row of [section] key, or NULL. */
const struct cfg_key *cfg_key_find(const char *section, const char *name);

/* The names of [section]'s keys into out (cap entries with the NULL that ends them), in
 * table order. Returns how many. */
size_t cfg_key_names(const char *section, const char **out, size_t cap);

/* Reads v with k's parser into c. Returns 0, or -1 with why set. */
int cfg_key_set(struct cfg *c, const struct cfg_key *k, const struct cfg_val *v, char *why,
		size_t whylen);

/* Whether `key` is one of `declared` (a name ending in '*' matches by prefix). */
bool keys_declared(const char *key, const char *const *declared);

/* 0 when every key of `s` is declared (or `declared` is NULL: the plugin declared
 * nothing, so anything goes); -1 with one line in err otherwise. `section` is the
 * section's name, `plugin` the plugin's as written in the job file. When --set swapped
 * the plugin, the job file's keys (written for the plugin it replaced) are only
 * warned about on standard error; keys given with --set are held to it. */
int keys_check(const struct cfg_section *s, const char *section, const char *plugin,
	       const char *const *declared, char *err, size_t errlen);

/* One GPU of a list: where its token is in the text, and its index (-1 for a GPU-/MIG-
 * id). */
struct cfg_gpu_tok {
	const char *text;
	size_t len;
	int id;
};
/* A list of GPUs, as `gpus = 0,1` takes it and as `gpus = auto` takes the launcher's
 * CUDA_VISIBLE_DEVICES (`launcher`: GPU-... and MIG-... ids allowed too): indices from 0
 * to 65535 separated by commas, none empty or listed twice, at most CFG_MAX_GPUS. Fills
 * out (CFG_MAX_GPUS entries, pointing into v) and *n. 0, or -1 with why. */
int cfg_gpu_list(const char *v, bool launcher, struct cfg_gpu_tok *out, size_t *n, char *why,
		 size_t whylen);
#endif
