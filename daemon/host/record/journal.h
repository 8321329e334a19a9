/* SPDX-License-Identifier: MIT */
/*
 * The journal of finished tasks (journal.c): what `gpud run --resume` needs to finish an
 * interrupted run without running a finished task again.
 *
 * File: a 64-byte header (magic, version, the job's fingerprint), then 32-byte records,
 * each with its own check word (a torn or corrupt tail is found and cut on open):
 *   DONE   base, mask: the tasks base..base+63 whose bits are set have a final outcome
 *   FAILED id, status: that final outcome was an error (1) or a timeout (2)
 *   END    count: the run finished with every one of its `count` tasks done (the rank's
 *          share, with ranks)
 *   INPUT  tag, a, b: what an input the job names was when the journal was made
 *          (inputs.h); written first, compared on --resume (format 2 on)
 *   SAMPLE id, hash: the hash of task id's input as the generator yielded it, for the
 *          ids journal_sampled() picks; compared when a resumed run's generator yields
 *          that id again, so a stream (standard input, a pipe, a generator reading what
 *          no key names) that changed is noticed too (format 2 on)
 * Records are cumulative (a later DONE for the same base holds at least the earlier
 * bits), appended in batches by journal_flush (at most every JOURNAL_FLUSH_NS, and at
 * the end with fsync).
 *
 * In memory: a low-water mark below which every task is done, and a bitmap window of
 * the done ids above it (O(tasks in flight), plus the span a slow task holds open).
 */
#ifndef GPUD_JOURNAL_H
#define GPUD_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "job/config.h"
#include "record/inputs.h"

#define JOURNAL_FLUSH_NS 100000000u /* 100 ms */

struct journal {
	int fd;
	char *path;
	uint64_t low;    /* every id below is done */
	uint64_t *words; /* words[i]: ids low_word*64 + 64*i ... */
	uint8_t *dirty;  /* per word: to be written */
	size_t n_words, cap_words;
	uint64_t base_word; /* the word of words[0] (low / 64, rounded down) */
	uint64_t done;      /* ids marked done, in the journal and since */
	uint64_t failed;    /* of those, final failures recorded */
	uint64_t *fail_ids; /* failures loaded (sorted), for --retry-failed and status */
	size_t n_fail, cap_fail;
	bool retrying;    /* --retry-failed: a loaded failure that now ends ok is recorded */
	uint8_t *pending; /* records to write */
	size_t pending_len, pending_cap;
	uint64_t records; /* records in the file: the next one's index */
	uint64_t flushed_ns;
	bool ended; /* an END record was read: the run it describes finished */
	uint64_t end_count;
	uint64_t cut_bytes;   /* a torn tail removed on open */
	uint64_t fingerprint; /* the header's */
	unsigned rank, ranks; /* the other ranks' chunks count as done (ranks.h) */
	/* Dynamic shares: whether a chunk is another rank's (claims_foreign), instead of
	 * rank and ranks; NULL: static. */
	bool (*foreign)(void *ctx, uint64_t chunk);
	void *foreign_ctx;
	uint64_t records_loaded;      /* records read on open: a run that adds none leaves it so */
	struct journal_input *inputs; /* the INPUT records read */
	size_t n_inputs;
	/* While a sink tells what its output holds (journal_sink_*): the done set as
	 * loaded, and the failures the output holds (id << 2 | status). */
	uint64_t *was_words, was_low, was_base, was_done;
	uint8_t *was_dirty;
	size_t was_n, was_cap;
	uint64_t *sink_fail;
	size_t n_sink_fail, cap_sink_fail;
	/* SAMPLE records read, sorted by id (the last one for an id holds), compared
	 * unless resumed with --force */
	struct journal_sample *samples;
	size_t n_samples, cap_samples;
	bool compare_samples;
	bool mark_failed; /* journal_mark could not record a task (said once) */
};

struct journal_sample {
	uint64_t id, hash, seq; /* seq: its place in the file */
};

/* The tasks whose inputs the journal keeps a hash of: of a rank's own tasks (`nth`:
 * how many of its tasks come before this one; every task, with one rank), the first 16
 * (a stream that starts elsewhere shifts them all) and one in JOURNAL_SAMPLE_EVERY
 * after. Counted per rank, as each rank has its journal: every 1,024th global id would
 * fall in rank 0's chunks alone with 2, 4, 8 or 16 ranks. One compare per task on the
 * host's path, one hash and 32 bytes of journal per 1,024 tasks. */
#define JOURNAL_SAMPLE_FIRST 16u
#define JOURNAL_SAMPLE_EVERY 1024u
static inline bool journal_sampled(uint64_t nth)
{
	return nth < JOURNAL_SAMPLE_FIRST || (nth & (JOURNAL_SAMPLE_EVERY - 1)) == 0;
}

/* Task `id` (journal_sampled) was yielded with `data`: compared with what the journal
 * recorded for it when resuming, else recorded. 0, or -1 when it differs (the input is
 * not what the journaled run read). */
int journal_sample(struct journal *j, uint64_t id, const void *data, size_t size);
/* Whether the journal holds a sample below `id` to compare (the done prefix is then
 * read through, not jumped, when the input is a stream). */
bool journal_samples_below(const struct journal *j, uint64_t id);
/* The first sampled task at or after `id` the journaled run saw, or UINT64_MAX: a
 * generator that ends before it yields less than that run read (a shorter input). */
uint64_t journal_sample_from(const struct journal *j, uint64_t id);

/* The job's fingerprint: the worker's, the generator's and the sink's plugins and keys,
 * base_seed, and the size and mtime of every file the worker's and the generator's keys
 * name. */
uint64_t journal_fingerprint(const struct cfg *c);

/* Before journal_create, journal_resume or journal_read: j->rank and j->ranks (the
 * other ranks' chunks count as done), or j->foreign and j->foreign_ctx, the rest zero. */

/* Creates (or empties) the journal at `path` for a fresh run, with an INPUT record for
 * each of `in` (n of them). 0, or -1 with why. */
int journal_create(struct journal *j, const char *path, uint64_t fingerprint,
		   const struct journal_input *in, size_t n, char *why, size_t len);
/* Opens the journal at `path` to resume: reads every record, cuts a torn or corrupt
 * tail, checks the fingerprint and that the inputs `in` are as the journal recorded
 * them (unless `force`); with `retry_failed`, the tasks whose final outcome was a
 * failure count as not done. 1 when there is no journal there (a fresh one is
 * created), 0 when loaded, -1 with why. */
int journal_resume(struct journal *j, const char *path, uint64_t fingerprint,
		   const struct journal_input *in, size_t n, bool force, bool retry_failed,
		   char *why, size_t len);
/* Reads a journal without changing it (gpud status). 0, or -1 with why. */
int journal_read(struct journal *j, const char *path, char *why, size_t len);

/* Whether task `id` is done. */
static inline bool journal_is_done(const struct journal *j, uint64_t id)
{
	if (id < j->low)
		return true;
	uint64_t w = id / 64;
	if (w < j->base_word || w - j->base_word >= j->n_words)
		return false;
	return j->words[w - j->base_word] >> (id % 64) & 1;
}

/* A sink whose own output tells what is done: journal_sink_begin sets the loaded done
 * set aside, journal_sink_holds takes the output's word for each task it holds, and
 * journal_sink_end settles the two: what the output holds is done (an ok line for a
 * task wins over a failure line for it: a retry that succeeded). The recorded failures
 * it does not mention: with `writes_failures` (the sink takes error and timeout events,
 * so its output would hold them) they were lost with the output (a crash before its
 * buffer reached the file, an output cut short) and run again; otherwise they stand
 * (unless retrying them). Only what the journal did not know yet is written, so
 * resuming a finished run appends nothing. */
void journal_sink_begin(struct journal *j);
/* journal_sink_holds: 0, or -1 when the done set cannot hold `id` (out of memory, or an
 * id too far past the others for any allocation): nothing is recorded. The caller
 * keeps ids that cannot be the job's tasks out (resume.c). */
int journal_sink_holds(struct journal *j, uint64_t id, int status);
void journal_sink_end(struct journal *j, bool writes_failures);
/* Instead of journal_sink_end, for a sink that found it cannot read its output back
 * (standard output, a FIFO): the journal as loaded decides. */
void journal_sink_cancel(struct journal *j);
/* Task `id` has its final outcome: status 0 ok, 1 error, 2 timeout. */
void journal_mark(struct journal *j, uint64_t id, int status);

/* journal_mark(j, id, 0), on every task's path: a bit set in the window when it holds
 * the id, the rest out of line. */
static inline void journal_mark_ok(struct journal *j, uint64_t id)
{
	uint64_t w = id / 64 - j->base_word;
	if (id >= j->low && w < j->n_words && !j->retrying) {
		uint64_t old = j->words[w], bit = UINT64_C(1) << (id % 64);
		j->words[w] = old | bit;
		j->done += !(old & bit);
		j->dirty[w] = 1;
		return;
	}
	journal_mark(j, id, 0);
}
/* Writes what was marked; with `sync`, fsyncs too. 0, or -1 (errno set). */
int journal_flush(struct journal *j, bool sync);
/* Records that the run finished with `count` tasks, all done; flushes and syncs. */
int journal_end(struct journal *j, uint64_t count);
void journal_close(struct journal *j);

#endif
