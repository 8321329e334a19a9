/* SPDX-License-Identifier: MIT */
/* gpud's command line. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "job/catalog.h"
#include "job/config.h"
#include "run/run.h"
#include "job/checks.h"
#include "run/stats.h"
#include "cluster/ranks.h"
#include "cluster/merge.h"
#include "record/outputs.h"
#include "record/runlock.h"

#ifndef GPUD_VERSION
#define GPUD_VERSION "0.0.0"
#endif

static const char usage[] =
	"usage: gpud run JOB.ini [--set SECTION.KEY=VALUE]... [--ui auto|dashboard|plain|off]\n"
	"                        [--stats-json PATH] [--resume [--retry-failed] [--force]]\n"
	"                        [--rank K/N]\n"
	"       gpud check JOB.ini [--set SECTION.KEY=VALUE]... [--import]\n"
	"       gpud status JOB.ini [--set SECTION.KEY=VALUE]...\n"
	"       gpud merge STATS.json...\n"
	"       gpud plugins\n"
	"       gpud --help | --version\n";

static const char help[] =
	"\n"
	"gpud runs a worker plugin over every task a generator plugin yields, with one\n"
	"persistent worker process per GPU slot, and hands every outcome to a sink plugin.\n"
	"\n"
	"commands:\n"
	"  run JOB.ini      run the job\n"
	"  check JOB.ini    parse and validate the job, load every plugin; runs no task\n"
	"  status JOB.ini   how far the run its journal describes got; runs nothing\n"
	"  merge FILES...   the ranks' --stats-json files as one summary (JSON)\n"
	"  plugins          list the plugins found by name (GPUD_PLUGIN_PATH, then built-in)\n"
	"\n"
	"options:\n"
	"  --set SECTION.KEY=VALUE   override (or add) a key of the job file; repeatable\n"
	"  --ui MODE                 auto (default: the dashboard on a terminal, plain\n"
	"                            otherwise), dashboard, plain (a progress line per\n"
	"                            interval, failures as they happen) or off\n"
	"  --stats-json PATH         write the final stats as JSON to PATH\n"
	"  --resume                  finish the run the journal ([job] journal) describes:\n"
	"                            finished tasks do not run again (none there: start)\n"
	"  --retry-failed            --resume, and run the tasks that failed again\n"
	"  --force                   resume a journal another job wrote\n"
	"  --import                  check: import the python plugins' script or module\n"
	"                            (runs its top-level code) in the chosen Python and\n"
	"                            check the class or function, its methods and keys\n"
	"  --rank K/N                run rank K's share of N (default: [job] rank/ranks,\n"
	"                            else from Slurm, Open MPI or PMI, else 0 of 1)\n"
	"  --help, --version\n"
	"\n"
	"exit status of run: 0 every task succeeded; 1 some tasks failed or timed out;\n"
	"2 usage, job-file or plugin error, another run of the job alive, or an input\n"
	"changed since the journaled run (nothing ran); 3 aborted (no worker could be set\n"
	"up, the generator or the sink failed, or interrupted without a journal); 4\n"
	"interrupted (Ctrl-C, SIGTERM, SIGHUP, sink_timeout) with a journal: --resume\n"
	"finishes it.\n"
	"gpud check exits 0 when a run would start, 2 otherwise (another run of the job\n"
	"alive included); gpud status 0, 2 without a journal to read.\n"
	"exit status of merge: 0; 2 when a file is missing, not a stats file, given twice\n"
	"(or two of one rank), of another job or number of ranks, or a rank has no file.\n";

/* Parses the command line into *cmd, *job, sets and opts; returns -1 when the program
 * should exit with *rc right away (help, version, usage errors). */
static int parse_args(int argc, char **argv, const char **cmd, const char **job, char **sets,
		      size_t *n_sets, struct run_opts *opts, int *rc)
{
	const char *ui = "auto";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			printf("%s%s", usage, help);
			*rc = 0;
			return -1;
		} else if (strcmp(a, "--version") == 0) {
			printf("gpud %s (plugin ABI %d.%d)\n", GPUD_VERSION, GPUD_ABI_MAJOR,
			       GPUD_ABI_MINOR);
			*rc = 0;
			return -1;
		} else if (strcmp(a, "--set") == 0 || strcmp(a, "--ui") == 0 ||
			   strcmp(a, "--stats-json") == 0 || strcmp(a, "--rank") == 0) {
			if (i + 1 >= argc) {
				fprintf(stderr, "gpud: %s needs a value\n%s", a, usage);
				*rc = 2;
				return -1;
			}
			const char *v = argv[++i];
			if (strcmp(a, "--set") == 0)
				sets[(*n_sets)++] = (char *)v;
			else if (strcmp(a, "--ui") == 0)
				ui = v;
			else if (strcmp(a, "--rank") == 0)
				opts->rank = v;
			else
				opts->stats_json = v;
		} else if (strncmp(a, "--set=", 6) == 0) {
			sets[(*n_sets)++] = (char *)a + 6;
		} else if (strcmp(a, "--resume") == 0) {
			opts->resume = true;
		} else if (strcmp(a, "--retry-failed") == 0) {
			opts->resume = opts->retry_failed = true;
		} else if (strcmp(a, "--force") == 0) {
			opts->force = true;
		} else if (strcmp(a, "--import") == 0) {
			opts->import_code = true;
		} else if (strncmp(a, "--ui=", 5) == 0) {
			ui = a + 5;
		} else if (strncmp(a, "--rank=", 7) == 0) {
			opts->rank = a + 7;
		} else if (strncmp(a, "--stats-json=", 13) == 0) {
			opts->stats_json = a + 13;
		} else if (a[0] == '-' && a[1] != '\0') {
			fprintf(stderr, "gpud: unknown option %s\n%s", a, usage);
			*rc = 2;
			return -1;
		} else if (!*cmd) {
			*cmd = a;
		} else if (!*job) {
			*job = a;
		} else {
			fprintf(stderr, "gpud: unexpected argument '%s'\n%s", a, usage);
			*rc = 2;
			return -1;
		}
	}
	*rc = 2;
	if (!*cmd) {
		fprintf(stderr, "%s", usage);
		return -1;
	}
	if (strcmp(*cmd, "plugins") == 0) {
		if (*job) {
			fprintf(stderr, "gpud: plugins takes no argument\n%s", usage);
			return -1;
		}
		*rc = catalog_list();
		return -1;
	}
	if (strcmp(*cmd, "run") != 0 && strcmp(*cmd, "check") != 0 && strcmp(*cmd, "status") != 0) {
		fprintf(stderr, "gpud: unknown command '%s'\n%s", *cmd, usage);
		return -1;
	}
	if (!*job) {
		fprintf(stderr, "gpud: %s needs a job file\n%s", *cmd, usage);
		return -1;
	}
	if (opts->import_code && strcmp(*cmd, "check") != 0) {
		fprintf(stderr, "gpud: --import is an option of gpud check, not of %s\n%s", *cmd,
			usage);
		return -1;
	}
	int mode = ui_mode_parse(ui);
	if (mode < 0) {
		fprintf(stderr, "gpud: --ui %s: expected auto, dashboard, plain or off\n", ui);
		return -1;
	}
	opts->ui = (enum ui_mode)mode;
	return 0;
}

int main(int argc, char **argv)
{
	const char *cmd = NULL, *job = NULL;
	struct run_opts opts = {0};
	char **sets = calloc((size_t)argc, sizeof *sets);
	size_t n_sets = 0;
	struct cfg c;
	char err[4096];
	char *stats_owned = NULL;
	int rc;

	/* Workers run the user's code as the same user. Were the host dumpable, any of
	 * them could open /proc/<host>/mem for writing, take the host's descriptors
	 * through /proc/<host>/fd, or ptrace it: the host's state would be theirs to
	 * rewrite. Not dumpable (as OpenSSH's monitor), it is reachable only with
	 * CAP_SYS_PTRACE. Workers are exec'd, which makes them dumpable again: this
	 * protects the host, not the workers from each other. First thing, before any
	 * plugin is loaded. The cost: no core dumps of the host and no `gdb -p` on it
	 * without the capability (docs/reliability.md). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fprintf(stderr,
			"gpud: warning: cannot make the host undumpable (%s): its workers "
			"can reach into it through /proc and ptrace\n",
			strerror(errno));
	if (!sets) {
		perror("gpud");
		return 2;
	}
	if (argc >= 2 && strcmp(argv[1], "merge") == 0) {
		free(sets);
		return merge_main(argc - 2, argv + 2);
	}
	if (parse_args(argc, argv, &cmd, &job, sets, &n_sets, &opts, &rc) < 0)
		goto out;
	if (cfg_load(&c, job, sets, n_sets, err, sizeof err) < 0) {
		fprintf(stderr, "gpud: %s\n", err);
		rc = 2;
		goto out;
	}
	/* Which rank this is (a launcher's, --rank or the job's), and its paths. */
	if (ranks_detect(&c, opts.rank, err, sizeof err) < 0 ||
	    ranks_gpus_auto(&c, err, sizeof err) < 0 ||
	    ranks_apply(&c, &opts.stats_json, &stats_owned, err, sizeof err) < 0) {
		fprintf(stderr, "gpud: %s\n", err);
		cfg_free(&c);
		rc = 2;
		goto out;
	}
	if (c.ranks > 1 && c.ordered) {
		fprintf(stderr,
			"gpud: %s: ordered = true and %u ranks (%s): each rank holds a share "
			"of the ids, so no rank can deliver them in order; drop ordered, or "
			"sort the merged output\n",
			c.path, c.ranks, c.rank_source);
		cfg_free(&c);
		rc = 2;
		goto out;
	}
	/* Two keys naming one file would have the run destroy one output (or an input)
	 * with another: refused before anything is touched. */
	if (strcmp(cmd, "status") != 0 &&
	    outputs_distinct(&c, opts.stats_json, err, sizeof err) < 0) {
		fprintf(stderr, "gpud: %s\n", err);
		cfg_free(&c);
		rc = 2;
		goto out;
	}
	/* Found out now, not after a long run. */
	if (opts.stats_json && check_file_writable(opts.stats_json, err, sizeof err) < 0) {
		fprintf(stderr, "gpud: --stats-json %s: %s\n", opts.stats_json, err);
		cfg_free(&c);
		rc = 2;
		goto out;
	}
	/* One run of a job at a time: a second one, or a --resume racing the first, is
	 * refused; check says so too, status says it runs (runlock.h). */
	struct runlock lock = {.n = 0};
	int held = strcmp(cmd, "run") == 0 ? runlock_take(&lock, &c, err, sizeof err)
					   : runlock_probe(&c, err, sizeof err);
	if (held < 0 && strcmp(cmd, "status") == 0) {
		fprintf(stderr, "gpud: note: %s\n", err);
	} else if (held < 0) {
		fprintf(stderr, "gpud: %s: %s\n", c.path, err);
		cfg_free(&c);
		rc = 2;
		goto out;
	}
	rc = strcmp(cmd, "check") == 0    ? run_check(&c, opts.import_code)
	     : strcmp(cmd, "status") == 0 ? run_status(&c)
					  : run_job(&c, &opts);
	runlock_release(&lock);
	cfg_free(&c);
out:
	free(stats_owned);
	free(sets);
	return rc;
}
