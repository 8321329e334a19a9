/* SPDX-License-Identifier: MIT */
/* The plugin loader against fixture plugins: one clear line for each way a plugin can
 * be wrong, and nothing in the plugin called before the checks pass. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <criterion/criterion.h>

#include "helpers.h"
#include "loader.h"

static char err[2048];

static char *fixture(const char *name)
{
	char *p;
	cr_assert(asprintf(&p, "%s/%s", t_env("FIXTURES"), name) > 0);
	return p;
}

static void refused(const char *name, enum loader_kind kind, const char *needle)
{
	struct plugin pl;
	char *path = fixture(name);
	cr_expect_eq(loader_open(&pl, path, kind, err, sizeof err), -1, "%s was accepted", name);
	cr_expect(strstr(err, path), "message names the file: %s", err);
	cr_expect(strstr(err, needle), "message '%s' lacks '%s'", err, needle);
	cr_expect(!strchr(err, '\n'), "one line: %s", err);
	free(path);
}

Test(loader, good_worker)
{
	struct plugin pl;
	char *path = fixture("worker-probe.so");
	cr_assert_eq(loader_open(&pl, path, LOADER_WORKER, err, sizeof err), 0, "%s", err);
	cr_expect_str_eq(pl.info->name, "probe");
	cr_expect_str_eq(pl.info->kind, "worker");
	cr_expect(pl.worker.setup != NULL);
	cr_expect(pl.worker.process != NULL);
	cr_expect(pl.worker.process_batch == NULL, "probe exports no batch function");
	cr_expect(pl.gen.open == NULL && pl.sink.open == NULL, "only the worker table is filled");
	loader_close(&pl);
	free(path);
}

Test(loader, good_sink_and_generator)
{
	struct plugin pl;
	char *path = fixture("sink-recorder.so");
	cr_expect_eq(loader_open(&pl, path, LOADER_SINK, err, sizeof err), 0, "%s", err);
	loader_close(&pl);
	free(path);
	path = fixture("generator-failgen.so");
	cr_expect_eq(loader_open(&pl, path, LOADER_GENERATOR, err, sizeof err), 0, "%s", err);
	loader_close(&pl);
	free(path);
}

/* Each table holds what the plugin's ABI minor has: the fixtures export every entry
 * point, but skip, check and resume (1.2), finish and resumed (1.3) and the description
 * (1.1) and keys (1.2) are left out for a plugin declared older. */
Test(loader, tables_follow_abi_minor)
{
	for (unsigned minor = 0; minor <= 3; minor++) {
		struct plugin pl;
		char name[64];
		snprintf(name, sizeof name, "generator-minor%u.so", minor);
		char *path = fixture(name);
		cr_assert_eq(loader_open(&pl, path, LOADER_GENERATOR, err, sizeof err), 0, "%s",
			     err);
		cr_expect_eq(pl.info->abi_minor, minor);
		cr_expect(pl.gen.open && pl.gen.next && pl.gen.close && pl.gen.total,
			  "1.%u generator: the 1.0 entry points", minor);
		cr_expect_eq(pl.gen.skip != NULL, minor >= 2, "1.%u generator: skip", minor);
		cr_expect_eq(pl.gen.check != NULL, minor >= 2, "1.%u generator: check", minor);
		cr_expect_eq(pl.keys != NULL, minor >= 2, "1.%u generator: keys", minor);
		cr_expect_eq(pl.description != NULL, minor >= 1, "1.%u generator: description",
			     minor);
		if (pl.keys) {
			cr_expect_str_eq(pl.keys[0], "start");
			cr_expect_null(pl.keys[1]);
		}
		cr_expect(!pl.sink.open && !pl.worker.setup, "only the generator table is filled");
		loader_close(&pl);
		free(path);

		snprintf(name, sizeof name, "sink-minor%u.so", minor);
		path = fixture(name);
		cr_assert_eq(loader_open(&pl, path, LOADER_SINK, err, sizeof err), 0, "%s", err);
		cr_expect(pl.sink.open && pl.sink.event && pl.sink.close && pl.sink.events,
			  "1.%u sink: the 1.0 entry points", minor);
		cr_expect_eq(pl.sink.resume != NULL, minor >= 2, "1.%u sink: resume", minor);
		cr_expect_eq(pl.sink.check != NULL, minor >= 2, "1.%u sink: check", minor);
		cr_expect_eq(pl.sink.finish != NULL, minor >= 3, "1.%u sink: finish", minor);
		cr_expect_eq(pl.sink.resumed != NULL, minor >= 3, "1.%u sink: resumed", minor);
		cr_expect(!pl.gen.open && !pl.worker.setup, "only the sink table is filled");
		loader_close(&pl);
		free(path);
	}
}

/* (1.6) gpud_sink_tasks and GPUD_SINK_TASK_FAILED belong to sinks of 1.6: a 1.5 sink that
 * exports a function of that name, or returns 1, means nothing by it. */
Test(loader, sink_tasks_and_task_failed_from_1_6)
{
	for (unsigned minor = 5; minor <= 6; minor++) {
		struct plugin pl;
		char name[64];
		snprintf(name, sizeof name, "sink-minor%u.so", minor);
		char *path = fixture(name);
		cr_assert_eq(loader_open(&pl, path, LOADER_SINK, err, sizeof err), 0, "%s", err);
		cr_expect_eq(pl.sink.tasks != NULL, minor >= 6, "1.%u sink: tasks", minor);
		cr_expect_eq(pl.sink.fail_task, minor >= 6, "1.%u sink: fail_task", minor);
		cr_expect(pl.sink.finish && pl.sink.resumed, "1.%u sink: the 1.3 ones", minor);
		loader_close(&pl);
		free(path);
	}
}

/* (1.9) gpud_generator_name and gpud_event.name belong to 1.9: a 1.8 generator's function
 * of that name is never called, and a 1.8 sink gets no name in what was its reserved[0]. */
Test(loader, names_from_1_9)
{
	for (unsigned minor = 8; minor <= 9; minor++) {
		struct plugin pl;
		char name[64];
		snprintf(name, sizeof name, "generator-minor%u.so", minor);
		char *path = fixture(name);
		cr_assert_eq(loader_open(&pl, path, LOADER_GENERATOR, err, sizeof err), 0, "%s",
			     err);
		cr_expect_eq(pl.gen.name != NULL, minor >= 9, "1.%u generator: name", minor);
		loader_close(&pl);
		free(path);
		snprintf(name, sizeof name, "sink-minor%u.so", minor);
		path = fixture(name);
		cr_assert_eq(loader_open(&pl, path, LOADER_SINK, err, sizeof err), 0, "%s", err);
		cr_expect_eq(pl.sink.names, minor >= 9, "1.%u sink: names", minor);
		loader_close(&pl);
		free(path);
	}
}

Test(loader, missing_required_entry_point)
{
	refused("missing-next.so", LOADER_GENERATOR,
		"does not export gpud_generator_next, which every generator plugin must");
	refused("missing-event.so", LOADER_SINK,
		"does not export gpud_sink_event, which every sink plugin must");
}

Test(loader, wrong_abi_major)
{
	refused("bad-abi.so", LOADER_WORKER, "built for plugin ABI 2.0");
}

Test(loader, newer_minor)
{
	char want[64];
	snprintf(want, sizeof want, "built for plugin ABI %d.%d", GPUD_ABI_MAJOR,
		 GPUD_ABI_MINOR + 1);
	refused("newer-minor.so", LOADER_WORKER, want);
}

Test(loader, wrong_kind)
{
	refused("wrong-kind.so", LOADER_WORKER, "is a 'sink' plugin, not a 'worker' plugin");
	refused("worker-probe.so", LOADER_SINK, "is a 'worker' plugin, not a 'sink' plugin");
}

Test(loader, missing_symbol)
{
	refused("missing-sym.so", LOADER_WORKER,
		"exports neither gpud_worker_process nor gpud_worker_process_batch");
}

/* Tasks in flight (1.4): submit and poll resolved together; not for a 1.3 plugin, which
 * then has no way to run a task. */
Test(loader, submit_and_poll)
{
	char *path = fixture("worker-inflight.so");
	struct plugin pl;
	char err[1024];
	cr_assert_eq(loader_open(&pl, path, LOADER_WORKER, err, sizeof err), 0, "%s", err);
	cr_expect(pl.worker.submit && pl.worker.poll);
	cr_expect(!pl.worker.process && !pl.worker.process_batch);
	loader_close(&pl);
	free(path);
	refused("inflight-minor3.so", LOADER_WORKER,
		"exports neither gpud_worker_process nor gpud_worker_process_batch; a worker");
	refused("inflight-no-poll.so", LOADER_WORKER,
		"exports gpud_worker_submit without gpud_worker_poll; tasks in flight need both");
}

/* (1.5) gpud_worker_interrupt, resolved when the plugin exports it. */
Test(loader, interrupt)
{
	const char *names[] = {"worker-interruptible.so", "worker-faulty.so"};
	for (int i = 0; i < 2; i++) {
		char *path = fixture(names[i]);
		struct plugin pl;
		char err[1024];
		cr_assert_eq(loader_open(&pl, path, LOADER_WORKER, err, sizeof err), 0, "%s", err);
		cr_expect_eq(pl.worker.interrupt != NULL, i == 0, "%s", names[i]);
		loader_close(&pl);
		free(path);
	}
}

Test(loader, no_descriptor)
{
	refused("no-info.so", LOADER_WORKER, "not a gpud plugin");
}

Test(loader, unresolved_symbol)
{
	refused("unresolved.so", LOADER_WORKER, "gpud_fixture_symbol_nobody_defines");
}

Test(loader, not_a_shared_object)
{
	refused("not-a-plugin.so", LOADER_WORKER, "cannot load");
}

Test(loader, missing_file)
{
	refused("no-such-plugin.so", LOADER_WORKER, "No such file");
}

Test(loader, find_by_name)
{
	setenv("GPUD_PLUGIN_PATH", t_env("FIXTURES"), 1);
	char *p = loader_find("probe", LOADER_WORKER, err, sizeof err);
	cr_assert(p, "%s", err);
	cr_expect(strstr(p, "/worker-probe.so"), "%s", p);
	free(p);
	p = loader_find("/abs/path.so", LOADER_WORKER, err, sizeof err);
	cr_expect_str_eq(p, "/abs/path.so", "a path is taken as it is");
	free(p);
	p = loader_find("nonesuch", LOADER_SINK, err, sizeof err);
	cr_expect_null(p);
	cr_expect(strstr(err, "sink plugin 'nonesuch': no such built-in plugin"), "%s", err);
	cr_expect(strstr(err, t_env("FIXTURES")), "lists where it looked: %s", err);
}
