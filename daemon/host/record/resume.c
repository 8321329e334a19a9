/* SPDX-License-Identifier: MIT */
/* The journal in a run: opened or resumed before anything runs, the done tasks skipped
 * (with the generator's and the sink's help where they offer it), sealed at the end;
 * and `gpud status`. */
#define _GNU_SOURCE
#include "record/resume.h"
#include "util/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader.h"
#include "cluster/claims.h"
#include "cluster/ranks.h"
#include "record/outputs.h"
#include "util/say.h"

/* A run without --resume starts over: it empties the journal, and the jsonl sink its
 * file. When the journal holds outcomes of an earlier run of this same job (its
 * fingerprint) and a sink key names a file with something in it (outputs_sink_fills),
 * that is finished work to lose, most often a --resume forgotten: refused (-1, said)
 * unless --force. Another job's journal, or an output that is appended to, not there,
 * standard output or a folder, is left to the run as before. */
static int earlier_work(const struct cfg *c, uint64_t fp)
{
	struct journal j = {.fd = -1, .rank = c->rank, .ranks = c->ranks};
	char why[1200], out[700];
	int rc = 0;
	if (access(c->journal, F_OK) == 0 && outputs_sink_fills(c, out, sizeof out) &&
	    journal_read(&j, c->journal, why, sizeof why) == 0 && j.fingerprint == fp &&
	    j.done > 0) {
		char state[96], go_on[300];
		if (j.ended)
			snprintf(state, sizeof state, "it finished all %llu",
				 (unsigned long long)j.end_count);
		else
			snprintf(state, sizeof state, "it did not finish");
		if (j.failed && j.ended)
			snprintf(go_on, sizeof go_on,
				 "%llu of them failed: --resume --retry-failed runs those again "
				 "(--resume alone has nothing left to run)",
				 (unsigned long long)j.failed);
		else if (j.failed)
			snprintf(go_on, sizeof go_on,
				 "--resume goes on from them (nothing finished runs again); "
				 "%llu of them failed: --retry-failed runs those again too",
				 (unsigned long long)j.failed);
		else
			snprintf(go_on, sizeof go_on,
				 "--resume goes on from them (nothing finished runs again)");
		say("%s: the journal %s holds the outcomes of %llu tasks of an earlier run of "
		    "this job (%s), and %s holds its output: a run without --resume would start "
		    "over and empty both; %s; --force starts over anyway",
		    c->path, c->journal, (unsigned long long)j.done, state, out, go_on);
		rc = -1;
	}
	journal_close(&j);
	return rc;
}

int resume_open(struct host *h, struct resume_flags f)
{
	const struct cfg *c = h->cfg;
	char why[1200];
	h->resume.asked = f.resume;
	if (c->journal_off || !c->journal) {
		if (f.resume) {
			say("%s: --resume needs a journal ([job] journal is off)", c->path);
			return -1;
		}
		return 0;
	}
	uint64_t fp = journal_fingerprint(c);
	struct journal_input *in;
	size_t n_in;
	h->journal = (struct journal){.fd = -1, .rank = c->rank, .ranks = c->ranks};
	if (h->claims) { /* dynamic shares: the chunks other ranks claimed */
		h->journal.foreign = claims_foreign;
		h->journal.foreign_ctx = h->claims;
	}
	if (inputs_scan(c, &in, &n_in, why, sizeof why) < 0) {
		say("%s: %s", c->path, why);
		return -1;
	}
	if (!f.resume) {
		if (!f.force && earlier_work(c, fp) < 0) {
			inputs_free(in, n_in);
			return -1;
		}
		int rc = journal_create(&h->journal, c->journal, fp, in, n_in, why, sizeof why);
		inputs_free(in, n_in);
		if (rc < 0) {
			say("%s: %s (set [job] journal to a writable place, or "
			    "journal = off)",
			    c->path, why);
			return -1;
		}
		return 0;
	}
	int rc = journal_resume(&h->journal, c->journal, fp, in, n_in, f.force, f.retry_failed, why,
				sizeof why);
	inputs_free(in, n_in);
	if (rc < 0) {
		say("%s: %s", c->path, why);
		return -1;
	}
	/* A sink that can tell what its output holds is asked even after the end: its
	 * output may have lost lines since (a disk that lost its last writes). */
	bool sink_tells = h->sink_ops->resume != NULL;
	if (rc == 1) {
		/* No journal, but maybe an earlier run's output (a journal deleted or kept
		 * elsewhere): a sink that can tell what it holds keeps it, and those tasks
		 * are not run again; one that cannot is opened as for a fresh run, and we
		 * say so rather than let it empty its output unremarked. */
		if (sink_tells) {
			fprintf(LOG_ERR,
				"gpud: no journal at %s yet: starting from the first task; "
				"what the output of sink %s already holds, if anything, is "
				"kept and not run again\n",
				c->journal, c->sink.plugin);
			h->resume.on = true;
		} else {
			fprintf(LOG_ERR,
				"gpud: no journal at %s yet: starting from the first task (sink "
				"%s cannot tell what an earlier run's output holds: it is "
				"opened as for a fresh run)\n",
				c->journal, c->sink.plugin);
		}
		return 0;
	}
	if (h->journal.cut_bytes)
		fprintf(LOG_ERR,
			"gpud: the journal %s ended in %llu bytes of a record cut short "
			"(a crash while writing); they were removed\n",
			c->journal, (unsigned long long)h->journal.cut_bytes);
	const char *stdin_key = inputs_stdin_key(c);
	if (stdin_key)
		fprintf(LOG_ERR,
			"gpud: note: generator.%s is standard input or a pipe: it "
			"cannot be compared ahead of the run; sampled tasks' inputs are "
			"compared as it is read again, and the rest is known by its place "
			"in it\n",
			stdin_key);
	if (h->journal.ended && !sink_tells) {
		fprintf(LOG_ERR,
			"gpud: %s: already finished: all %llu tasks have their outcome "
			"(%llu failed; --retry-failed runs those again)\n",
			c->path, (unsigned long long)h->journal.end_count,
			(unsigned long long)h->journal.failed);
		return 1;
	}
	h->resume.failed_before = h->journal.retrying ? 0 : h->journal.failed;
	h->resume.on = true;
	return 0;
}

/* Whether `id` can be one of this run's tasks: this rank's, and below the generator's
 * count of them when it tells one. When it does not, the journal as loaded bounds them:
 * the count its END record gave, else every id it knows plus RESUME_STRAY_SPAN (a run's
 * records lost in a crash are never that many). So a file or a line that names some
 * other number (res/20261124 in a 10-task job) is not counted done, and the done set,
 * which spans every id up to the largest, stays in proportion to the job. */
#define RESUME_STRAY_SPAN (UINT64_C(1) << 28) /* 268M ids: a 36 MiB window at most */
static bool may_be_task(const struct host *h, uint64_t id)
{
	const struct cfg *c = h->cfg;
	const struct journal *j = &h->journal;
	if (!shares_mine(h->claims, id, c->rank, c->ranks))
		return false;
	if (h->flow.total >= 0) /* this rank's share: the id's place among its tasks */
		return shares_nth(h->claims, id, c->rank, c->ranks) < (uint64_t)h->flow.total;
	if (j->end_count) /* this rank's count, as resume_finish writes it */
		return shares_nth(h->claims, id, c->rank, c->ranks) < j->end_count;
	uint64_t known = (j->was_base + j->was_n) * 64;
	if (known < j->was_low)
		known = j->was_low;
	return id < known + RESUME_STRAY_SPAN;
}

/* Dynamic shares: whether `id` is a task of the job that no claim of this rank holds
 * (below the generator's count, or near the chain when it tells none). */
static bool unclaimed_task(const struct host *h, uint64_t id)
{
	const struct claims *cl = h->claims;
	if (!cl || claims_mine(h->claims, id))
		return false;
	if (cl->total_ids != UINT64_MAX)
		return id < cl->total_ids;
	return id < cl->cursor * RANKS_CHUNK + RESUME_STRAY_SPAN;
}

/* A task the sink's output already holds. */
static void sink_holds(void *ctx, uint64_t id, int status)
{
	struct host *h = ctx;
	if (unclaimed_task(h, id)) {
		if (h->resume.unclaimed++ == 0)
			h->resume.unclaimed_eg = id;
		return;
	}
	if (!may_be_task(h, id)) {
		if (h->resume.strays++ == 0)
			h->resume.stray_eg = id;
		return;
	}
	if (journal_sink_holds(&h->journal, id, status) < 0 && h->resume.unheld++ == 0)
		h->resume.unheld_eg = id;
}

/* What sink_holds set aside, said once the sink has told all it holds. */
static void say_strays(struct host *h)
{
	const struct cfg *c = h->cfg;
	char bound[160];
	if (h->resume.strays) {
		if (h->flow.total >= 0 && c->ranks > 1)
			snprintf(bound, sizeof bound, "rank %u of %u has %lld of them", c->rank,
				 c->ranks, (long long)h->flow.total);
		else if (h->flow.total >= 0)
			snprintf(bound, sizeof bound, "its tasks are 0 to %lld",
				 (long long)h->flow.total - 1);
		else if (h->journal.end_count)
			snprintf(bound, sizeof bound, "the journal ended with %llu tasks",
				 (unsigned long long)h->journal.end_count);
		else
			snprintf(bound, sizeof bound,
				 "generator %s does not count its tasks: ids "
				 "far past the journal's are taken for strays",
				 c->generator.plugin);
		fprintf(LOG_ERR,
			"gpud: %llu entr%s of the output of sink %s name%s no task of this "
			"job (e.g. task %llu; %s): ignored\n",
			(unsigned long long)h->resume.strays, h->resume.strays == 1 ? "y" : "ies",
			c->sink.plugin, h->resume.strays == 1 ? "s" : "",
			(unsigned long long)h->resume.stray_eg, bound);
	}
	if (h->resume.unheld)
		fprintf(LOG_ERR,
			"gpud: out of memory to hold what the output of sink %s holds: %llu "
			"of its tasks (e.g. task %llu) run again\n",
			c->sink.plugin, (unsigned long long)h->resume.unheld,
			(unsigned long long)h->resume.unheld_eg);
	h->resume.strays = h->resume.unheld = 0;
}

int resume_sink_open(struct host *h, const struct gpud_args *args, struct gpud_error *err)
{
	const struct sink_ops *sink = h->sink_ops;
	if (!h->resume.on || !sink->resume)
		return 1; /* the ordinary open */
	/* Its output is what happened: what it holds is done, whatever the journal says
	 * of successes (a crash may have lost output the journal had already counted).
	 * Failures it does not write (it takes no such events) are the journal's word. */
	journal_sink_begin(&h->journal);
	int rc = sink->resume(args, &h->sink, sink_holds, h, err);
	say_strays(h);
	if (rc >= 0 && h->resume.unclaimed) {
		/* Its output holds results of tasks this rank has no claim of: its claims
		 * were lost (with its journal, or kept where this run does not look), and
		 * whoever claims those ids next would run them again. Nothing is run. */
		struct gpud_error e2 = {{0}};
		journal_sink_cancel(&h->journal);
		if (rc == 0 && sink->finish) {
			struct gpud_run_end end = {.exit_status = 2,
						   .abort_reason = "the run could not start"};
			sink->finish(h->sink, &h->stats, &end, &e2);
		} else if (rc == 0 && sink->close) {
			sink->close(h->sink, &h->stats, &e2);
		}
		const struct cfg *c = h->cfg;
		gpud_fail(err,
			  "its output holds the results of %llu tasks (e.g. task %llu) that no "
			  "claim of rank %u in the claims folder %s covers: the claims were "
			  "removed or replaced since, and resuming would run them again; restore "
			  "the claims folder as it was, or start the whole job over (remove %s, "
			  "then run every rank without --resume, with --force)",
			  (unsigned long long)h->resume.unclaimed,
			  (unsigned long long)h->resume.unclaimed_eg, c->rank, c->claims,
			  c->claims);
		return -1;
	}
	if (rc == 1) {
		/* Opened, but its output cannot be read back (standard output, a FIFO):
		 * the journal as loaded decides what is done. */
		journal_sink_cancel(&h->journal);
		return 0;
	}
	if (rc < 0) {
		/* Failed part-way through its output: what it reported is not the whole
		 * of it, so the journal is left as loaded (nothing runs). */
		journal_sink_cancel(&h->journal);
		return rc;
	}
	/* A sink that takes failures writes them: a recorded one its output does not
	 * hold was lost with the output (its buffer, a crash) and runs again. */
	uint32_t mask = sink->events ? sink->events(h->sink) : GPUD_EVENTS_ALL;
	journal_sink_end(&h->journal, mask & (GPUD_EVENT_BIT(GPUD_TASK_ERROR) |
					      GPUD_EVENT_BIT(GPUD_TASK_TIMEOUT)));
	return rc;
}

/* Appends [first, first + count) to the pairs in *v (n pairs), joining it to the last
 * when they touch. 0, or -1 out of memory. */
static int add_range(uint64_t **v, size_t *n, size_t *cap, uint64_t first, uint64_t count)
{
	if (*n && (*v)[2 * *n - 2] + (*v)[2 * *n - 1] == first) {
		(*v)[2 * *n - 1] += count;
		return 0;
	}
	if (*n == *cap) {
		size_t c = *cap ? 2 * *cap : 64;
		uint64_t *nv = realloc(*v, 2 * c * sizeof *nv);
		if (!nv)
			return -1;
		*v = nv;
		*cap = c;
	}
	(*v)[2 * *n] = first;
	(*v)[2 * *n + 1] = count;
	(*n)++;
	return 0;
}

int resume_tell_sink(struct host *h, struct gpud_error *err)
{
	const struct journal *j = &h->journal;
	unsigned rank = h->cfg->rank, ranks = h->cfg->ranks;
	if (!h->sink_ops->resumed || !h->resume.asked)
		return 0;
	uint64_t *done = NULL, *failed = NULL;
	size_t n = 0, cap = 0, n_failed = 0;
	int rc = -1;
	if (j->fd >= 0) {
		/* Below low every id is done: this rank's chunks of it. Other ranks' chunks
		 * count as done in the journal and are left out. */
		uint64_t end;
		for (size_t r = 0; h->claims && r < h->claims->n_own; r++) {
			uint64_t id = h->claims->own[r].first * RANKS_CHUNK;
			end = h->claims->own[r].end * RANKS_CHUNK;
			if (id >= j->low)
				break;
			if (add_range(&done, &n, &cap, id, (end < j->low ? end : j->low) - id) < 0)
				goto oom;
		}
		for (uint64_t id = ranks_next_own(0, rank, ranks); !h->claims && id < j->low;
		     id = ranks_next_own(end, rank, ranks)) {
			end = ranks > 1 ? (id / RANKS_CHUNK + 1) * RANKS_CHUNK : j->low;
			if (end > j->low)
				end = j->low;
			if (add_range(&done, &n, &cap, id, end - id) < 0)
				goto oom;
		}
		/* Above it, the window's bits. */
		for (size_t w = 0; w < j->n_words; w++) {
			uint64_t base = (j->base_word + w) * 64;
			for (uint64_t m = j->words[w]; m; m &= m - 1) {
				uint64_t id = base + (uint64_t)__builtin_ctzll(m);
				if (id >= j->low && shares_mine(h->claims, id, rank, ranks) &&
				    add_range(&done, &n, &cap, id, 1) < 0)
					goto oom;
			}
		}
		failed = malloc((j->n_fail ? j->n_fail : 1) * sizeof *failed);
		if (!failed)
			goto oom;
		for (size_t i = 0; i < j->n_fail; i++)
			if (journal_is_done(j, j->fail_ids[i]) &&
			    shares_mine(h->claims, j->fail_ids[i], rank, ranks))
				failed[n_failed++] = j->fail_ids[i];
	}
	struct gpud_resume_info info = {
		.done = done, .n_done = n, .failed = failed, .n_failed = n_failed};
	rc = h->sink_ops->resumed(h->sink, &info, err);
	goto out;
oom:
	gpud_fail(err, "out of memory for the list of the tasks earlier runs finished");
out:
	free(done);
	free(failed);
	return rc;
}

int resume_skip_prefix(struct host *h, struct gpud_error *err)
{
	if (!h->resume.on)
		return 0;
	journal_flush(&h->journal, false); /* what the sink reported, and low moved up */
	uint64_t low = h->journal.low;
	if (!h->gen_ops->skip || low == 0)
		return 0;
	/* A stream cannot be compared ahead of the run: its done prefix is read through
	 * (the generator would read it to skip it anyway), so the sampled inputs in it are
	 * compared before anything new runs. */
	if (inputs_stdin_key(h->cfg) && journal_samples_below(&h->journal, low))
		return 0;
	if (h->gen_ops->skip(h->gen, low, err) != 0)
		return -1;
	h->flow.next_id = low;
	h->out.next_deliver = low;
	h->resume.skipped += shares_nth(h->claims, low, h->cfg->rank, h->cfg->ranks);
	return 0;
}

void resume_finish(struct host *h, bool complete)
{
	if (h->journal.fd < 0)
		return;
	/* The count of this rank's tasks (all of them, with one rank). A rank jumps to its
	 * next chunk before the call that finds the end, so next_id may lie past the last
	 * task; the ids it jumped are other ranks', so its share of next_id is exact. */
	uint64_t count = shares_nth(h->claims, h->flow.next_id, h->cfg->rank, h->cfg->ranks);
	int rc = complete ? journal_end(&h->journal, count) : journal_flush(&h->journal, true);
	if (rc < 0)
		fprintf(LOG_ERR,
			"gpud: cannot write the journal %s: %s; --resume may run some "
			"finished tasks again\n",
			h->journal.path, strerror(errno));
}

int resume_status(struct cfg *c, FILE *out, struct resume_figures *fig)
{
	char why[1200];
	struct journal j = {.fd = -1, .rank = c->rank, .ranks = c->ranks};
	if (c->shares == CFG_SHARES_DYNAMIC) {
		/* Every rank's, side by side, from the claims folder. */
		fprintf(out, "%s:\n", c->path);
		return claims_status(c->claims, -1, out);
	}
	if (c->journal_off || !c->journal) {
		say("%s: [job] journal is off: nothing to tell", c->path);
		return 2;
	}
	if (journal_read(&j, c->journal, why, sizeof why) < 0) {
		say("%s: %s", c->path, why);
		journal_close(&j);
		return 2;
	}
	fig->journal = true;
	fig->done = j.done;
	fig->failed = j.failed;
	fig->low = j.low;
	fig->finished = j.ended;
	fprintf(out, "%s: journal %s\n", c->path, c->journal);
	fprintf(out, "  tasks with an outcome: %llu (%llu of them failed)\n",
		(unsigned long long)j.done, (unsigned long long)j.failed);
	fprintf(out, "  every task before %llu has its outcome\n", (unsigned long long)j.low);
	if (j.ended)
		fprintf(out, "  finished: all %llu tasks (a --resume runs nothing%s)\n",
			(unsigned long long)j.end_count,
			j.failed ? "; --retry-failed runs the failed ones again" : "");
	else
		fprintf(out, "  not finished: `gpud run %s --resume` goes on from there\n",
			c->path);
	if (j.cut_bytes)
		fprintf(out,
			"  its last %llu bytes are a record cut short (a --resume removes them)\n",
			(unsigned long long)j.cut_bytes);
	struct journal_input *in;
	size_t n_in;
	char changed[900];
	bool told = false;
	if (inputs_scan(c, &in, &n_in, why, sizeof why) == 0) {
		told = inputs_compare(j.inputs, j.n_inputs, in, n_in, changed, sizeof changed);
		fig->changed |= told;
		if (told)
			fprintf(out, "  %s: --resume refuses it without --force\n", changed);
		inputs_free(in, n_in);
	}
	/* (A changed input file changes the fingerprint too: said once, above.) */
	if (!told && j.fingerprint != journal_fingerprint(c)) {
		fig->changed = true;
		fprintf(out, "  written by another job (its worker, generator, keys or input files "
			     "differ): --resume refuses it without --force\n");
	}
	journal_close(&j);
	return 0;
}

void resume_note_nothing_left(const struct host *h, FILE *f)
{
	/* A --resume that found every task with its outcome ran nothing; when some of
	 * those outcomes are failures, it is --retry-failed that would run them. */
	if (!h->resume.on || !h->resume.failed_before || h->stats.generated)
		return;
	fprintf(f,
		"gpud: nothing left to run: every task already has its outcome, %llu of them "
		"failed; --resume --retry-failed runs those again\n",
		(unsigned long long)h->resume.failed_before);
}
