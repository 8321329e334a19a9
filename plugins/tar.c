/* SPDX-License-Identifier: MIT */
/*
 * Generator `tar`: the samples of WebDataset-style shards, read with libarchive.
 *
 * `path` is one glob (braces allowed: shards/{a,b}.tar, shards/train-*.tar.zst) naming
 * .tar, .tar.gz or .tar.zst shards (any format and filter libarchive reads), taken in
 * the glob's sorted order. A sample is a run of consecutive members whose names share a
 * key: the member's path up to the first dot of its file name (WebDataset's rule:
 * a/0001.jpg and a/0001.cls are sample a/0001). A task's bytes are its sample's member
 * whose extension (after that dot) is `member` (default jpg); with `members` (a list,
 * `jpg,cls`, or `*` for every member that is a file) they are the whole sample, framed
 * as gpud/plugin.h says (GPUD_SAMPLE_MAGIC: the key, then each member's name and bytes,
 * in the list's order or, for `*`, the shard's), written by sample.h. Each task's name
 * (gpud_generator_name, ABI 1.9) is its sample's key, which the sink gets in its events.
 *
 * open() reads every shard's headers once (a first pass: the data of a .tar is seeked
 * over, a compressed shard is decompressed), which gives the total, the task ids (in
 * shard order, then member order) and the keys; `keys_out = FILE` writes them there,
 * one "id<TAB>key<TAB>shard" line per task (a tab, newline, CR or backslash in a key or
 * shard written \t, \n, \r, \\), so a sink's outputs (by task id) can be joined with
 * the samples' keys. next() then reads the shards again, in order.
 *
 * Members: a regular file; a hard link (GNU tar's for a file's further names) gives the
 * bytes of the member it names, read again from there; a symbolic link, a folder or a
 * device that is a sample's `member` fails that sample saying so (links are never
 * followed: one may point anywhere); other such entries are passed over.
 *
 * Failures, each one task's outcome (GPUD_GENERATOR_TASK_FAILED), the stream going on:
 * a sample without the member (naming key and shard); a shard libarchive cannot read
 * at all (empty, not a tar, its compression's header cut short): one task, naming it
 * and why; a damaged or truncated shard: the samples before the damage are tasks, the
 * damage is one more task that fails with libarchive's message naming the shard (the
 * sample it cut short, if any, is that task), and the next shard follows. A shard that
 * is not a regular file (a FIFO, a device) refuses the job.
 *
 * A shard changed during the run: each shard's device, inode, size, mtime and ctime are
 * taken when it is listed, and looked at again (the open file and its path) when it is
 * opened for the second pass and after each block libarchive reads of it (64 KiB: one
 * fstat and one stat a block, not a sample); the header of each member read is compared
 * with the listing too (name, size, position). A difference fails the task being read
 * and every later one of the shard, naming it and what changed; tasks handed out before
 * stay as they are (their bytes were read before the change). So no task is ok with
 * bytes of another file than the one listed (but for a rewrite of the same size and
 * layout within the kernel file clock's tick of the shard's last change before it was
 * listed).
 */
#define _GNU_SOURCE
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gpud/plugin.h>

#include "check.h"
#include "sample.h"

GPUD_PLUGIN("generator", "tar", "1.0");
GPUD_PLUGIN_DESCRIPTION(
	"the samples of WebDataset tar shards (path: a glob), one member each or whole (members)");
GPUD_PLUGIN_KEYS("path", "member", "members", "keys_out");

/* One task: a sample, or the damage of a shard (damage != NULL). */
struct sample {
	char *key;
	char *damage;        /* the task's failure message: a damaged or unreadable shard's, a
				link member's */
	uint32_t shard;      /* index into tar->shards */
	uint64_t first;      /* the shard's entry (header) index of its first member */
	uint64_t n_entries;  /* members (and other entries) it spans */
	int64_t member;      /* entry index of the member that is the task's bytes, or -1 */
	int64_t member_size; /* that member's size in bytes */
	/* Where its bytes are: the member's own entry, or for a hard link the entry of the
	 * member it names (earlier in the shard); that entry's header position and a hash
	 * of its name, compared when it is read again. */
	int64_t data;
	int64_t data_pos;
	uint64_t data_name;
	/* With `members`: its members taken, tar->parts[part0 .. part0 + n_parts). */
	uint32_t n_parts;
	size_t part0;
};

/* A member of a sample taken whole (`members`): its extension and where its bytes are,
 * as for a sample's one member above. */
struct part {
	char *name;
	int64_t size, data, data_pos;
	uint64_t data_name;
};

/* A part being read: where its bytes go in the item. */
struct slot {
	int64_t data;
	void *dest;
	const struct part *p;
};

/* A shard as the first pass found it: what says that it is still that file. */
struct shard_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
};

/* The file under the archive being read: libarchive reads it through feed_read, so in
 * the second pass each block read is followed by a look at the shard (shard_changed):
 * bytes read after a change are never taken for the listed sample's. */
struct feed {
	int fd;
	const struct tar *watch; /* the tar, in the second pass; NULL while listing */
	uint32_t k;              /* the shard */
	off_t size;              /* its size when opened */
	bool changed;            /* what was read may be another file's: why says how */
	char why[256];
	char buf[1 << 16];
};

struct tar {
	char **shards;
	struct shard_id *ids; /* one per shard, taken when it was listed */
	size_t n_shards;
	char *member;
	/* `members`: the extensions wanted, in order (all: every file of a sample). */
	bool whole, all;
	char **want;
	size_t n_want;
	char *members; /* the key's value, for messages */
	struct part *parts;
	size_t n_parts, cap_parts;
	struct slot *slots; /* scratch for one sample's reads */
	size_t cap_slots;
	const char *last_key; /* the key of the item next() gave last (gpud_generator_name) */
	struct sample *s;
	size_t n, cap, next;
	/* The shard being read (or listed): its file and archive, its index, the next
	 * entry's index. */
	struct feed feed;
	struct archive *a;
	uint32_t cur;
	uint64_t entry;
	bool broken;  /* a read error in `cur`, or it changed: every later task of it fails */
	bool changed; /* broken because the shard is not the file listed */
	char broken_msg[320];
};

/* A regular member of the shard being listed, for hard links to find by name. */
struct listed {
	char *name;
	int64_t data, size, pos; /* where its bytes are (a hard link's: its target's) */
	uint64_t hash;           /* name_hash of the entry holding them */
};

/* FNV-1a of a member's name: enough to tell that a header read again is the one listed. */
static uint64_t name_hash(const char *name)
{
	uint64_t h = 1469598103934665603ull;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++)
		h = (h ^ *p) * 1099511628211ull;
	return h;
}

static void id_of(struct shard_id *id, const struct stat *st)
{
	*id = (struct shard_id){st->st_dev, st->st_ino, st->st_size, st->st_mtim, st->st_ctim};
}

static bool same_time(struct timespec a, struct timespec b)
{
	return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

/* Whether shard k is no longer the file the first pass listed: the file being read
 * (fd, -1 for none) rewritten, grown, cut or touched, or another file (or none) at its
 * path. What changed goes to buf. */
static bool shard_changed(const struct tar *t, uint32_t k, int fd, char *buf, size_t len)
{
	const struct shard_id *was = &t->ids[k];
	struct stat now;
	if (fd >= 0 && fstat(fd, &now) == 0) {
		if (now.st_dev != was->dev || now.st_ino != was->ino) {
			snprintf(buf, len, "another file is at its path");
			return true;
		}
		if (now.st_size != was->size) {
			snprintf(buf, len, "its size: %lld bytes when listed, %lld now",
				 (long long)was->size, (long long)now.st_size);
			return true;
		}
		if (!same_time(now.st_mtim, was->mtime)) {
			snprintf(buf, len, "it was written to: its mtime moved");
			return true;
		}
		if (!same_time(now.st_ctim, was->ctime)) {
			snprintf(buf, len, "it was written to or its times set: its ctime moved");
			return true;
		}
	}
	if (stat(t->shards[k], &now) < 0) {
		snprintf(buf, len, "its path: %s", strerror(errno));
		return true;
	}
	if (now.st_dev != was->dev || now.st_ino != was->ino) {
		snprintf(buf, len, "another file is at its path (replaced)");
		return true;
	}
	return false;
}

static la_ssize_t feed_read(struct archive *a, void *data, const void **buf)
{
	struct feed *f = data;
	ssize_t n = read(f->fd, f->buf, sizeof f->buf);
	if (n < 0) {
		archive_set_error(a, errno, "%s", strerror(errno));
		return -1;
	}
	if (f->watch && !f->changed && shard_changed(f->watch, f->k, f->fd, f->why, sizeof f->why))
		f->changed = true;
	*buf = f->buf;
	return n;
}

/* A plain tar's data passed over: seeked over, as libarchive's own file reader does,
 * never past the end (read through instead, so that a shard cut short is found cut). */
static la_int64_t feed_skip(struct archive *a, void *data, la_int64_t request)
{
	struct feed *f = data;
	(void)a;
	off_t at = lseek(f->fd, 0, SEEK_CUR);
	if (request <= 0 || at < 0 || at >= f->size || request > f->size - at ||
	    lseek(f->fd, (off_t)request, SEEK_CUR) < 0)
		return 0; /* libarchive reads through instead */
	return request;
}

/* Opens shard k for reading into t->a's place (a regular file only: see check.h), its
 * file in t->feed, watched for changes when `watch`; *st its status. NULL with err
 * ("tar: shard PATH cannot be read: why") when it cannot be opened or libarchive takes
 * it for no archive (empty, not a tar, its compression's header cut short). */
static struct archive *open_shard(struct tar *t, uint32_t k, bool watch, struct stat *st,
				  struct gpud_error *err)
{
	const char *path = t->shards[k];
	struct feed *f = &t->feed;
	struct gpud_error why = {{0}};
	f->fd = check_open_regular("tar", path, st, &why);
	f->watch = watch ? t : NULL;
	f->k = k;
	f->size = f->fd >= 0 ? st->st_size : 0;
	f->changed = false;
	if (f->fd < 0) {
		/* check.h's message, "tar: " and all, says the rest */
		gpud_fail(err, "tar: shard %s cannot be read: %s", path, why.message + 5);
		return NULL;
	}
	struct archive *a = archive_read_new();
	if (!a) {
		gpud_fail(err, "tar: shard %s cannot be read: out of memory", path);
		goto fail;
	}
	archive_read_support_filter_all(a);
	archive_read_support_format_tar(a);
	archive_read_support_format_gnutar(a);
	archive_read_set_read_callback(a, feed_read);
	archive_read_set_skip_callback(a, feed_skip);
	archive_read_set_callback_data(a, f);
	if (archive_read_open1(a) != ARCHIVE_OK) {
		gpud_fail(err, "tar: shard %s cannot be read: %s", path,
			  archive_error_string(a) ? archive_error_string(a) : "read error");
		archive_read_free(a);
		goto fail;
	}
	return a;
fail:
	close(f->fd);
	f->fd = -1;
	return NULL;
}

/* The key of member `name` (its path up to the first dot of its file name) and its
 * extension (after that dot; "" without one). */
static void split_name(const char *name, size_t *key_len, const char **ext)
{
	const char *base = strrchr(name, '/');
	base = base ? base + 1 : name;
	const char *dot = strchr(base, '.');
	*key_len = dot ? (size_t)(dot - name) : strlen(name);
	*ext = dot ? dot + 1 : "";
}

static struct sample *add(struct tar *t)
{
	if (t->n == t->cap) {
		size_t cap = t->cap ? t->cap * 2 : 1024;
		struct sample *p = realloc(t->s, cap * sizeof *p);
		if (!p)
			return NULL;
		t->s = p;
		t->cap = cap;
	}
	struct sample *s = &t->s[t->n++];
	*s = (struct sample){.member = -1};
	return s;
}

/* The regular members listed so far in the shard being listed, found by name through
 * an open-addressing table of their indexes (a shard of many hard links stays linear). */
struct names {
	struct listed *l;
	size_t n, cap;
	uint32_t *slot; /* index + 1 into l, 0 for empty; nslot a power of two, > 2n */
	size_t nslot;
};

static void names_free(struct names *m)
{
	for (size_t i = 0; i < m->n; i++)
		free(m->l[i].name);
	free(m->l);
	free(m->slot);
}

/* Member i in the table; a name listed again takes the place of the earlier one (a
 * link names the last member of that name before it, as extracting would leave it). */
static void names_place(struct names *m, size_t i)
{
	size_t mask = m->nslot - 1, at = (size_t)name_hash(m->l[i].name) & mask;
	while (m->slot[at] && strcmp(m->l[m->slot[at] - 1].name, m->l[i].name) != 0)
		at = (at + 1) & mask;
	m->slot[at] = (uint32_t)(i + 1);
}

/* Room for one more: 0, or -1 out of memory (or past 2^31 members). */
static int names_reserve(struct names *m)
{
	if (m->n == m->cap) {
		size_t c = m->cap ? m->cap * 2 : 256;
		struct listed *p = c < (1u << 31) ? realloc(m->l, c * sizeof *p) : NULL;
		if (!p)
			return -1;
		m->l = p;
		m->cap = c;
	}
	if (2 * (m->n + 1) >= m->nslot) {
		size_t ns = m->nslot ? m->nslot * 2 : 512;
		uint32_t *slot = calloc(ns, sizeof *slot);
		if (!slot)
			return -1;
		free(m->slot);
		m->slot = slot;
		m->nslot = ns;
		for (size_t i = 0; i < m->n; i++)
			names_place(m, i);
	}
	return 0;
}

/* The member named `target` listed before (the last of that name), or NULL. */
static const struct listed *names_find(const struct names *m, const char *target)
{
	if (!m->nslot)
		return NULL;
	size_t mask = m->nslot - 1;
	for (size_t at = (size_t)name_hash(target) & mask; m->slot[at]; at = (at + 1) & mask)
		if (!strcmp(m->l[m->slot[at] - 1].name, target))
			return &m->l[m->slot[at] - 1];
	return NULL;
}

/* A sample's `member` entry that is no file: the message its task fails with. */
static char *not_a_file(const struct tar *t, struct archive_entry *e, const char *key,
			const char *ext, const char *name, uint32_t k)
{
	char *msg = NULL;
	const char *hard = archive_entry_hardlink(e);
	const char *sym = archive_entry_symlink(e);
	int rc;
	if (hard)
		rc = asprintf(&msg,
			      "tar: sample '%s' in shard %s: its '%s' member '%s' is a hard link "
			      "to '%s', which the shard does not hold before it",
			      key, t->shards[k], ext, name, hard);
	else if (archive_entry_filetype(e) == AE_IFLNK)
		rc = asprintf(&msg,
			      "tar: sample '%s' in shard %s: its '%s' member '%s' is a symbolic "
			      "link (to '%s'): gpud does not follow links in shards",
			      key, t->shards[k], ext, name, sym ? sym : "");
	else
		rc = asprintf(&msg,
			      "tar: sample '%s' in shard %s: its '%s' member '%s' is %s, not a "
			      "file",
			      key, t->shards[k], ext, name,
			      archive_entry_filetype(e) == AE_IFDIR ? "a folder"
								    : "a device, FIFO or socket");
	return rc < 0 ? NULL : msg;
}

/* Whether extension `ext` is one `members` takes. */
static bool wanted(const struct tar *t, const char *ext)
{
	if (t->all)
		return true;
	for (size_t i = 0; i < t->n_want; i++)
		if (!strcmp(t->want[i], ext))
			return true;
	return false;
}

/* The part `ext` of sample `cur` (members), its bytes where `at` says: 0, or -1 out of
 * memory. A second member of the same extension in a sample is passed over (as the
 * first of `member` is the one taken). */
static int add_part(struct tar *t, struct sample *cur, const char *ext, const struct listed *at)
{
	for (uint32_t i = 0; i < cur->n_parts; i++)
		if (!strcmp(t->parts[cur->part0 + i].name, ext))
			return 0;
	if (t->n_parts == t->cap_parts) {
		size_t c = t->cap_parts ? t->cap_parts * 2 : 1024;
		struct part *p = realloc(t->parts, c * sizeof *p);
		if (!p)
			return -1;
		t->parts = p;
		t->cap_parts = c;
	}
	if (!cur->n_parts)
		cur->part0 = t->n_parts;
	struct part *p = &t->parts[t->n_parts];
	if (!(p->name = strdup(ext)))
		return -1;
	p->size = at->size;
	p->data = at->data;
	p->data_pos = at->pos;
	p->data_name = at->hash;
	t->n_parts++;
	cur->n_parts++;
	return 0;
}

/* The first pass over shard `k`: its samples, and its damage as one more task. A shard
 * that cannot be read at all is one task that fails naming it; one that is not a
 * regular file refuses the job. */
static int index_shard(struct tar *t, uint32_t k, struct gpud_error *err)
{
	const char *path = t->shards[k];
	struct stat st;
	const char *what;
	if (stat(path, &st) == 0 && (what = check_not_regular(st.st_mode)))
		return gpud_fail(err, "tar: shard %s is %s, not a regular file", path, what);
	struct gpud_error why = {{0}};
	struct archive *a = open_shard(t, k, false, &st, &why);
	if (!a) {
		struct sample *d = add(t);
		if (!d || !(d->damage = strdup(why.message)))
			return gpud_fail(err, "tar: out of memory");
		d->shard = k;
		/* Listed as the first pass found it (if at all): a shard fixed since then
		 * fails its task all the same, the ids staying what they were. */
		if (stat(path, &st) == 0)
			id_of(&t->ids[k], &st);
		return 0;
	}
	id_of(&t->ids[k], &st);
	struct archive_entry *e;
	struct sample *cur = NULL;
	struct names m = {0};
	uint64_t idx = 0;
	int rc;
	while ((rc = archive_read_next_header(a, &e)) == ARCHIVE_OK || rc == ARCHIVE_WARN) {
		const char *name = archive_entry_pathname(e);
		size_t kl;
		const char *ext = "";
		if (name)
			split_name(name, &kl, &ext);
		/* A hard link (GNU tar writes one for each further name of a file) has the
		 * data of the member it names, listed before it; one carrying its own data
		 * (pax) is a file. */
		const char *hard = archive_entry_hardlink(e);
		const struct listed *to = NULL;
		bool file = archive_entry_filetype(e) == AE_IFREG ||
			    (hard && archive_entry_size_is_set(e) && archive_entry_size(e) > 0);
		if (hard && !file)
			to = names_find(&m, hard);
		bool is_member = name && (t->whole ? wanted(t, ext) : !strcmp(ext, t->member));
		/* `members = *` takes files only: a folder or a link between them is passed
		 * over, as other entries are. */
		if (t->all && !file && !to)
			is_member = false;
		if (!name || (!file && !to && !is_member)) {
			if (cur)
				cur->n_entries++; /* a folder entry between members: skipped */
			idx++;
			continue;
		}
		if (file || to) {
			if (names_reserve(&m) < 0)
				goto oom;
			struct listed *x = &m.l[m.n];
			if (!(x->name = strdup(name)))
				goto oom;
			if (to) {
				x->data = to->data;
				x->size = to->size;
				x->pos = to->pos;
				x->hash = to->hash;
			} else {
				x->data = (int64_t)idx;
				x->size = archive_entry_size(e);
				x->pos = archive_read_header_position(a);
				x->hash = name_hash(name);
			}
			names_place(&m, m.n++);
		}
		if (!cur || strlen(cur->key) != kl || strncmp(cur->key, name, kl) != 0) {
			cur = add(t);
			if (!cur || !(cur->key = strndup(name, kl)))
				goto oom;
			cur->shard = k;
			cur->first = idx;
		}
		if (t->whole && is_member && !cur->damage) {
			if (file || to) {
				if (add_part(t, cur, ext, &m.l[m.n - 1]) < 0)
					goto oom;
			} else if (!(cur->damage = not_a_file(t, e, cur->key, ext, name, k))) {
				goto oom;
			}
		} else if (!t->whole && is_member && cur->member < 0) {
			cur->member = (int64_t)idx;
			if (file || to) {
				const struct listed *at = &m.l[m.n - 1];
				cur->data = at->data;
				cur->member_size = at->size;
				cur->data_pos = at->pos;
				cur->data_name = at->hash;
			} else if (!(cur->damage =
					     not_a_file(t, e, cur->key, t->member, name, k))) {
				goto oom;
			}
		}
		cur->n_entries++;
		idx++;
	}
	if (rc != ARCHIVE_EOF) {
		/* The sample the damage cut short (its data may be gone) is the damage's task;
		 * with none under way (or one failing already), the damage is a task of its
		 * own. */
		struct sample *d = cur && !cur->damage ? cur : add(t);
		if (!d)
			goto oom;
		char *msg;
		if (asprintf(&msg, "tar: shard %s is damaged%s%s%s: %s", path,
			     d->key ? " at sample '" : "", d->key ? d->key : "", d->key ? "'" : "",
			     archive_error_string(a) ? archive_error_string(a) : "read error") < 0)
			goto oom;
		d->damage = msg;
		d->shard = k;
	}
	names_free(&m);
	archive_read_free(a);
	close(t->feed.fd);
	t->feed.fd = -1;
	return 0;
oom:
	names_free(&m);
	archive_read_free(a);
	close(t->feed.fd);
	t->feed.fd = -1;
	return gpud_fail(err, "tar: out of memory");
}

static void free_tar(struct tar *t)
{
	if (!t)
		return;
	if (t->a)
		archive_read_free(t->a);
	if (t->feed.fd >= 0)
		close(t->feed.fd);
	for (size_t i = 0; i < t->n; i++) {
		free(t->s[i].key);
		free(t->s[i].damage);
	}
	free(t->s);
	for (size_t i = 0; i < t->n_parts; i++)
		free(t->parts[i].name);
	free(t->parts);
	free(t->slots);
	for (size_t i = 0; i < t->n_want; i++)
		free(t->want[i]);
	free(t->want);
	free(t->members);
	for (size_t i = 0; i < t->n_shards; i++)
		free(t->shards[i]);
	free(t->shards);
	free(t->ids);
	free(t->member);
	free(t);
}

/* The shards `path` names: a glob, sorted; none is an error naming the pattern. */
static int list_shards(const char *path, char ***out, size_t *n, struct gpud_error *err)
{
	glob_t g;
	int rc = glob(path, GLOB_BRACE | GLOB_ERR, NULL, &g);
	if (rc == GLOB_NOMATCH)
		return gpud_fail(err, "tar: path = '%s': no shard matches", path);
	if (rc != 0)
		return gpud_fail(err, "tar: path = '%s': cannot list: %s", path,
				 rc == GLOB_NOSPACE ? "out of memory" : strerror(errno));
	*out = calloc(g.gl_pathc, sizeof **out);
	if (!*out) {
		globfree(&g);
		return gpud_fail(err, "tar: out of memory");
	}
	for (size_t i = 0; i < g.gl_pathc; i++)
		if (!((*out)[i] = strdup(g.gl_pathv[i]))) {
			for (size_t k = 0; k < i; k++)
				free((*out)[k]);
			free(*out);
			globfree(&g);
			return gpud_fail(err, "tar: out of memory");
		}
	*n = g.gl_pathc;
	globfree(&g);
	return 0;
}

/* `members`: "*", or extensions split at commas (spaces around each dropped) into
 * t->want (t NULL: only checked). 0, or -1 with a message naming the value. */
static int parse_members(struct tar *t, const char *v, struct gpud_error *err)
{
	const char *p = v;
	while (*p == ' ' || *p == '\t')
		p++;
	if (!strcmp(p, "*")) {
		if (t)
			t->all = true;
		return 0;
	}
	size_t n = 0;
	char **want = NULL;
	int rc = 0;
	for (;;) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *a = p, *b = p + len;
		while (a < b && (*a == ' ' || *a == '\t'))
			a++;
		while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
			b--;
		if (a == b || memchr(a, '*', (size_t)(b - a))) {
			rc = gpud_fail(
				err,
				"tar: members = '%s': expected extensions separated by commas "
				"(jpg,cls) or * for every member",
				v);
			break;
		}
		char **grown = realloc(want, (n + 1) * sizeof *want);
		if (!grown || !(grown[n] = strndup(a, (size_t)(b - a)))) {
			want = grown ? grown : want;
			rc = gpud_fail(err, "tar: out of memory");
			break;
		}
		want = grown;
		for (size_t i = 0; i < n; i++)
			if (!strcmp(want[i], want[n])) {
				rc = gpud_fail(err, "tar: members = '%s': '%s' is named twice", v,
					       want[n]);
				break;
			}
		n++;
		if (rc < 0 || !end)
			break;
		p = end + 1;
	}
	if (rc == 0 && t) {
		t->want = want;
		t->n_want = n;
		return 0;
	}
	for (size_t i = 0; i < n; i++)
		free(want[i]);
	free(want);
	return rc;
}

static int parse(const struct gpud_args *args, const char **path, const char **member,
		 const char **members, struct gpud_error *err)
{
	*path = gpud_arg(args, "path", NULL);
	*member = gpud_arg(args, "member", NULL);
	*members = gpud_arg(args, "members", NULL);
	if (!*path || !**path)
		return gpud_fail(err, "tar: 'path' is required (the shards: a glob such as "
				      "shards/train-*.tar)");
	if (*member && *members)
		return gpud_fail(err,
				 "tar: member = '%s' and members = '%s': give one (member: one "
				 "member's bytes a task; members: the whole sample, framed)",
				 *member, *members);
	if (!*member)
		*member = "jpg";
	if (!**member)
		return gpud_fail(err,
				 "tar: member = '': name the member extension (jpg, png, ...)");
	return *members ? parse_members(NULL, *members, err) : 0;
}

GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err)
{
	const char *path, *member, *members;
	if (parse(args, &path, &member, &members, err) < 0)
		return -1;
	char **shards = NULL;
	size_t n = 0;
	if (list_shards(path, &shards, &n, err) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; i < n; i++) {
		if (rc == 0)
			rc = check_file_readable("tar", shards[i], err);
		free(shards[i]);
	}
	free(shards);
	const char *keys = gpud_arg(args, "keys_out", NULL);
	if (rc == 0 && keys)
		rc = check_file_writable("tar", keys, err);
	return rc;
}

/* A key or shard name in keys_out: a tab, newline, carriage return or backslash in it
 * written \t, \n, \r, \\, so that each task is one line of three fields whatever its
 * member names hold (a hostile or careless shard's too). */
static void put_escaped(FILE *m, const char *s)
{
	for (; *s; s++) {
		switch (*s) {
		case '\t':
			fputs("\\t", m);
			break;
		case '\n':
			fputs("\\n", m);
			break;
		case '\r':
			fputs("\\r", m);
			break;
		case '\\':
			fputs("\\\\", m);
			break;
		default:
			fputc(*s, m);
		}
	}
}

/* `keys_out`: every task's key, written whole then renamed into place; left alone when
 * it holds that already (a reader of it sees no change). A key ending in _out is never
 * taken for an input by gpud (record/inputs.h). */
static int write_keys(const struct tar *t, const char *path, struct gpud_error *err)
{
	char *text = NULL, *tmp = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);
	if (!m)
		return gpud_fail(err, "tar: out of memory");
	for (size_t i = 0; i < t->n; i++) {
		fprintf(m, "%zu\t", i);
		put_escaped(m, t->s[i].key ? t->s[i].key : "");
		fputc('\t', m);
		put_escaped(m, t->shards[t->s[i].shard]);
		fputc('\n', m);
	}
	if (fclose(m) != 0 || !text) {
		free(text);
		return gpud_fail(err, "tar: out of memory");
	}
	int rc = 0;
	FILE *old = fopen(path, "r");
	if (old) {
		char *was = malloc(len + 1);
		size_t got = was ? fread(was, 1, len + 1, old) : 0;
		bool same = was && got == len && memcmp(was, text, len) == 0;
		free(was);
		fclose(old);
		if (same)
			goto out;
	}
	if (asprintf(&tmp, "%s.tmp.%ld", path, (long)getpid()) < 0) {
		tmp = NULL;
		rc = gpud_fail(err, "tar: out of memory");
		goto out;
	}
	FILE *f = fopen(tmp, "w");
	if (!f) {
		rc = gpud_fail(err, "tar: cannot write %s: %s", tmp, strerror(errno));
		goto out;
	}
	size_t put = fwrite(text, 1, len, f);
	if (fclose(f) != 0 || put != len || rename(tmp, path) < 0) {
		rc = gpud_fail(err, "tar: cannot write %s: %s", path,
			       strerror(errno ? errno : EIO));
		unlink(tmp);
	}
out:
	free(tmp);
	free(text);
	return rc;
}

GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err)
{
	const char *path, *member, *members;
	if (parse(args, &path, &member, &members, err) < 0)
		return -1;
	struct tar *t = calloc(1, sizeof *t);
	if (!t || !(t->member = strdup(member))) {
		free(t);
		return gpud_fail(err, "tar: out of memory");
	}
	t->feed.fd = -1;
	t->whole = members != NULL;
	if (members && (!(t->members = strdup(members)) || parse_members(t, members, err) < 0)) {
		if (!t->members)
			gpud_fail(err, "tar: out of memory");
		goto fail;
	}
	if (list_shards(path, &t->shards, &t->n_shards, err) < 0)
		goto fail;
	if (!(t->ids = calloc(t->n_shards, sizeof *t->ids))) {
		gpud_fail(err, "tar: out of memory");
		goto fail;
	}
	for (size_t k = 0; k < t->n_shards; k++)
		if (index_shard(t, (uint32_t)k, err) < 0)
			goto fail;
	const char *keys = gpud_arg(args, "keys_out", NULL);
	if (keys && write_keys(t, keys, err) < 0)
		goto fail;
	*state = t;
	return 0;
fail:
	free_tar(t);
	return -1;
}

static void close_shard(struct tar *t)
{
	if (t->a)
		archive_read_free(t->a);
	if (t->feed.fd >= 0)
		close(t->feed.fd);
	t->a = NULL;
	t->feed.fd = -1;
}

static void set_broken(struct tar *t, bool changed, const char *why)
{
	t->broken = true;
	t->changed = changed;
	snprintf(t->broken_msg, sizeof t->broken_msg, "%s", why);
}

/* Positions the reader at entry `want` of shard `k` (reopening it to go back). A shard
 * that is not the file listed is opened all the same, broken (its tasks fail). */
static int seek_entry(struct tar *t, uint32_t k, uint64_t want, struct gpud_error *err)
{
	if (t->a && (t->cur != k || t->entry > want))
		close_shard(t);
	if (!t->a) {
		struct stat st;
		t->a = open_shard(t, k, true, &st, err);
		if (!t->a)
			return -1;
		t->cur = k;
		t->entry = 0;
		t->broken = false;
		char why[256];
		if (shard_changed(t, k, t->feed.fd, why, sizeof why))
			set_broken(t, true, why);
	}
	return 0;
}

/* Reads entries up to entry `data`, whose header must be the listed one (`size` bytes,
 * header at `pos`, name hash `hash`), and its bytes into dest when they fit in cap
 * (*size_out: its size either way); the rest of the sample is left for the next call
 * to pass over. */
static int read_data(struct tar *t, int64_t data, int64_t want_size, int64_t pos, uint64_t hash,
		     void *dest, size_t cap, size_t *size_out)
{
	struct archive_entry *e = NULL;
	while (t->entry <= (uint64_t)data) {
		int rc = archive_read_next_header(t->a, &e);
		if (rc != ARCHIVE_OK && rc != ARCHIVE_WARN) {
			set_broken(t, false,
				   rc == ARCHIVE_EOF            ? "it ends early"
				   : archive_error_string(t->a) ? archive_error_string(t->a)
								: "read error");
			return -1;
		}
		t->entry++;
	}
	int64_t size = archive_entry_size(e);
	const char *name = archive_entry_pathname(e);
	if (!e || size < 0 || size != want_size || !name || name_hash(name) != hash ||
	    archive_read_header_position(t->a) != pos) {
		char why[320];
		snprintf(why, sizeof why,
			 "the member read, '%s', is not the one listed there (name, size, offset)",
			 name ? name : "");
		set_broken(t, true, why);
		return -1;
	}
	*size_out = (size_t)size;
	if ((size_t)size > cap)
		return 0; /* the host fails it as too large */
	size_t got = 0;
	while (got < (size_t)size) {
		la_ssize_t r = archive_read_data(t->a, (char *)dest + got, (size_t)size - got);
		if (r < 0) {
			set_broken(t, false,
				   archive_error_string(t->a) ? archive_error_string(t->a)
							      : "read error");
			return -1;
		}
		if (r == 0) {
			set_broken(t, false, "its member ends early");
			return -1;
		}
		got += (size_t)r;
	}
	return 0;
}

/* The failure of a task of a broken shard. */
static int broken_task(const struct tar *t, const struct sample *s, struct gpud_error *err)
{
	const char *shard = t->shards[s->shard];
	if (t->changed)
		gpud_fail(err, "tar: shard %s changed during the run (%s): sample '%s' not read",
			  shard, t->broken_msg, s->key);
	else
		gpud_fail(err, "tar: shard %s could not be read again up to sample '%s': %s", shard,
			  s->key, t->broken_msg);
	return GPUD_GENERATOR_TASK_FAILED;
}

/* Reads the bytes of entry `data` (size, pos, hash: as listed) of sample s into dest
 * (*got: their size; not read when over cap), the reader moved there, the shard's
 * damage and changes looked at: 1, or GPUD_GENERATOR_TASK_FAILED with err. */
static int take(struct tar *t, const struct sample *s, int64_t data, int64_t size, int64_t pos,
		uint64_t hash, void *dest, size_t cap, size_t *got, struct gpud_error *err)
{
	if (t->a && t->cur == s->shard && t->broken)
		return broken_task(t, s, err);
	if (seek_entry(t, s->shard, (uint64_t)data, err) < 0) {
		/* A shard that was there for the first pass and is gone: each task of it
		 * fails, naming it. */
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (t->broken)
		return broken_task(t, s, err);
	/* The bytes read are the listed sample's only if the shard was still the file
	 * listed after each block they came from was read (feed_read): a shard changed
	 * meanwhile fails this task and every later one of it (a read error then is the
	 * change's, not the archive's). */
	int rc = read_data(t, data, size, pos, hash, dest, cap, got);
	if (t->feed.changed) {
		set_broken(t, true, t->feed.why);
		*got = 0;
		return broken_task(t, s, err);
	}
	if (rc < 0) {
		if (t->changed)
			return broken_task(t, s, err);
		gpud_fail(err, "tar: shard %s, sample '%s': %s", t->shards[s->shard], s->key,
			  t->broken_msg);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	return 1;
}

/* Sample s's part named `ext`, or NULL. */
static const struct part *part_of(const struct tar *t, const struct sample *s, const char *ext)
{
	for (uint32_t i = 0; i < s->n_parts; i++)
		if (!strcmp(t->parts[s->part0 + i].name, ext))
			return &t->parts[s->part0 + i];
	return NULL;
}

/* `members`: the whole sample s framed into item (sample.h), its members in the list's
 * order (the shard's for *), read in the shard's order. */
static int next_whole(struct tar *t, const struct sample *s, struct gpud_buf *item,
		      struct gpud_error *err)
{
	const char *shard = t->shards[s->shard];
	size_t n = t->all ? s->n_parts : t->n_want;
	if (!n) {
		gpud_fail(err, "tar: sample '%s' in shard %s has no member that is a file", s->key,
			  shard);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	for (size_t i = 0; !t->all && i < t->n_want; i++)
		if (!part_of(t, s, t->want[i])) {
			gpud_fail(err,
				  "tar: sample '%s' in shard %s has no '%s' member (members = %s)",
				  s->key, shard, t->want[i], t->members);
			return GPUD_GENERATOR_TASK_FAILED;
		}
	if (n > t->cap_slots) {
		struct slot *g = realloc(t->slots, n * sizeof *g);
		if (!g) {
			gpud_fail(err, "tar: out of memory");
			return -1;
		}
		t->slots = g;
		t->cap_slots = n;
	}
	struct sample_writer w;
	sample_begin(&w, item->data, item->capacity, s->key, strlen(s->key));
	for (size_t i = 0; i < n; i++) {
		const struct part *p = t->all ? &t->parts[s->part0 + i] : part_of(t, s, t->want[i]);
		void *dest = sample_add(&w, p->name, strlen(p->name), (size_t)p->size);
		/* In the shard's order: a later slot's entry read before an earlier one's. */
		size_t k = i;
		for (; k > 0 && t->slots[k - 1].data > p->data; k--)
			t->slots[k] = t->slots[k - 1];
		t->slots[k] = (struct slot){p->data, dest, p};
	}
	item->size = sample_end(&w);
	if (w.over)
		return 1; /* the host fails it as too large, naming both sizes */
	for (size_t i = 0; i < n; i++) {
		const struct part *p = t->slots[i].p;
		size_t got = 0;
		int rc = take(t, s, p->data, p->size, p->data_pos, p->data_name, t->slots[i].dest,
			      (size_t)p->size, &got, err);
		if (rc != 1) {
			item->size = 0;
			return rc;
		}
	}
	return 1;
}

GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err)
{
	struct tar *t = state;
	if (t->next == t->n)
		return 0;
	const struct sample *s = &t->s[t->next++];
	const char *shard = t->shards[s->shard];
	t->last_key = s->key;
	item->size = 0;
	if (s->damage) {
		gpud_fail(err, "%s", s->damage);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	if (t->whole)
		return next_whole(t, s, item, err);
	if (s->member < 0) {
		gpud_fail(err, "tar: sample '%s' in shard %s has no '%s' member", s->key, shard,
			  t->member);
		return GPUD_GENERATOR_TASK_FAILED;
	}
	return take(t, s, s->data, s->member_size, s->data_pos, s->data_name, item->data,
		    item->capacity, &item->size, err);
}

/* (ABI 1.9) Each task's name is its sample's key (a damaged shard's own task has none). */
GPUD_EXPORT const char *gpud_generator_name(void *state)
{
	return ((const struct tar *)state)->last_key;
}

/* Jumping is free: the next read positions itself (a shard's headers are read through
 * to its first sample wanted, a skipped shard is not opened). */
GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err)
{
	struct tar *t = state;
	(void)err;
	t->next = n > t->n - t->next ? t->n : t->next + n;
	return 0;
}

GPUD_EXPORT int64_t gpud_generator_total(void *state)
{
	return (int64_t)((struct tar *)state)->n;
}

GPUD_EXPORT void gpud_generator_close(void *state)
{
	free_tar(state);
}
