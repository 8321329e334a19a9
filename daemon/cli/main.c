/* SPDX-License-Identifier: MIT */
/* gpud's command line: a client of libgpud (gpud/gpud.h) that parses the arguments,
 * chooses the dashboard, and exits with the run's status. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <gpud/gpud.h>

static const char usage[] =
	"usage: gpud run JOB.ini [--set SECTION.KEY=VALUE]... [--ui auto|dashboard|plain|off]\n"
	"                        [--stats-json PATH] [--resume [--retry-failed]] [--force]\n"
	"                        [--rank K/N]\n"
	"       gpud check JOB.ini [--set SECTION.KEY=VALUE]... [--import]\n"
	"       gpud status JOB.ini [--set SECTION.KEY=VALUE]...\n"
	"       gpud merge STATS.json...\n"
	"       gpud merge-arrays [--dataset NAME] OUT SHARD...\n"
	"       gpud plugins\n"
	"       gpud --help | --version\n";

static const char help[] =
	"\n"
	"gpud runs a worker plugin over every task a generator plugin yields, with one\n"
	"persistent worker process per GPU slot, and hands every outcome to a sink plugin.\n"
	"[stage.NAME] sections run worker plugins on CPU processes before the GPU workers\n"
	"(set a stage's keys with --set stage.NAME.KEY=VALUE).\n"
	"\n"
	"commands:\n"
	"  run JOB.ini      run the job\n"
	"  check JOB.ini    parse and validate the job, load every plugin; runs no task\n"
	"  status JOB.ini   how far the run its journal describes got; runs nothing\n"
	"  merge FILES...   the ranks' --stats-json files as one summary (JSON)\n"
	"  merge-arrays OUT SHARD...\n"
	"                   the ranks' shards of an npy or hdf5 sink joined into OUT by\n"
	"                   task id (--dataset NAME: the hdf5 dataset, default data)\n"
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
	"  --force                   resume a journal another job wrote; without --resume,\n"
	"                            start over although this job's journal and output\n"
	"                            hold finished work (refused otherwise)\n"
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
	"(or two of one rank), of another job or number of ranks, or a rank has no file.\n"
	"exit status of merge-arrays: 0 every row ok; 1 merged, some rows failed (zero in\n"
	"OUT, marked in OUT.done); 2 refused: a task id in two shards or in none, shards\n"
	"that differ, a shard without its .done record (nothing written).\n";

struct args {
	const char *cmd, *job, *ui;
	char **sets; /* SECTION.KEY=VALUE, in order */
	size_t n_sets;
	struct gpud_run_options opts;
};

/* --ui: auto is the dashboard when standard error is a terminal, plain otherwise. */
static int ui_choice(const char *word, enum gpud_ui *ui)
{
	if (!strcmp(word, "off"))
		*ui = GPUD_UI_OFF;
	else if (!strcmp(word, "plain"))
		*ui = GPUD_UI_PLAIN;
	else if (!strcmp(word, "dashboard"))
		*ui = GPUD_UI_DASHBOARD;
	else if (!strcmp(word, "auto"))
		*ui = isatty(2) ? GPUD_UI_DASHBOARD : GPUD_UI_PLAIN;
	else
		return -1;
	return 0;
}

/* An option's value: `--opt VALUE` or `--opt=VALUE`; NULL when `a` is not `opt`. */
static const char *option_value(const char *opt, int argc, char **argv, int *i, bool *missing)
{
	const char *a = argv[*i];
	size_t n = strlen(opt);
	if (strncmp(a, opt, n) != 0)
		return NULL;
	if (a[n] == '=')
		return a + n + 1;
	if (a[n] != '\0')
		return NULL;
	if (*i + 1 >= argc) {
		*missing = true;
		return NULL;
	}
	return argv[++*i];
}

/* Parses the command line into *a; returns -1 when the program should exit with *rc
 * right away (help, version, usage errors, plugins). */
static int parse_args(int argc, char **argv, struct args *a, int *rc)
{
	a->ui = "auto";
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i], *v;
		bool missing = false;
		if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
			printf("%s%s", usage, help);
			*rc = 0;
			return -1;
		} else if (strcmp(arg, "--version") == 0) {
			printf("gpud %s (plugin ABI %d.%d, libgpud API %u.%u)\n", gpud_version(),
			       GPUD_ABI_MAJOR, GPUD_ABI_MINOR, gpud_api_version() >> 16,
			       gpud_api_version() & 0xffff);
			*rc = 0;
			return -1;
		} else if ((v = option_value("--set", argc, argv, &i, &missing))) {
			a->sets[a->n_sets++] = (char *)v;
		} else if ((v = option_value("--ui", argc, argv, &i, &missing))) {
			a->ui = v;
		} else if ((v = option_value("--rank", argc, argv, &i, &missing))) {
			a->opts.rank = v;
		} else if ((v = option_value("--stats-json", argc, argv, &i, &missing))) {
			a->opts.stats_json = v;
		} else if (missing) {
			fprintf(stderr, "gpud: %s needs a value\n%s", arg, usage);
			*rc = 2;
			return -1;
		} else if (strcmp(arg, "--resume") == 0) {
			a->opts.flags |= GPUD_RUN_RESUME;
		} else if (strcmp(arg, "--retry-failed") == 0) {
			a->opts.flags |= GPUD_RUN_RESUME | GPUD_RUN_RETRY_FAILED;
		} else if (strcmp(arg, "--force") == 0) {
			a->opts.flags |= GPUD_RUN_FORCE;
		} else if (strcmp(arg, "--import") == 0) {
			a->opts.flags |= GPUD_CHECK_IMPORT;
		} else if (arg[0] == '-' && arg[1] != '\0') {
			fprintf(stderr, "gpud: unknown option %s\n%s", arg, usage);
			*rc = 2;
			return -1;
		} else if (!a->cmd) {
			a->cmd = arg;
		} else if (!a->job) {
			a->job = arg;
		} else {
			fprintf(stderr, "gpud: unexpected argument '%s'\n%s", arg, usage);
			*rc = 2;
			return -1;
		}
	}
	*rc = 2;
	if (!a->cmd) {
		fprintf(stderr, "%s", usage);
		return -1;
	}
	if (strcmp(a->cmd, "plugins") == 0) {
		if (a->job) {
			fprintf(stderr, "gpud: plugins takes no argument\n%s", usage);
			return -1;
		}
		/* The list as data; its text is what the command prints. */
		struct gpud_plugin_list *list = NULL;
		*rc = gpud_plugins_list(NULL, &list);
		if (list)
			fputs(list->text, stdout);
		gpud_plugins_free(list);
		if (*rc < 0)
			*rc = 2;
		return -1;
	}
	if (strcmp(a->cmd, "run") != 0 && strcmp(a->cmd, "check") != 0 &&
	    strcmp(a->cmd, "status") != 0) {
		fprintf(stderr, "gpud: unknown command '%s'\n%s", a->cmd, usage);
		return -1;
	}
	if (!a->job) {
		fprintf(stderr, "gpud: %s needs a job file\n%s", a->cmd, usage);
		return -1;
	}
	if ((a->opts.flags & GPUD_CHECK_IMPORT) && strcmp(a->cmd, "check") != 0) {
		fprintf(stderr, "gpud: --import is an option of gpud check, not of %s\n%s", a->cmd,
			usage);
		return -1;
	}
	if (ui_choice(a->ui, &a->opts.ui) < 0) {
		fprintf(stderr, "gpud: --ui %s: expected auto, dashboard, plain or off\n", a->ui);
		return -1;
	}
	return 0;
}

static const char merge_arrays_usage[] = "usage: gpud merge-arrays [--dataset NAME] OUT SHARD...\n";

/* `gpud merge-arrays [--dataset NAME] OUT SHARD...`: argv the arguments after it. The
 * library says what it did on standard error (no log callback: as it always did). */
static int merge_arrays(int argc, char **argv)
{
	const char *out = NULL, *dataset = NULL;
	const char **shards = calloc((size_t)argc + 1, sizeof *shards);
	size_t n = 0;
	int rc = 2;
	if (!shards) {
		perror("gpud");
		return 2;
	}
	for (int i = 0; i < argc; i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			printf("%sjoins the ranks' shards of an npy or hdf5 sink (with their .done "
			       "records) into OUT by task id;\nrefuses a task id done in two "
			       "shards or in none. exit status: 0 every row ok, 1 some rows\n"
			       "failed (zero, marked in OUT.done), 2 refused (nothing written)\n",
			       merge_arrays_usage);
			free(shards);
			return 0;
		}
	for (int i = 0; i < argc; i++) {
		if (!strcmp(argv[i], "--dataset") && i + 1 < argc) {
			dataset = argv[++i];
		} else if (!strncmp(argv[i], "--dataset=", 10)) {
			dataset = argv[i] + 10;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			fprintf(stderr, "gpud merge-arrays: unknown option %s\n%s", argv[i],
				merge_arrays_usage);
			goto done;
		} else if (!out) {
			out = argv[i];
		} else {
			shards[n++] = argv[i];
		}
	}
	if (!out || !n) {
		fputs(merge_arrays_usage, stderr);
		goto done;
	}
	struct gpud_arrays_merged *m = NULL;
	rc = gpud_arrays_merge(out, shards, n, dataset, NULL, &m);
	gpud_arrays_merge_free(m);
	if (rc < 0)
		rc = 2;
done:
	free(shards);
	return rc;
}

/* The job file and the --set keys, then the command. */
static int run_command(struct args *a)
{
	gpud_job *job = gpud_job_new();
	int rc = 2;
	if (!job) {
		perror("gpud");
		return 2;
	}
	if (gpud_job_load(job, a->job) < 0)
		goto fail;
	for (size_t i = 0; i < a->n_sets; i++)
		if (gpud_job_set(job, a->sets[i], NULL) < 0)
			goto fail;
	rc = strcmp(a->cmd, "check") == 0    ? gpud_job_check(job, &a->opts)
	     : strcmp(a->cmd, "status") == 0 ? gpud_job_status(job, &a->opts)
					     : gpud_job_run(job, &a->opts);
	const struct gpud_check_report *report = gpud_job_check_report(job);
	if (report) /* check: what it found, as the library keeps it */
		fputs(report->text, stdout);
	const struct gpud_status_report *told = gpud_job_status_report(job);
	if (told) /* status: the same */
		fputs(told->text, stdout);
	if (rc < 0) { /* misuse: cannot happen from here, but say it */
		fprintf(stderr, "gpud: %s\n", gpud_job_error(job));
		rc = 2;
	}
	gpud_job_free(job);
	return rc;
fail:
	fprintf(stderr, "gpud: %s\n", gpud_job_error(job));
	gpud_job_free(job);
	return 2;
}

int main(int argc, char **argv)
{
	struct args a = {.opts = {.size = sizeof a.opts}};
	int rc;

	/* Workers run the user's code as the same user. Were the host dumpable, any of
	 * them could open /proc/<host>/mem for writing, take the host's descriptors
	 * through /proc/<host>/fd, or ptrace it: the host's state would be theirs to
	 * rewrite. Not dumpable (as OpenSSH's monitor), it is reachable only with
	 * CAP_SYS_PTRACE. Workers are exec'd, which makes them dumpable again: this
	 * protects the host, not the workers from each other. First thing, before any
	 * plugin is loaded. The cost: no core dumps of the host and no `gdb -p` on it
	 * without the capability (docs/reliability.md). libgpud leaves this to its
	 * caller (gpud.h). */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fprintf(stderr,
			"gpud: warning: cannot make the host undumpable (%s): its workers "
			"can reach into it through /proc and ptrace\n",
			strerror(errno));
	/* A write past RLIMIT_FSIZE (ulimit -f) fails with EFBIG, which the journal, the
	 * sinks and the merges report naming the file, rather than killing the command
	 * with no word (as Python ignores it too). Before anything is written: the journal
	 * and the sink's output are opened before the run's own handlers go in. */
	signal(SIGXFSZ, SIG_IGN);
	if (argc >= 2 && strcmp(argv[1], "merge") == 0) {
		/* The summary as data; its JSON is what the command prints. */
		struct gpud_stats_merged *m = NULL;
		rc = gpud_stats_merge((const char *const *)argv + 2, (size_t)argc - 2, NULL, &m);
		if (m)
			fputs(m->json, stdout);
		gpud_stats_merge_free(m);
		return rc < 0 ? 2 : rc;
	}
	if (argc >= 2 && strcmp(argv[1], "merge-arrays") == 0)
		return merge_arrays(argc - 2, argv + 2);
	a.sets = calloc((size_t)argc, sizeof *a.sets);
	if (!a.sets) {
		perror("gpud");
		return 2;
	}
	if (parse_args(argc, argv, &a, &rc) == 0)
		rc = run_command(&a);
	free(a.sets);
	return rc;
}
