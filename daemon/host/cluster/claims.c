/* SPDX-License-Identifier: MIT */
/* Dynamic shares: chunks claimed by atomic creates in a folder all ranks see. */
#define _GNU_SOURCE
#include "cluster/claims.h"
#include "util/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "record/journal.h"
#include "wait.h"

/* A claim's name: its first chunk, fixed-width hex (they list in chain order). */
static void claim_name(char *buf, size_t len, uint64_t chunk)
{
	snprintf(buf, len, "c%016" PRIx64, chunk);
}

/* A claim's text (its symlink's target): who made it, how many chunks, of how many
 * ranks, and a nonce that tells this process's claim from another's. */
struct claim {
	unsigned rank, ranks;
	uint64_t len;
};

static int claim_parse(const char *s, struct claim *cl)
{
	unsigned long long n;
	if (sscanf(s, "r%u n%llu of%u", &cl->rank, &n, &cl->ranks) != 3 || n == 0 ||
	    n > CLAIMS_MAX_BATCH || cl->ranks == 0 || cl->rank >= cl->ranks)
		return -1;
	cl->len = n;
	return 0;
}

/* Reads the claim at `chunk`: 0, 1 when there is none, -1 when it cannot be read or
 * is not a claim (errno set). `text` (len bytes) gets its target. */
static int claim_read(struct claims *c, uint64_t chunk, struct claim *cl, char *text, size_t len)
{
	char name[32];
	claim_name(name, sizeof name, chunk);
	ssize_t n = readlinkat(c->dfd, name, text, len - 1);
	if (n < 0)
		return errno == ENOENT ? 1 : -1;
	text[n] = '\0';
	if (claim_parse(text, cl) < 0) {
		errno = EINVAL;
		return -1;
	}
	return 0;
}

static int own_add(struct claims *c, uint64_t first, uint64_t end)
{
	if (c->n_own == c->cap_own) {
		size_t cap = c->cap_own ? 2 * c->cap_own : 64;
		struct claims_range *n = realloc(c->own, cap * sizeof *n);
		if (!n)
			return -1;
		c->own = n;
		c->cap_own = cap;
	}
	uint64_t nth = 0;
	if (c->n_own) {
		const struct claims_range *p = &c->own[c->n_own - 1];
		nth = p->nth + (p->end - p->first) * RANKS_CHUNK;
	}
	c->own[c->n_own++] = (struct claims_range){first, end, nth};
	return 0;
}

/* Rank r made claims as one of `of` ranks: it is waited for (claims_sweep), and run as
 * rank r of `of` when it must be finished by another. */
static int note_of(struct claims *c, unsigned r, unsigned of)
{
	if (r >= c->n_of) {
		unsigned n = r + 1;
		unsigned *v = realloc(c->of, n * sizeof *v);
		if (!v)
			return -1;
		for (unsigned k = c->n_of; k < n; k++)
			v[k] = 0;
		c->of = v;
		c->n_of = n;
	}
	c->of[r] = of;
	return 0;
}

/* The ranks to wait for: this run's, and those earlier runs' claims name. */
static unsigned all_ranks(const struct claims *c)
{
	return c->n_of > c->ranks ? c->n_of : c->ranks;
}

/* The first claim after chunk `ch` in the folder, or UINT64_MAX. */
static uint64_t next_claim_after(struct claims *c, uint64_t ch)
{
	int fd = dup(c->dfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		if (fd >= 0)
			close(fd);
		return UINT64_MAX;
	}
	uint64_t best = UINT64_MAX;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *end;
		if (e->d_name[0] != 'c' || strlen(e->d_name) != 17)
			continue;
		uint64_t v = strtoull(e->d_name + 1, &end, 16);
		if (*end == '\0' && v > ch && v < best)
			best = v;
	}
	closedir(d);
	return best;
}

/* One link of the chain as claims_open found it: a claim, or a gap (rank UINT_MAX). */
struct link {
	uint64_t first, len;
	unsigned rank, ranks;
	bool mpi; /* made by the MPI counter (its text ends in "mpi") */
};

struct chain {
	struct link *v;
	size_t n, cap;
	uint64_t end; /* the chunk the walk stopped at */
};

static int chain_add(struct chain *ch, struct link l)
{
	if (ch->n == ch->cap) {
		size_t cap = ch->cap ? 2 * ch->cap : 64;
		struct link *v = realloc(ch->v, cap * sizeof *v);
		if (!v)
			return -1;
		ch->v = v;
		ch->cap = cap;
	}
	ch->v[ch->n++] = l;
	return 0;
}

/* Walks the chain on from ch->end to its end (gaps included) or past chunk `upto`.
 * 0, or -1 with why. */
static int chain_walk(struct claims *c, struct chain *ch, uint64_t upto, char *why, size_t len)
{
	while (ch->end <= upto) {
		struct claim cl;
		char text[128];
		int rc = claim_read(c, ch->end, &cl, text, sizeof text);
		if (rc == 1) {
			/* The chain's end, or a gap: chunks counted out by the MPI counter
			 * to a rank that died before it recorded its claim (mpi.h). */
			uint64_t next = next_claim_after(c, ch->end);
			if (next == UINT64_MAX)
				return 0;
			/* Or a rank claimed here and past it since the look: a claim is made
			 * only where the one before it ends, so this one is there now. */
			if (claim_read(c, ch->end, &cl, text, sizeof text) != 1)
				continue;
			if (chain_add(ch, (struct link){ch->end, next - ch->end, UINT_MAX, 0,
							false}) < 0)
				goto oom;
			ch->end = next;
			continue;
		}
		if (rc < 0 && errno != EINVAL) {
			snprintf(why, len, "%s/c%016" PRIx64 ": %s", c->dir, ch->end,
				 strerror(errno));
			return -1;
		}
		if (rc < 0) {
			snprintf(
				why, len,
				"%s/c%016" PRIx64 ": not a claim gpud made (a claim file "
				"cut short or replaced), so which rank runs those ids is "
				"lost; restore the claims folder as it was, or start the whole job "
				"over (remove %s, then run every rank without --resume, with "
				"--force)",
				c->dir, ch->end, c->dir);
			return -1;
		}
		size_t tl = strlen(text);
		bool mpi = tl > 4 && !strcmp(text + tl - 4, " mpi");
		if (chain_add(ch, (struct link){ch->end, cl.len, cl.rank, cl.ranks, mpi}) < 0)
			goto oom;
		ch->end += cl.len;
	}
	return 0;
oom:
	snprintf(why, len, "out of memory");
	return -1;
}

/* The link holding chunk `chunk`; NULL when no claim holds it. */
static const struct link *chain_find(const struct chain *ch, uint64_t chunk)
{
	size_t a = 0, b = ch->n;
	while (a < b) {
		size_t m = (a + b) / 2;
		if (ch->v[m].first + ch->v[m].len <= chunk)
			a = m + 1;
		else
			b = m;
	}
	return a < ch->n && ch->v[a].first <= chunk ? &ch->v[a] : NULL;
}

/* A gap the MPI counter did not leave: a claim after it made without MPI (a chain made
 * by the filesystem alone never has one), so a claim file was removed. */
static int check_gaps(struct claims *c, const struct chain *ch, char *why, size_t len)
{
	for (size_t i = 0; i + 1 < ch->n; i++) {
		const struct link *g = &ch->v[i], *next = &ch->v[i + 1];
		if (g->rank != UINT_MAX || next->mpi)
			continue;
		snprintf(why, len,
			 "the claims folder %s has no claim at c%016" PRIx64 " (ids %llu to "
			 "%llu) though c%016" PRIx64 " follows: a claim file was removed, so "
			 "which rank ran those ids is lost and resuming could run them twice; "
			 "restore the claims folder as it was, or start the whole job over "
			 "(remove %s, then run every rank without --resume, with --force)",
			 c->dir, g->first, (unsigned long long)(g->first * RANKS_CHUNK),
			 (unsigned long long)((g->first + g->len) * RANKS_CHUNK - 1), next->first,
			 c->dir);
		return -1;
	}
	return 0;
}

/* Every task rank r's journal (at `path`) holds done must lie in a claim of rank r:
 * one that does not is a claim lost (the folder removed, emptied, replaced, a claim
 * file removed), and the rank that claims those ids next would run them again. A
 * journal that is not there or cannot be read is the run's own business (resume.c).
 * 0, or -1 with why. */
static int check_journal(struct claims *c, struct chain *ch, unsigned r, const char *path,
			 char *why, size_t len)
{
	struct journal j = {.fd = -1, .rank = 0, .ranks = 1}; /* every bit as written */
	char jwhy[1200];
	if (journal_read(&j, path, jwhy, sizeof jwhy) < 0) {
		journal_close(&j);
		return 0;
	}
	/* The chain as it is now, after the journal was read: a live rank's done tasks lie
	 * in claims it made before it ran them. */
	int rc = chain_walk(c, ch, UINT64_MAX, why, len);
	if (rc < 0)
		goto out;
	uint64_t outside = 0, eg = 0, words = j.base_word + j.n_words;
	if (words < j.low / 64)
		words = j.low / 64;
	const struct link *where = NULL;
	/* RANKS_CHUNK is 64: a chunk is one word of the done set (all of it below low). */
	for (uint64_t w = 0; w < words; w++) {
		uint64_t bits = w < j.low / 64                ? UINT64_MAX
				: w - j.base_word < j.n_words ? j.words[w - j.base_word]
							      : 0;
		if (!bits)
			continue;
		const struct link *l = chain_find(ch, w);
		if (l && l->rank == r)
			continue;
		if (!outside) {
			eg = w * 64 + (uint64_t)__builtin_ctzll(bits);
			where = l;
		}
		outside += (uint64_t)__builtin_popcountll(bits);
	}
	if (outside) {
		char held[64];
		if (where && where->rank != UINT_MAX)
			snprintf(held, sizeof held, "claimed by rank %u", where->rank);
		else
			snprintf(held, sizeof held, "claimed by no rank");
		snprintf(why, len,
			 "rank %u's journal %s holds %llu tasks done (e.g. task %llu, %s) that "
			 "no claim of rank %u in the claims folder %s covers: the folder or some "
			 "of its claims were removed or replaced since, and resuming would run "
			 "them again; restore the claims folder as it was, or start the whole "
			 "job over (remove %s, then run every rank without --resume, with "
			 "--force)",
			 r, path, (unsigned long long)outside, (unsigned long long)eg, held, r,
			 c->dir, c->dir);
		rc = -1;
	}
out:
	journal_close(&j);
	return rc;
}

/* The job's identity in the folder (`job`, made by the first rank that opens it):
 * another job's folder is refused, as its claims say nothing of this job's ids. */
static int check_job(struct claims *c, uint64_t stream_id, char *why, size_t len)
{
	char text[32], back[32];
	snprintf(text, sizeof text, "job %016" PRIx64, stream_id);
	if (symlinkat(text, c->dfd, "job") == 0)
		return 0;
	ssize_t n = errno == EEXIST ? readlinkat(c->dfd, "job", back, sizeof back - 1) : -1;
	if (n < 0) {
		snprintf(why, len, "cannot write %s/job: %s", c->dir, strerror(errno));
		return -1;
	}
	back[n] = '\0';
	if (strcmp(back, text) == 0)
		return 0;
	snprintf(why, len,
		 "the claims folder %s is another job's (%s/job says \"%.20s\", this job is "
		 "%016" PRIx64 ": its generator or the generator's keys differ): its claims say "
		 "nothing of this job's tasks; give this job a claims folder of its own "
		 "([job] claims), or remove %s to start over",
		 c->dir, c->dir, back, stream_id, c->dir);
	return -1;
}

int claims_open(struct claims *c, const struct claims_job *job, unsigned rank, unsigned ranks,
		int mode, char *why, size_t len)
{
	const char *dir = job->dir;
	struct chain ch = {0};
	*c = (struct claims){.dfd = -1,
			     .alive_fd = -1,
			     .rank = rank,
			     .ranks = ranks,
			     .batch = 1,
			     .total_chunks = UINT64_MAX,
			     .total_ids = UINT64_MAX};
	c->nonce = (uint64_t)getpid() << 32 ^ wait_now_ns();
	if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
		snprintf(why, len, "cannot make the claims folder %s: %s", dir, strerror(errno));
		return -1;
	}
	c->dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (c->dfd < 0) {
		snprintf(why, len, "cannot open the claims folder %s: %s", dir, strerror(errno));
		return -1;
	}
	c->no_new = getenv("GPUD_TAKEOVER") != NULL;
	c->dir = strdup(dir);
	if (!c->dir) {
		snprintf(why, len, "out of memory");
		goto fail;
	}
	if (mode != CLAIMS_LOOK && job->stream_id && check_job(c, job->stream_id, why, len) < 0)
		goto fail;
	/* The chain already there, from chunk 0. */
	if (chain_walk(c, &ch, UINT64_MAX, why, len) < 0)
		goto fail;
	/* Before anything is claimed: every rank's journal against its claims (this
	 * rank's own as this run names it, the others' as journal.r<K> does), so a lost
	 * claim is refused rather than claimed again by whoever comes first. */
	if (mode != CLAIMS_LOOK) {
		unsigned n = ranks;
		for (size_t i = 0; i < ch.n; i++)
			if (ch.v[i].rank != UINT_MAX && ch.v[i].rank >= n)
				n = ch.v[i].rank + 1;
		for (unsigned r = 0; r < n || r <= rank; r++) {
			char name[48], path[4096];
			const char *p = NULL;
			if (r == rank) {
				p = mode == CLAIMS_RESUME ? job->journal : NULL;
			} else {
				snprintf(name, sizeof name, "journal.r%u", r);
				ssize_t l = readlinkat(c->dfd, name, path, sizeof path - 1);
				if (l > 0) {
					path[l] = '\0';
					p = path;
				}
			}
			if (p && check_journal(c, &ch, r, p, why, len) < 0) {
				/* Kept in the folder, so a rank with no journal yet, started
				 * after this one, does not claim what the lost claims held. */
				char mark[64];
				snprintf(mark, sizeof mark, "rank %u found its claims lost", r);
				symlinkat(mark, c->dfd, "lost");
				goto fail;
			}
		}
		if (check_gaps(c, &ch, why, len) < 0)
			goto fail;
		char lost[64];
		ssize_t nl = readlinkat(c->dfd, "lost", lost, sizeof lost - 1);
		if (nl > 0) {
			lost[nl] = '\0';
			snprintf(
				why, len,
				"the claims folder %s is marked lost (%s/lost: \"%.40s\"): a journal "
				"holds tasks done that no claim covers, so claiming here could run them "
				"again; restore the claims folder as it was (without lost), or start the "
				"whole job over (remove %s, then run every rank without --resume, with "
				"--force)",
				dir, dir, lost, dir);
			goto fail;
		}
	}
	for (size_t i = 0; i < ch.n; i++) {
		const struct link *l = &ch.v[i];
		char text[128];
		if (l->rank == UINT_MAX) {
			if (mode == CLAIMS_LOOK || getenv("GPUD_TAKEOVER")) {
				c->cursor = l->first + l->len; /* nobody's: a look, or a
								  takeover's child */
				continue;
			}
			/* A gap the MPI counter left (check_gaps): this rank's, in claims of
			 * at most CLAIMS_MAX_BATCH; a rank that fills it first wins. */
			while (c->cursor < l->first + l->len) {
				uint64_t n = l->first + l->len - c->cursor;
				if (n > CLAIMS_MAX_BATCH)
					n = CLAIMS_MAX_BATCH;
				snprintf(text, sizeof text,
					 "r%u n%" PRIu64 " of%u p%d x%016" PRIx64, rank, n, ranks,
					 (int)getpid(), c->nonce);
				char name[32];
				claim_name(name, sizeof name, c->cursor);
				if (symlinkat(text, c->dfd, name) == 0) {
					if (own_add(c, c->cursor, c->cursor + n) < 0) {
						snprintf(why, len, "out of memory");
						goto fail;
					}
					c->cursor += n;
					continue;
				}
				if (errno != EEXIST) {
					snprintf(why, len, "cannot claim %s/%s: %s", dir, name,
						 strerror(errno));
					goto fail;
				}
				/* another rank's fill: read as any claim */
				struct claim cl;
				int rc = claim_read(c, c->cursor, &cl, text, sizeof text);
				if (rc != 0) {
					snprintf(why, len, "%s/%s: %s", dir, name,
						 rc == 1           ? "went away"
						 : errno == EINVAL ? "not a claim gpud made"
								   : strerror(errno));
					goto fail;
				}
				if (note_of(c, cl.rank, cl.ranks) < 0) {
					snprintf(why, len, "out of memory");
					goto fail;
				}
				c->cursor += cl.len;
			}
			continue;
		}
		/* A run of another number of ranks (a resume with more or fewer): its
		 * ranks are waited for, and finished by the others when none runs them. */
		if (note_of(c, l->rank, l->ranks) < 0) {
			snprintf(why, len, "out of memory");
			goto fail;
		}
		if (l->rank == rank && mode != CLAIMS_LOOK) {
			if (mode == CLAIMS_FRESH) {
				snprintf(why, len,
					 "the claims folder %s holds claims rank %u made in an "
					 "earlier run (c%016" PRIx64 "): --resume goes on from "
					 "them; remove the folder to start over",
					 dir, rank, l->first);
				goto fail;
			}
			if (own_add(c, l->first, l->first + l->len) < 0) {
				snprintf(why, len, "out of memory");
				goto fail;
			}
		}
		c->cursor = l->first + l->len;
	}
	free(ch.v);
	c->cur = 0;
	return 0;
fail:
	free(ch.v);
	claims_close(c);
	return -1;
}

void claims_close(struct claims *c)
{
	if (c->beating) {
		atomic_store(&c->stop, true);
		pthread_join(c->beat, NULL);
	}
	if (c->alive_fd >= 0)
		close(c->alive_fd);
	mpi_counter_close(c->mpi); /* collective: after every rank's sweep */
	if (c->dfd >= 0)
		close(c->dfd);
	free(c->dir);
	free(c->own);
	free(c->of);
	*c = (struct claims){.dfd = -1, .alive_fd = -1};
}

void claims_set_total(struct claims *c, uint64_t total)
{
	c->total_ids = total;
	c->total_chunks = (total + RANKS_CHUNK - 1) / RANKS_CHUNK;
	/* For `gpud status`, which does not open the generator: every rank's is the same
	 * (the first one made stays). */
	char text[32];
	snprintf(text, sizeof text, "%" PRIu64, total);
	if (c->dfd >= 0)
		symlinkat(text, c->dfd, "total");
}

/* The next claim's length: this rank's rate over its last claim, the cost of claiming,
 * and (counted tasks) what is left. */
static uint64_t next_batch(struct claims *c, uint64_t now)
{
	uint64_t b = c->batch, floor = 1;
	if (c->claims && c->n_own) {
		const struct claims_range *p = &c->own[c->n_own - 1];
		uint64_t took = now - c->last_ns, done = p->end - p->first;
		uint64_t target = c->cost_ns * CLAIMS_COST_FACTOR;
		if (target < CLAIMS_TARGET_NS)
			target = CLAIMS_TARGET_NS;
		/* What the last claim's rate makes of the target, growing at most 8x a
		 * claim (the first claims' times hold the workers' start). */
		if (took == 0 || took < target / 8)
			b = done * 8;
		else
			b = (uint64_t)((double)done * (double)target / (double)took + 0.5);
		/* Near the end too, a claim covers 100 times its cost: at no-op speed a
		 * chunk of 64 ids takes less time than claiming it. */
		if (took)
			floor = (uint64_t)((double)done * 100.0 * (double)c->cost_ns /
					   (double)took);
	}
	if (b < 1)
		b = 1;
	if (b > CLAIMS_MAX_BATCH)
		b = CLAIMS_MAX_BATCH;
	if (c->total_chunks != UINT64_MAX && c->cursor < c->total_chunks) {
		uint64_t left = c->total_chunks - c->cursor;
		uint64_t guided = (left + 2 * c->ranks - 1) / (2 * (uint64_t)c->ranks);
		if (b > guided)
			b = guided > floor ? guided : floor;
		if (b > left)
			b = left;
	}
	return b < 1 ? 1 : b;
}

/* A claim of n chunks made, started at t0: counted, and published for the metrics. The
 * cost is a running mean (collisions included). */
static void count_claim(struct claims *c, uint64_t t0, uint64_t n)
{
	uint64_t t1 = wait_now_ns();
	c->claims++;
	c->claim_ns += t1 - t0;
	c->cost_ns = c->claim_ns / c->claims;
	c->last_ns = t1;
	c->batch = n;
	atomic_store_explicit(&c->pub_claims, c->claims, memory_order_relaxed);
	atomic_store_explicit(&c->pub_ids, claims_nth(c, c->total_ids), memory_order_relaxed);
	atomic_store_explicit(&c->pub_ns, c->claim_ns, memory_order_relaxed);
}

/* One claim at the end of the chain; 0 (own[] has it, or another rank won it and the
 * cursor went past it), 1 when every chunk is claimed, -1 with why. */
static int claim_next(struct claims *c, char *why, size_t len)
{
	if (c->cursor >= c->total_chunks) {
		c->ended = true;
		return 1;
	}
	uint64_t t0 = wait_now_ns();
	uint64_t n = next_batch(c, t0);
	char name[32], text[128], back[128];
	claim_name(name, sizeof name, c->cursor);
	snprintf(text, sizeof text, "r%u n%" PRIu64 " of%u p%d x%016" PRIx64, c->rank, n, c->ranks,
		 (int)getpid(), c->nonce + c->claims + c->collisions);
	int rc = symlinkat(text, c->dfd, name);
	if (rc < 0 && errno != EEXIST) {
		snprintf(why, len, "cannot claim %s/%s: %s", c->dir, name, strerror(errno));
		return -1;
	}
	struct claim cl = {.rank = c->rank, .ranks = c->ranks, .len = n};
	if (rc < 0) {
		/* Another rank's, or ours after all: over NFS, a create retried after a lost
		 * reply finds what the first try made. The text tells, nonce and all. */
		int r = claim_read(c, c->cursor, &cl, back, sizeof back);
		if (r != 0) {
			snprintf(why, len, "cannot read the claim %s/%s: %s", c->dir, name,
				 r == 1 ? "it went away (the folder was emptied while ranks ran)"
				 : errno == EINVAL ? "not a claim gpud made"
						   : strerror(errno));
			return -1;
		}
		if (strcmp(back, text) != 0) {
			if (note_of(c, cl.rank, cl.ranks) < 0) {
				snprintf(why, len, "out of memory");
				return -1;
			}
			c->collisions++;
			c->cursor += cl.len;
			c->claim_ns += wait_now_ns() - t0;
			return 0;
		}
	}
	if (own_add(c, c->cursor, c->cursor + n) < 0) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	c->cursor += n;
	count_claim(c, t0, n);
	return 0;
}

/* One claim where the MPI counter says; as claim_next. */
static int claim_counted(struct claims *c, char *why, size_t len)
{
	if (c->ended)
		return 1;
	uint64_t t0 = wait_now_ns();
	uint64_t n = next_batch(c, t0), at;
	if (mpi_counter_add(c->mpi, n, &at) < 0) {
		snprintf(why, len, "MPI_Fetch_and_op on the claims counter failed");
		return -1;
	}
	if (at >= c->total_chunks) {
		c->ended = true;
		return 1;
	}
	if (c->total_chunks != UINT64_MAX && n > c->total_chunks - at)
		n = c->total_chunks - at;
	char name[32], text[128];
	claim_name(name, sizeof name, at);
	snprintf(text, sizeof text, "r%u n%" PRIu64 " of%u p%d x%016" PRIx64 " mpi", c->rank, n,
		 c->ranks, (int)getpid(), c->nonce + c->claims);
	/* The counter gave [at, at + n) to this rank alone: the name is free. */
	if (symlinkat(text, c->dfd, name) < 0) {
		snprintf(why, len, "cannot record the claim %s/%s: %s", c->dir, name,
			 errno == EEXIST ? "it exists (a process claims there without the MPI "
					   "counter)"
					 : strerror(errno));
		return -1;
	}
	if (own_add(c, at, at + n) < 0) {
		snprintf(why, len, "out of memory");
		return -1;
	}
	/* Every chunk below at + n is claimed (the counter passed it), if not recorded
	 * yet: the end of the chain as this rank knows it. */
	if (at + n > c->cursor)
		c->cursor = at + n;
	count_claim(c, t0, n);
	return 0;
}

/* Whether this process is the gpud command (not a program using libgpud). */
static bool gpud_command(void)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return false;
	exe[n] = '\0';
	const char *base = strrchr(exe, '/');
	return strcmp(base ? base + 1 : exe, "gpud") == 0;
}

int claims_use_mpi(struct claims *c, char *note, size_t note_len, char *why, size_t len)
{
	note[0] = '\0';
	if (c->no_new)
		return 0;
	/* A program using libgpud may have MPI plans of its own. */
	if (!gpud_command()) {
		snprintf(note, note_len, "not the gpud command");
		return 0;
	}
	int rc = mpi_counter_open(&c->mpi, c->rank, c->ranks, c->cursor, why, len);
	if (rc > 0) {
		snprintf(note, note_len, "%s", why);
		return 0;
	}
	return rc;
}

uint64_t claims_from(struct claims *c, uint64_t id, char *why, size_t len)
{
	for (;;) {
		if (id < c->hi && id >= c->lo)
			return id;
		/* A later claim of ours, already made (a resumed run's). */
		while (c->cur < c->n_own && c->own[c->cur].end * RANKS_CHUNK <= id)
			c->cur++;
		if (c->cur < c->n_own) {
			c->lo = c->own[c->cur].first * RANKS_CHUNK;
			c->hi = c->own[c->cur].end * RANKS_CHUNK;
			c->lo_nth = c->own[c->cur].nth;
			if (id < c->lo)
				id = c->lo;
			continue;
		}
		/* Past every claim of ours: the chain's end is where the next one goes (the
		 * stream never runs ahead of the chain: it jumps only to claims). A
		 * takeover's child ends here: the ranks that wait claimed the rest. */
		int rc = c->no_new ? 1
			 : c->mpi  ? claim_counted(c, why, len)
				   : claim_next(c, why, len);
		if (rc != 0) {
			if (rc > 0)
				why[0] = '\0';
			return UINT64_MAX;
		}
	}
}

uint64_t claims_nth_slow(const struct claims *c, uint64_t id)
{
	uint64_t ch = id / RANKS_CHUNK;
	size_t a = 0, b = c->n_own;
	while (a < b) { /* the first claim that ends after ch */
		size_t m = (a + b) / 2;
		if (c->own[m].end <= ch)
			a = m + 1;
		else
			b = m;
	}
	if (a == c->n_own) {
		if (!c->n_own)
			return 0;
		const struct claims_range *p = &c->own[c->n_own - 1];
		return p->nth + (p->end - p->first) * RANKS_CHUNK;
	}
	const struct claims_range *r = &c->own[a];
	if (id <= r->first * RANKS_CHUNK)
		return r->nth;
	return r->nth + (id - r->first * RANKS_CHUNK);
}

bool claims_foreign(void *claims, uint64_t chunk)
{
	struct claims *c = claims;
	return chunk < c->cursor && !claims_mine(c, chunk * RANKS_CHUNK);
}

/* ---- the lease ---- */

extern char **environ;

static void *beat_main(void *arg)
{
	struct claims *c = arg;
	uint64_t period = (uint64_t)(c->lease / 4 * 1e9), last = wait_now_ns();
	while (!atomic_load(&c->stop)) {
		struct timespec nap = {0, 20000000}; /* looks at `stop` every 20 ms */
		nanosleep(&nap, NULL);
		uint64_t now = wait_now_ns();
		if (now - last >= period) {
			futimens(c->alive_fd, NULL); /* a failure shows as a stale lease */
			last = now;
		}
		if (c->mpi) /* others' adds to rank 0's counter, and to no one's harm elsewhere */
			mpi_counter_progress(c->mpi);
	}
	return NULL;
}

int claims_live(struct claims *c, double lease, const char *journal, char *why, size_t len)
{
	char name[48];
	c->lease = lease;
	/* journal.r<K>: where this rank's journal is, for `gpud status` (a link made
	 * aside and renamed over the last one). */
	char *abs = journal ? realpath(journal, NULL) : NULL;
	if (abs) {
		char tmp[64];
		snprintf(tmp, sizeof tmp, ".journal.r%u.%d", c->rank, (int)getpid());
		snprintf(name, sizeof name, "journal.r%u", c->rank);
		unlinkat(c->dfd, tmp, 0);
		if (symlinkat(abs, c->dfd, tmp) < 0 || renameat(c->dfd, tmp, c->dfd, name) < 0) {
			snprintf(why, len, "cannot write %s/%s: %s", c->dir, name, strerror(errno));
			unlinkat(c->dfd, tmp, 0);
			free(abs);
			return -1;
		}
		free(abs);
	}
	snprintf(name, sizeof name, "done.r%u", c->rank);
	if (unlinkat(c->dfd, name, 0) < 0 && errno != ENOENT) {
		snprintf(why, len, "cannot remove %s/%s: %s", c->dir, name, strerror(errno));
		return -1;
	}
	snprintf(name, sizeof name, "alive.r%u", c->rank);
	c->alive_fd = openat(c->dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
	if (c->alive_fd < 0 || futimens(c->alive_fd, NULL) < 0) {
		snprintf(why, len, "cannot write %s/%s: %s", c->dir, name, strerror(errno));
		return -1;
	}
	atomic_store(&c->stop, false);
	/* Signals are the host loop's: the lease thread never takes one (its handler would
	 * run there, racing with the loop's restoring of the handlers). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	int started = pthread_create(&c->beat, NULL, beat_main, c);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (started != 0) {
		snprintf(why, len, "cannot start the thread that renews the lease");
		return -1;
	}
	c->beating = true;
	return 0;
}

void claims_finished(struct claims *c)
{
	char name[48];
	snprintf(name, sizeof name, "done.r%u", c->rank);
	int fd = openat(c->dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
	if (fd < 0)
		fprintf(LOG_ERR,
			"gpud: cannot write %s/%s: %s; the other ranks will take this "
			"rank for lost, and find its share finished\n",
			c->dir, name, strerror(errno));
	else
		close(fd);
}

static bool has(struct claims *c, const char *fmt, unsigned r)
{
	char name[48];
	snprintf(name, sizeof name, fmt, r);
	return faccessat(c->dfd, name, F_OK, 0) == 0;
}

/* The arguments of `gpud run ... --rank R/N --resume --ui off`, from this process's
 * own (a NULL-terminated array of pointers into *buf; free both), or NULL when this is
 * not the gpud command running a job file (libgpud, Python). */
static char **takeover_argv(unsigned r, unsigned n, char **buf, char *exe, size_t exe_len)
{
	ssize_t el = readlink("/proc/self/exe", exe, exe_len - 1);
	if (el <= 0)
		return NULL;
	exe[el] = '\0';
	const char *base = strrchr(exe, '/');
	if (strcmp(base ? base + 1 : exe, "gpud") != 0)
		return NULL;
	FILE *f = fopen("/proc/self/cmdline", "re");
	if (!f)
		return NULL;
	size_t cap = 4096, len = 0;
	char *b = malloc(cap + 64);
	while (b && !feof(f)) {
		if (len == cap) {
			char *nb = realloc(b, (cap *= 2) + 64);
			if (!nb) {
				free(b);
				b = NULL;
				break;
			}
			b = nb;
		}
		len += fread(b + len, 1, cap - len, f);
		if (ferror(f))
			break;
	}
	fclose(f);
	if (!b)
		return NULL;
	size_t args = 0;
	for (size_t i = 0; i < len; i++)
		args += b[i] == '\0';
	char **v = calloc(args + 8, sizeof *v);
	if (!v || args < 3) {
		free(b);
		free(v);
		return NULL;
	}
	size_t k = 0;
	char *p = b, *end = b + len;
	v[k++] = exe;
	p += strlen(p) + 1; /* argv[0] */
	if (strcmp(p, "run") != 0) {
		free(b);
		free(v);
		return NULL;
	}
	static const char *const drop1[] = {"--resume", "--force", "--retry-failed", NULL};
	static const char *const drop2[] = {"--rank", "--ui", NULL};
	while (p < end) {
		bool skip = false;
		for (size_t i = 0; drop1[i]; i++)
			skip |= !strcmp(p, drop1[i]);
		for (size_t i = 0; drop2[i]; i++) {
			size_t l = strlen(drop2[i]);
			if (!strncmp(p, drop2[i], l) && p[l] == '=')
				skip = true;
			else if (!strcmp(p, drop2[i])) {
				skip = true;
				p += strlen(p) + 1; /* and its value */
			}
		}
		if (!skip && p < end)
			v[k++] = p;
		if (p < end)
			p += strlen(p) + 1;
	}
	char *rank = b + len; /* the 64 bytes kept past the arguments */
	snprintf(rank, 64, "%u/%u", r, n);
	v[k++] = "--resume";
	v[k++] = "--ui";
	v[k++] = "off";
	v[k++] = "--rank";
	v[k++] = rank;
	v[k] = NULL;
	*buf = b;
	return v;
}

/* The number of ranks rank r is one of: its claims', else this run's. */
static unsigned rank_of(const struct claims *c, unsigned r)
{
	unsigned of = r < c->n_of ? c->of[r] : 0;
	return of > r ? of : c->ranks > r ? c->ranks : r + 1;
}

/* Runs rank r's share to its end as a child; its exit status, or -1. */
static int take_over(struct claims *c, unsigned r)
{
	char exe[4096], *buf = NULL;
	char **v = takeover_argv(r, rank_of(c, r), &buf, exe, sizeof exe);
	if (!v)
		return -1;
	/* The child's environment, made before fork (the lease thread runs: between fork
	 * and exec only async-signal-safe calls): this one's, with GPUD_TAKEOVER (the
	 * child finishes r, and no other) and GPUD_NO_MPI (nor takes part in mpirun's). */
	size_t n = 0;
	while (environ[n])
		n++;
	char **env = calloc(n + 3, sizeof *env);
	if (!env) {
		free(v);
		free(buf);
		return -1;
	}
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "GPUD_TAKEOVER=", 14) &&
		    strncmp(environ[i], "GPUD_NO_MPI=", 12))
			env[k++] = environ[i];
	env[k++] = "GPUD_TAKEOVER=1";
	env[k++] = "GPUD_NO_MPI=1";
	env[k] = NULL;
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		execve(exe, v, env);
		_exit(127);
	}
	free(env);
	free(v);
	free(buf);
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int claims_sweep(struct claims *c, int status)
{
	if (getenv("GPUD_TAKEOVER"))
		return status; /* a takeover's child: its parent sweeps */
	struct seen {
		int64_t mtime;    /* alive.r<R>'s, in ns; -1: none yet */
		uint64_t since;   /* when it was seen to change (this clock) */
		bool given_up;    /* its takeover ended otherwise than finished */
		unsigned refused; /* takeovers it refused, holding its outputs */
	} *seen = calloc(all_ranks(c), sizeof *seen);
	if (!seen)
		return status;
	uint64_t lease_ns = (uint64_t)(c->lease * 1e9), start = wait_now_ns();
	unsigned n = all_ranks(c);
	for (unsigned r = 0; r < n; r++)
		seen[r] = (struct seen){.mtime = -2, .since = start};
	bool said = false;
	for (;;) {
		bool waiting = false;
		for (unsigned r = 0; r < n; r++) {
			if (r == c->rank || seen[r].given_up || has(c, "done.r%u", r))
				continue;
			waiting = true;
			char name[48];
			struct stat st;
			snprintf(name, sizeof name, "alive.r%u", r);
			int64_t m = fstatat(c->dfd, name, &st, 0) == 0
					    ? (int64_t)st.st_mtim.tv_sec * 1000000000 +
						      st.st_mtim.tv_nsec
					    : -1;
			uint64_t now = wait_now_ns();
			if (m != seen[r].mtime) {
				seen[r].mtime = m;
				seen[r].since = now;
				continue;
			}
			if (now - seen[r].since < lease_ns)
				continue;
			/* Lost, or stopped: its locks tell (a stopped one holds them). */
			char lockname[48];
			snprintf(lockname, sizeof lockname, "take.r%u", r);
			int lk = openat(c->dfd, lockname, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
			if (lk < 0 || flock(lk, LOCK_EX | LOCK_NB) < 0) {
				if (lk >= 0)
					close(lk); /* another rank is finishing it */
				seen[r].since = now;
				continue;
			}
			if (has(c, "done.r%u", r)) {
				close(lk);
				continue;
			}
			fprintf(LOG_ERR,
				"gpud: rank %u of %u: no sign of life for %.1f s (%s/%s): finishing "
				"its share (gpud run ... --rank %u/%u --resume)\n",
				r, rank_of(c, r), c->lease, c->dir, name, r, rank_of(c, r));
			int rc = take_over(c, r);
			close(lk);
			if ((rc == 0 || rc == 1) && has(c, "done.r%u", r)) {
				c->takeovers++;
				if (rc == 1 && status == 0)
					status = 1;
				continue;
			}
			if (rc == 2) {
				/* Refused: it still holds its journal and outputs (stopped,
				 * or slow): it is not lost; looked at again after a lease. */
				seen[r].since = wait_now_ns();
				if (++seen[r].refused < CLAIMS_REFUSALS) {
					fprintf(LOG_ERR,
						"gpud: rank %u of %u still holds its outputs (or its "
						"run was refused): not lost; waiting for it\n",
						r, rank_of(c, r));
					continue;
				}
				fprintf(LOG_ERR,
					"gpud: rank %u of %u: no sign of life for %u leases, and "
					"its share could not be taken over: it is left to it (or "
					"to `gpud run ... --rank %u/%u --resume`)\n",
					r, rank_of(c, r), CLAIMS_REFUSALS, r, rank_of(c, r));
				seen[r].given_up = true;
				continue;
			}
			fprintf(LOG_ERR,
				"gpud: rank %u of %u: finishing its share %s (status %d); `gpud run "
				"... --rank %u/%u --resume` finishes it\n",
				r, rank_of(c, r), rc < 0 ? "could not start" : "ended unfinished",
				rc, r, rank_of(c, r));
			seen[r].given_up = true;
			if (status == 0)
				status = 1;
		}
		if (!waiting)
			break;
		if (!said) {
			said = true;
			fprintf(LOG_ERR,
				"gpud: rank %u of %u: waiting for the other ranks to finish "
				"(one that shows no sign of life for %.1f s is finished here)\n",
				c->rank, c->ranks, c->lease);
		}
		/* A look every 50 ms and 1 ms more a rank (a look is a few stats a rank: on
		 * a shared filesystem, 1,000 waiting ranks must not flood its server), at
		 * most a quarter of the lease: the job's end is known that soon after. */
		uint64_t nap_ns = 50000000u + 1000000u * (uint64_t)n;
		if (nap_ns > lease_ns / 4)
			nap_ns = lease_ns / 4;
		struct timespec nap = {(time_t)(nap_ns / 1000000000u),
				       (long)(nap_ns % 1000000000u)};
		nanosleep(&nap, NULL);
	}
	free(seen);
	return status;
}

/* ---- gpud status ---- */

struct rank_view {
	uint64_t claims, ids, done, failed;
	struct journal j;
	bool has_journal;
	char journal[512];
};

/* Prints the missing ids of [from, to) (rank r's claim) as ranges, up to *left more. */
static uint64_t missing_in(const struct journal *j, bool has, uint64_t from, uint64_t to,
			   unsigned *left, FILE *out)
{
	uint64_t n = 0;
	for (uint64_t id = from; id < to;) {
		if (has && journal_is_done(j, id)) {
			id++;
			continue;
		}
		uint64_t a = id;
		while (id < to && !(has && journal_is_done(j, id)))
			id++;
		n += id - a;
		if (*left) {
			(*left)--;
			if (id - a == 1)
				fprintf(out, " %llu", (unsigned long long)a);
			else
				fprintf(out, " %llu-%llu", (unsigned long long)a,
					(unsigned long long)id - 1);
		}
	}
	return n;
}

int claims_status(const char *dir, int64_t total, FILE *out)
{
	struct claims c;
	char why[1200];
	/* Read as rank 0 of whatever the first claim says. */
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		fprintf(out, "  shares: dynamic; no claims folder %s yet (%s)\n", dir,
			strerror(errno));
		return 0;
	}
	char text[128];
	struct claim first;
	c = (struct claims){.dfd = dfd, .alive_fd = -1};
	int rc = claim_read(&c, 0, &first, text, sizeof text);
	close(dfd);
	if (rc != 0) {
		fprintf(out, "  shares: dynamic; no claim in %s yet\n", dir);
		return 0;
	}
	struct claims_job look = {.dir = dir};
	if (claims_open(&c, &look, 0, first.ranks, CLAIMS_LOOK, why, sizeof why) < 0) {
		fprintf(out, "  shares: dynamic; %s\n", why);
		return 2;
	}
	unsigned n = all_ranks(&c);
	struct rank_view *v = calloc(n, sizeof *v);
	if (!v) {
		claims_close(&c);
		return 2;
	}
	for (unsigned r = 0; r < n; r++) {
		char name[48];
		snprintf(name, sizeof name, "journal.r%u", r);
		ssize_t l = readlinkat(c.dfd, name, v[r].journal, sizeof v[r].journal - 1);
		v[r].journal[l > 0 ? l : 0] = '\0';
		v[r].j = (struct journal){.fd = -1, .rank = 0, .ranks = 1};
		v[r].has_journal =
			l > 0 && journal_read(&v[r].j, v[r].journal, why, sizeof why) == 0;
	}
	if (total < 0) { /* the generator's count, as the ranks found it */
		ssize_t l = readlinkat(c.dfd, "total", text, sizeof text - 1);
		if (l > 0) {
			text[l] = '\0';
			total = strtoll(text, NULL, 10);
		}
	}
	uint64_t end_id = c.cursor * RANKS_CHUNK;
	if (total >= 0 && end_id > (uint64_t)total)
		end_id = (uint64_t)total;
	/* The chain again, claim by claim, with who holds it. */
	uint64_t missing = 0;
	unsigned left = 8;
	fprintf(out, "  shares: dynamic, %u ranks, claims in %s: ids 0 to %llu claimed\n", n, dir,
		(unsigned long long)end_id);
	char *miss = NULL;
	size_t miss_len = 0;
	FILE *m = open_memstream(&miss, &miss_len);
	for (uint64_t ch = 0; m && ch < c.cursor;) {
		struct claim cl;
		if (claim_read(&c, ch, &cl, text, sizeof text) != 0)
			break;
		uint64_t a = ch * RANKS_CHUNK, b = (ch + cl.len) * RANKS_CHUNK;
		if (total >= 0 && b > (uint64_t)total)
			b = (uint64_t)total;
		struct rank_view *rv = &v[cl.rank];
		rv->claims++;
		if (b > a) {
			rv->ids += b - a;
			uint64_t miss_here = missing_in(&rv->j, rv->has_journal, a, b, &left, m);
			rv->done += b - a - miss_here;
			missing += miss_here;
		}
		ch += cl.len;
	}
	if (m)
		fclose(m);
	uint64_t now = (uint64_t)time(NULL);
	for (unsigned r = 0; r < n; r++) {
		char name[48], state[96] = "";
		struct stat st;
		snprintf(name, sizeof name, "done.r%u", r);
		if (fstatat(c.dfd, name, &st, 0) == 0) {
			snprintf(state, sizeof state, "finished");
		} else {
			snprintf(name, sizeof name, "alive.r%u", r);
			if (fstatat(c.dfd, name, &st, 0) == 0)
				snprintf(state, sizeof state, "last sign of life %llu s ago",
					 (unsigned long long)(now > (uint64_t)st.st_mtime
								      ? now - (uint64_t)st.st_mtime
								      : 0));
			else
				snprintf(state, sizeof state, "never started");
		}
		fprintf(out,
			"  rank %u: %llu claims, %llu ids, %llu done, %llu to run; %s; journal %s\n",
			r, (unsigned long long)v[r].claims, (unsigned long long)v[r].ids,
			(unsigned long long)v[r].done, (unsigned long long)(v[r].ids - v[r].done),
			state, v[r].journal[0] ? v[r].journal : "(none yet)");
		journal_close(&v[r].j);
	}
	if (missing)
		fprintf(out,
			"  claimed but not done: %llu ids:%s%s\n  (as the journals say: a rank "
			"killed may have lost output its journal had counted; its --resume reads "
			"its output back)\n",
			(unsigned long long)missing, miss ? miss : "", left ? "" : " ...");
	else
		fprintf(out, "  claimed but not done: none\n");
	if (total >= 0 && end_id < (uint64_t)total)
		fprintf(out, "  not claimed yet: ids %llu to %lld\n", (unsigned long long)end_id,
			(long long)total - 1);
	else if (total < 0)
		fprintf(out, "  not claimed yet: whatever the generator yields from id %llu on\n",
			(unsigned long long)end_id);
	free(miss);
	free(v);
	claims_close(&c);
	return 0;
}
