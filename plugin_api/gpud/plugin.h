/* SPDX-License-Identifier: MIT */
/*
 * gpud plugin ABI, version 1.8 (1.1 added GPUD_GPU_RETIRED, gpud_plugin_description,
 * gpud_worker_info.flags and batch_size, gpud_task_fatal; 1.2 added gpud_plugin_keys,
 * gpud_generator_check, gpud_sink_check, gpud_task_reject, worker plugins that export
 * only gpud_worker_process_batch, gpud_generator_skip and gpud_sink_resume; 1.3 added
 * gpud_sink_finish and gpud_sink_resumed, with struct gpud_run_end and struct
 * gpud_resume_info; 1.4 added gpud_worker_info.n_gpus and gpu_ids, every GPU of a worker
 * that spans several with `gpus_per_worker`; GPUD_OOM, GPUD_TASK_OOM and gpud_task_oom,
 * with which a worker says a call ran out of memory, so gpud runs its tasks again in
 * smaller calls; and gpud_worker_submit and gpud_worker_poll, which keep up to
 * gpud_worker_info.max_in_flight tasks in flight and finish them in any order; 1.5 added
 * gpud_worker_interrupt, GPUD_TASK_TIMED_OUT and gpud_task_timed_out, with which a
 * worker ends a call that ran past task_timeout itself and keeps its state; 1.6 added
 * gpud_sink_tasks and GPUD_SINK_TASK_FAILED; 1.7 added GPUD_GENERATOR_TASK_FAILED, with
 * which a generator fails one task and goes on; 1.8 added gpud_sink_job and struct
 * gpud_job_info, the job's identity over its ranks; 1.9 added gpud_generator_name, a
 * task's name (a WebDataset sample's key) given by its generator, and
 * gpud_event.name, which carries it to the sink; and the framing of a whole sample,
 * GPUD_SAMPLE_MAGIC with gpud_sample_open/next/find, helpers any minor may use).
 *
 * This is the only header a gpud plugin needs. It is self-contained (libc only) and
 * there is no host library to link: every helper below is `static inline`.
 *
 * A plugin is a shared object that declares itself once with GPUD_PLUGIN(kind, name,
 * version) and exports the entry points of its kind:
 *
 *   worker     runs inside a worker process that sees its GPU as device 0
 *   generator  runs inside the host and yields the tasks
 *   sink       runs inside the host and receives every event
 *
 * Build one with:
 *   cc -shared -fPIC $(pkg-config --cflags gpud) my_plugin.c -o my_plugin.so
 *
 * Ownership, everywhere: the host owns every pointer it passes in (arguments, tasks,
 * inputs, result buffers, events); they are valid only during the call. A plugin owns
 * its `state` and frees it in its cleanup/close function.
 *
 * Threads (docs/architecture.md, Threads). A plugin needs no lock of its own:
 *   worker     every call comes from its worker process's one calling thread (the
 *              process's other thread, a watcher, calls only gpud_worker_interrupt,
 *              ABI 1.5, while a call runs long).
 *   generator  every call comes from the host loop's thread, one at a time; none is
 *              made while another is running.
 *   sink       never two calls at once, but not always from the same thread: while a
 *              gpud_generator_next call is blocked on the loop's thread, the host's
 *              stand-in thread delivers the results that arrive meanwhile, so
 *              gpud_sink_event (and, when the run ends during that call,
 *              gpud_sink_close or gpud_sink_finish) can run on another thread while the generator
 * is still inside its call. A sink and a generator in one shared object must not share unguarded
 * state; a sink must not rely on thread-local storage between calls. Calls on different threads are
 * ordered by the host (what one call wrote, the next one sees). No plugin is called from the
 * dashboard's or the metrics thread.
 */
#ifndef GPUD_PLUGIN_H
#define GPUD_PLUGIN_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The ABI this header describes. The host refuses a plugin built for another major,
 *  and one built for a newer minor than its own. */
#define GPUD_ABI_MAJOR 1
#define GPUD_ABI_MINOR 9

/** Gives a symbol default visibility, so plugins may build with -fvisibility=hidden. */
#if defined(__GNUC__) || defined(__clang__)
#define GPUD_EXPORT __attribute__((visibility("default")))
#else
#define GPUD_EXPORT
#endif

/** One `key = value` line of the plugin's job-file section. */
struct gpud_kv {
	const char *key;
	const char *value;
};

/** The plugin's job-file section, minus `plugin`, in file order, `--set` overrides
 *  applied. Relative paths are already resolved (see docs/reference.md, "Paths"). */
struct gpud_args {
	const struct gpud_kv *items;
	size_t count;
};

/** Where a plugin writes a failure message (NUL-terminated, truncated to fit). */
struct gpud_error {
	char message[1024];
};

/** Host-owned memory the plugin writes into: at most `capacity` bytes at `data`,
 *  then `size` set to the number of bytes written. */
struct gpud_buf {
	void *data;
	size_t size;
	size_t capacity;
};

/** The descriptor every plugin exports as `gpud_plugin_info` (use GPUD_PLUGIN).
 *  kind is "worker", "generator" or "sink"; name and version are free text shown by
 *  gpud. The host reads it before calling anything else. */
struct gpud_plugin_info {
	uint32_t abi_major;
	uint32_t abi_minor;
	const char *kind;
	const char *name;
	const char *version;
};

/* In C++ a namespace-scope const has internal linkage: extern "C" gives it C's. */
#ifdef __cplusplus
#define GPUD_EXTERN_C extern "C"
#else
#define GPUD_EXTERN_C
#endif

#define GPUD_PLUGIN(kind, name, version)                                                           \
	GPUD_EXTERN_C GPUD_EXPORT const struct gpud_plugin_info gpud_plugin_info = {               \
		GPUD_ABI_MAJOR, GPUD_ABI_MINOR, kind, name, version}

/** Optional (ABI 1.1): a one-line description, shown by `gpud plugins`. */
#define GPUD_PLUGIN_DESCRIPTION(text)                                                              \
	GPUD_EXTERN_C GPUD_EXPORT const char gpud_plugin_description[] = text

/** Optional (ABI 1.2): the keys the plugin's job-file section accepts. With it, gpud
 *  (`check` and `run`) refuses any other key, naming the file and line and the nearest
 *  accepted key ("did you mean"); a name ending in '*' accepts every key with that
 *  prefix. Without it, every key reaches the plugin unchecked.
 *    GPUD_PLUGIN_KEYS("path", "append", "include_input");  */
#define GPUD_PLUGIN_KEYS(...)                                                                      \
	GPUD_EXTERN_C GPUD_EXPORT const char *const gpud_plugin_keys[] = {__VA_ARGS__, NULL}
/** (ABI 1.2) The plugin takes no keys at all: any key in its section is refused. */
#define GPUD_PLUGIN_NO_KEYS GPUD_EXTERN_C GPUD_EXPORT const char *const gpud_plugin_keys[] = {NULL}

/* ---------------------------------------------------------------------------------- */
/* Helpers                                                                              */
/* ---------------------------------------------------------------------------------- */

/** The value of `key` in `args`, or `fallback` when absent. The last one wins when a
 *  key appears twice (a `--set` override comes last). */
static inline const char *gpud_arg(const struct gpud_args *args, const char *key,
				   const char *fallback)
{
	const char *found = fallback;
	if (!args)
		return fallback;
	for (size_t i = 0; i < args->count; i++)
		if (args->items[i].key && strcmp(args->items[i].key, key) == 0)
			found = args->items[i].value;
	return found;
}

/** Formats a message into `err` and returns -1, so `return gpud_fail(err, ...);`. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
gpud_fail(struct gpud_error *err, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->message, sizeof err->message, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/** Reads `key` as a whole decimal (or 0x hex) number into *out; *out = fallback when
 *  the key is absent or the value bad. Returns 0, or -1 with a message naming the key
 *  when the value is not a number or out of range. */
static inline int gpud_arg_parse_long(const struct gpud_args *args, const char *key, long fallback,
				      long *out, struct gpud_error *err)
{
	const char *v = gpud_arg(args, key, NULL);
	char *end = NULL;
	long n;
	*out = fallback;
	if (!v)
		return 0;
	errno = 0;
	n = strtol(v, &end, 0);
	if (end == v || *end != '\0' || errno == ERANGE)
		return gpud_fail(err, "%s = '%s': not a whole number in range", key, v);
	*out = n;
	return 0;
}

/** Reads `key` as a number into *out (fallback when absent); -1 with a message when
 *  the value is not a number. */
static inline int gpud_arg_parse_double(const struct gpud_args *args, const char *key,
					double fallback, double *out, struct gpud_error *err)
{
	const char *v = gpud_arg(args, key, NULL);
	char *end = NULL;
	double d;
	*out = fallback;
	if (!v)
		return 0;
	d = strtod(v, &end);
	if (end == v || *end != '\0')
		return gpud_fail(err, "%s = '%s': not a number", key, v);
	*out = d;
	return 0;
}

/** Lenient forms: the value of `key` as a number, or `fallback` when absent or not a
 *  number. Use the gpud_arg_parse_* forms to report bad values. */
static inline long gpud_arg_long(const struct gpud_args *args, const char *key, long fallback)
{
	long n = fallback;
	return gpud_arg_parse_long(args, key, fallback, &n, NULL) == 0 ? n : fallback;
}

static inline double gpud_arg_double(const struct gpud_args *args, const char *key, double fallback)
{
	double d = fallback;
	return gpud_arg_parse_double(args, key, fallback, &d, NULL) == 0 ? d : fallback;
}

/* ---------------------------------------------------------------------------------- */
/* Worker plugins                                                                       */
/* ---------------------------------------------------------------------------------- */

/** What a worker knows about itself, passed to setup. worker_id is 0-based over all
 *  workers of the run; gpu_id is the id from the job's `gpus` list (CUDA sees that GPU
 *  as device 0); seed is base_seed + worker_id; args is the [worker] section. A worker
 *  of `gpus_per_worker = N` sees its N GPUs as devices 0 to N-1: gpu_id is the first,
 *  gpu_ids (ABI 1.4) all of them. The host fills every field for every plugin; a plugin
 *  built against 1.3 or older simply does not read the newer ones. */
struct gpud_worker_info {
	int worker_id;
	int gpu_id;
	uint64_t seed;
	const struct gpud_args *args;
	uint64_t flags;      /* (ABI 1.1) GPUD_WORKER_* bits below */
	unsigned batch_size; /* (ABI 1.1) most tasks a gpud_worker_process_batch call gets */
	/* ABI 1.4: workers that span GPUs. */
	unsigned n_gpus;    /* (ABI 1.4) the GPUs this worker sees: [job] gpus_per_worker */
	const int *gpu_ids; /* (ABI 1.4) their ids from `gpus`, n_gpus of them, in CUDA's
			       order (device i is gpu_ids[i]); gpu_ids[0] == gpu_id */
	/* ABI 1.4: tasks in flight. */
	unsigned max_in_flight; /* (ABI 1.4) most tasks gpud_worker_submit is given before
				   gpud_worker_poll hands one back ([job] max_in_flight) */
	unsigned _pad2;
};

/** flags: task inputs and result buffers live in memory registered with the CUDA
 *  driver (cudaHostRegister, `[job] pin_memory`): cudaMemcpyAsync from task->input or
 *  into task->result.data is a direct DMA, with no staging copy. Absent: plain memory. */
#define GPUD_WORKER_PINNED (UINT64_C(1) << 0)

/** One task, as process() sees it.
 *  input/input_size: the generator's bytes, read-only, in shared memory, valid during
 *  the call. result: shared memory of `capacity` = max_result_bytes; write at most that
 *  and set result.size (a larger size fails the task). To fail the task, call
 *  gpud_task_fail() (or set failed and fill *error) and return -1. */
struct gpud_task {
	uint64_t id; /* 0-based position in the generator's stream */
	const void *input;
	size_t input_size;
	struct gpud_buf result;
	struct gpud_error *error;
	int failed;
	int attempt;       /* 0 on the first run of this task, 1 on the first retry... */
	void *reserved[3]; /* zero; room for later ABI minors ([0]: gpud_call_times_set) */
};

/* What gpud_task_fail/fatal/reject share: the message into task->error. */
static inline void gpud_task_failv_(struct gpud_task *task, const char *fmt, va_list ap)
{
	if (task->error)
		vsnprintf(task->error->message, sizeof task->error->message, fmt, ap);
}

/** task->failed values: 0 not failed; GPUD_TASK_FAILED set by gpud_task_fail() (retried
 *  up to max_retries; any other nonzero value gpud does not name reads the same), the
 *  others by gpud_task_fatal() and gpud_task_reject() (below), gpud_task_oom() and
 *  gpud_task_timed_out(). */
#define GPUD_TASK_FAILED 1
#define GPUD_TASK_FATAL 2
#define GPUD_TASK_REJECT 3

/** (ABI 1.1) Marks `task` failed and this worker unusable (a CUDA error that poisons the
 *  context, like an illegal address): after this call returns, gpud reports the task
 *  failed with the message and replaces the worker through its restart path (setup
 *  runs again in a fresh process). Returns -1. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
gpud_task_fatal(struct gpud_task *task, const char *fmt, ...)
{
	task->failed = GPUD_TASK_FATAL;
	va_list ap;
	va_start(ap, fmt);
	gpud_task_failv_(task, fmt, ap);
	va_end(ap);
	return -1;
}

/** (ABI 1.2) Marks `task` failed for good: its input is bad and running it again cannot
 *  help (unparsable, wrong shape), so it is not retried whatever max_retries says.
 *  Returns -1. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
gpud_task_reject(struct gpud_task *task, const char *fmt, ...)
{
	task->failed = GPUD_TASK_REJECT;
	va_list ap;
	va_start(ap, fmt);
	gpud_task_failv_(task, fmt, ap);
	va_end(ap);
	return -1;
}

/** Marks `task` failed with a formatted message (retried up to max_retries); returns -1. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
gpud_task_fail(struct gpud_task *task, const char *fmt, ...)
{
	task->failed = GPUD_TASK_FAILED;
	va_list ap;
	va_start(ap, fmt);
	gpud_task_failv_(task, fmt, ap);
	va_end(ap);
	return -1;
}

/* ---- Out of memory (ABI 1.4): batches that fit ---- */

/** (ABI 1.4) Returned by gpud_worker_process_batch (or gpud_worker_process): the call ran
 *  out of memory (a CUDA allocation, cudaErrorMemoryAllocation, a host malloc) because
 *  it was given too many tasks at once. gpud does not fail its tasks: every task of the
 *  call that is not marked failed otherwise (gpud_task_fail, _reject, _fatal) runs
 *  again on the same worker in a call half the size, halving down to single tasks; the
 *  results the call wrote for them are dropped. The worker's batch size then adapts
 *  (docs/plugins.md, "Batches that fit"). A single task that runs out of memory alone
 *  fails with "out of memory: this task alone does not fit on the GPU (batch of 1)"
 *  and the plugin's message (retried up to max_retries, like any failure). A plugin
 *  built for ABI 1.3 or older never means this by a return value. */
#define GPUD_OOM (-12)

/** task->failed value set by gpud_task_oom(). */
#define GPUD_TASK_OOM 4

/** (ABI 1.4) Marks `task` out of memory: it runs again in a smaller call (GPUD_OOM);
 *  the other tasks of the call keep what the plugin gave them. The message is kept for
 *  when the task fails alone. Returns GPUD_OOM, so `return gpud_task_oom(task, ...);`
 *  in gpud_worker_process; in gpud_worker_process_batch, mark the tasks and return 0
 *  (or return GPUD_OOM to say the whole call ran out). */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
gpud_task_oom(struct gpud_task *task, const char *fmt, ...)
{
	task->failed = GPUD_TASK_OOM;
	va_list ap;
	va_start(ap, fmt);
	gpud_task_failv_(task, fmt, ap);
	va_end(ap);
	return GPUD_OOM;
}

/* ---- Where a call's time goes (a use of gpud_task.reserved; any ABI 1.x) ---- */

/** Call sizes counted by gpud_call_times: bucket 0 holds calls of 1 item, bucket b calls of
 *  2^(b-1)+1 .. 2^b items. */
#define GPUD_CALL_BUCKETS 17

/** A call's own account of its time, for gpud's breakdown of each worker's time
 *  (docs/reference.md, "Where each worker's time goes"): the nanoseconds the call spent
 *  unpacking its inputs into what the user's code takes, and packing results into their
 *  buffers; gpud counts the rest of the call as the user's code. A plugin that calls the
 *  user's code in calls of its own sizes (several items per task, say) counts those
 *  calls in `calls` by size, their items in `items`, the smallest and largest in
 *  min_items and max_items; all zero: the call counts as one of its n tasks, unless
 *  `counted` says the plugin counted them itself and the call ran none (a task that
 *  holds no item). */
struct gpud_call_times {
	uint64_t unpack_ns;
	uint64_t pack_ns;
	uint64_t items;                /* the items of those calls, all together */
	uint32_t min_items, max_items; /* the smallest and the largest of them */
	uint32_t calls[GPUD_CALL_BUCKETS];
	uint32_t counted; /* nonzero: `calls` is the whole count, even all zero */
};

/** The bucket of a call of n items in gpud_call_times.calls. */
static inline unsigned gpud_call_bucket(size_t n)
{
	unsigned b = 0;
	while (b < GPUD_CALL_BUCKETS - 1 && n > ((size_t)1 << b))
		b++;
	return b;
}

/** Hands gpud the call's account `t`, read when the call returns (so it must live until
 *  then): `first` is the first task of the call (tasks[0] of process_batch, the task of
 *  process). Optional; a gpud-worker that predates it ignores it. */
static inline void gpud_call_times_set(struct gpud_task *first, struct gpud_call_times *t)
{
	first->reserved[0] = t;
}

/** Required. Called once per worker process before any task, on the thread that makes
 *  every later call of this process. Allocate your state
 *  (load the model...) and store it in *state. Returns 0, or -1 with err filled: the
 *  host reports a setup-failed event and runs on with the other workers. */
GPUD_EXPORT int gpud_worker_setup(const struct gpud_worker_info *info, void **state,
				  struct gpud_error *err);
/** Required unless gpud_worker_process_batch is exported (ABI 1.2). Processes one
 *  task: returns 0 with task->result filled, or -1 after gpud_task_fail() (ABI 1.4:
 *  GPUD_OOM after gpud_task_oom(), when the task alone does not fit). */
GPUD_EXPORT int gpud_worker_process(void *state, struct gpud_task *task);
/** Optional. Processes n tasks at once (1 <= n <= info->batch_size; `[job] batch_size`,
 *  `batch_wait_ms`). Each task has its own input and its own result buffer; mark
 *  failures per task (gpud_task_fail, gpud_task_fatal) and return 0. Returning -1 (any
 *  error but GPUD_OOM) fails the call as a whole: with `[job] isolate_failures` (the
 *  default) its tasks not rejected, fatal or timed out run again in halves, down to
 *  single tasks, so that only those that fail alone fail (so the same tasks may be
 *  given again in smaller calls); without it every task of the call fails. (ABI 1.4)
 *  returning GPUD_OOM, or marking tasks with
 *  gpud_task_oom(), runs them again in smaller calls. n may then be below the
 *  worker's batch_size for a while (the batch size adapts). When exported it is called instead of
 * gpud_worker_process, also with n = 1. */
GPUD_EXPORT int gpud_worker_process_batch(void *state, struct gpud_task *tasks, size_t n);
/* ---- (ABI 1.4) Many tasks in flight ---------------------------------------------- */
/*
 * For an engine that schedules requests itself (continuous batching: vLLM, TensorRT-LLM,
 * a CUDA stream per request): the worker hands it tasks as they come, up to
 * `[job] max_in_flight` (info->max_in_flight) before any has finished, and takes them
 * back as they finish, in any order. Export both functions. They are used instead of
 * gpud_worker_process/process_batch when max_in_flight > 1, or when the plugin exports
 * neither of those (then with max_in_flight tasks, 1 by default); batch_size does not
 * apply. Results still reach the sink as with process(): ordered = true holds.
 * Both calls come from the process's one calling thread, like every other; an engine's
 * own threads must not write a task after poll has handed it back.
 * task_timeout counts for each task from its submit; a task still running past it gets
 * the timeout, and the worker is replaced: the other tasks it held run again. A worker
 * that dies with tasks in flight has each of them retried or failed (as a crash), none lost.
 */

/** (ABI 1.4) Takes `task` to run in the background. The task, its input, its result
 *  buffer and its error stay valid and in place until gpud_worker_poll hands the task
 *  back (gpud does not touch them meanwhile): write the result into task->result as
 *  process() would, from any thread of the plugin's. Returns 0 (the task will come back
 *  from poll, exactly once), or -1 with the task marked failed (gpud_task_fail, _reject,
 *  _fatal): it is finished at once and must not come back from poll. */
GPUD_EXPORT int gpud_worker_submit(void *state, struct gpud_task *task);
/** (ABI 1.4) Waits up to timeout_ms milliseconds (0: does not wait) until submitted tasks
 *  have finished; puts up to `max` of them (the same pointers submit was given, each
 *  once, in any order) into done[] and returns how many (0 when none finished in time).
 *  Each one's result or failure is set as process() sets it. gpud calls it only while
 *  tasks are in flight, with timeout_ms of 100 at most, and cleanup only once every task
 *  has come back.
 *  Returns -1 with err filled when this process cannot go on: every task it holds is
 *  then retried or failed (as in a crash) and the worker is replaced. */
GPUD_EXPORT int gpud_worker_poll(void *state, struct gpud_task **done, size_t max, int timeout_ms,
				 struct gpud_error *err);

/* ---- (ABI 1.5) Timeouts ended in place ------------------------------------------ */
/*
 * Without gpud_worker_interrupt, a call of gpud_worker_process or process_batch that runs
 * past task_timeout has its worker killed: its tasks time out, and a fresh worker (setup
 * again, the model loaded again) takes the slot, a restart counted against
 * max_worker_restarts. A worker that can stop a call from inside exports it: gpud then
 * asks the call to end, and kills only when it has not returned within [job]
 * timeout_grace seconds more (C code that never looks, a syscall that never returns).
 * Not used for tasks in flight (gpud_worker_submit/poll), nor with timeout_grace = 0.
 */

/** task->failed value set by gpud_task_timed_out(). */
#define GPUD_TASK_TIMED_OUT 5

/** (ABI 1.5) Marks `task` timed out: its call was interrupted (gpud_worker_interrupt)
 *  before it finished. The task's outcome is a timeout (GPUD_TASK_TIMEOUT, retried when
 *  retry_on has timeout), as if the worker had been killed for it, but the worker goes
 *  on. Only in a call gpud interrupted: anywhere else the mark is a failure like
 *  gpud_task_fail's. The message is the plugin's note (the event says the limit).
 *  Returns -1. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static inline int
gpud_task_timed_out(struct gpud_task *task, const char *fmt, ...)
{
	task->failed = GPUD_TASK_TIMED_OUT;
	va_list ap;
	va_start(ap, fmt);
	gpud_task_failv_(task, fmt, ap);
	va_end(ap);
	return -1;
}

/** Optional (ABI 1.5). Called when the call of gpud_worker_process or
 *  gpud_worker_process_batch now running has run past task_timeout, at most once per
 *  call, from the worker process's other thread (its watcher) while that call runs:
 *  the only call not made from the calling thread. It must return at once and only ask
 *  the call to end (set a flag the call looks at, raise a signal at the calling thread,
 *  cancel the work queued on a stream); it must not touch the tasks. The call then
 *  returns with each task it did not finish marked gpud_task_timed_out() (those it did
 *  finish keep their results), and the worker, its state and its model go on with the
 *  next tasks: no restart. When the call has not returned within timeout_grace seconds
 *  after task_timeout, the worker is killed as without this function. */
GPUD_EXPORT void gpud_worker_interrupt(void *state);

/** Optional. Called once when the run ends (only after a successful setup); free the
 *  state here. Returns 0, or -1 with err filled (reported as a cleanup-failed event). */
GPUD_EXPORT int gpud_worker_cleanup(void *state, struct gpud_error *err);

/* ---------------------------------------------------------------------------------- */
/* Whole samples (the framing: any ABI minor may use these helpers; 1.9 documented it)  */
/* ---------------------------------------------------------------------------------- */

/*
 * A whole sample as one task's bytes: its key and its members (a WebDataset sample's
 * files: "jpg", "cls", "json"...), as the `tar` generator gives it with `members`, and
 * as the `jpeg` stage passes it on. Native byte order (little-endian on every platform
 * gpud runs on); every offset is from the sample's first byte:
 *
 *   0   uint32 magic      GPUD_SAMPLE_MAGIC (the bytes "GPDS")
 *   4   uint32 count      members
 *   8   uint32 key_len    bytes of the key (no NUL)
 *   12  uint32 reserved   0
 *   16  the key
 *   then per member, its header at the next multiple of 8:
 *       uint32 name_len, uint32 reserved (0), uint64 data_len, the name (no NUL),
 *       then its data at the next multiple of GPUD_SAMPLE_ALIGN (64)
 *
 * The sample ends with its last member's data. A task's input is 64-byte aligned, so a
 * member's data is too: an image member can be handed to a decoder or a DMA in place.
 * Names are a member's extension as the shard names it (after the first dot of its file
 * name: "jpg", "seg.png"). Treat a sample as hostile: the helpers check every length
 * against the bytes given and never read past them.
 */
#define GPUD_SAMPLE_MAGIC UINT32_C(0x53445047) /* "GPDS" in memory */
#define GPUD_SAMPLE_ALIGN 64
#define GPUD_SAMPLE_HEADER 16        /* bytes before the key */
#define GPUD_SAMPLE_MEMBER_HEADER 16 /* bytes before a member's name */

/** One member of a sample: pointers into the sample's bytes (valid as long as they are). */
struct gpud_sample_member {
	const char *name; /* not NUL-terminated: name_len bytes */
	size_t name_len;
	const void *data;
	size_t size;
};

/** A sample being walked: gpud_sample_open, then gpud_sample_next until it returns 0. */
struct gpud_sample {
	const char *key; /* not NUL-terminated: key_len bytes */
	size_t key_len;
	uint32_t count; /* members */
	uint32_t index; /* members walked so far */
	const unsigned char *base;
	size_t size;
	size_t at; /* the next member's header */
};

/** Whether `data` (size bytes) begins as a sample does (its magic). */
static inline int gpud_sample_is(const void *data, size_t size)
{
	uint32_t magic;
	if (!data || size < GPUD_SAMPLE_HEADER)
		return 0;
	memcpy(&magic, data, sizeof magic);
	return magic == GPUD_SAMPLE_MAGIC;
}

/** Starts walking the sample in `data`: 0, or -1 when it is not one (too short, another
 *  magic, a key past its end). */
static inline int gpud_sample_open(struct gpud_sample *s, const void *data, size_t size)
{
	uint32_t h[4];
	if (!gpud_sample_is(data, size))
		return -1;
	memcpy(h, data, sizeof h);
	if (h[2] > size - GPUD_SAMPLE_HEADER)
		return -1;
	s->base = (const unsigned char *)data;
	s->size = size;
	s->count = h[1];
	s->key = (const char *)s->base + GPUD_SAMPLE_HEADER;
	s->key_len = h[2];
	s->index = 0;
	s->at = GPUD_SAMPLE_HEADER + (size_t)h[2];
	return 0;
}

/** The next member into *m: 1, 0 after the last, -1 when the sample is damaged (a length
 *  past its end, fewer members than its count). */
static inline int gpud_sample_next(struct gpud_sample *s, struct gpud_sample_member *m)
{
	uint32_t name_len, pad;
	uint64_t len;
	size_t at = (s->at + 7) & ~(size_t)7, data;
	if (s->index >= s->count)
		return 0;
	if (at < s->at || at > s->size || s->size - at < GPUD_SAMPLE_MEMBER_HEADER)
		return -1;
	memcpy(&name_len, s->base + at, 4);
	memcpy(&pad, s->base + at + 4, 4);
	memcpy(&len, s->base + at + 8, 8);
	at += GPUD_SAMPLE_MEMBER_HEADER;
	if (name_len > s->size - at)
		return -1;
	m->name = (const char *)s->base + at;
	m->name_len = name_len;
	at += name_len;
	data = (at + GPUD_SAMPLE_ALIGN - 1) & ~(size_t)(GPUD_SAMPLE_ALIGN - 1);
	if (data < at || data > s->size || len > s->size - data)
		return -1;
	(void)pad;
	m->data = s->base + data;
	m->size = (size_t)len;
	s->at = data + (size_t)len;
	s->index++;
	return 1;
}

/** The member named `name` (the first of that name) of the sample in `data` into *m: 1,
 *  0 when it has none, -1 when `data` is no sample or a damaged one. */
static inline int gpud_sample_find(const void *data, size_t size, const char *name,
				   struct gpud_sample_member *m)
{
	struct gpud_sample s;
	size_t n = strlen(name);
	int rc;
	if (gpud_sample_open(&s, data, size) < 0)
		return -1;
	while ((rc = gpud_sample_next(&s, m)) == 1)
		if (m->name_len == n && memcmp(m->name, name, n) == 0)
			return 1;
	return rc;
}

/* ---------------------------------------------------------------------------------- */
/* Generator plugins                                                                    */
/* ---------------------------------------------------------------------------------- */

/** Required. Opens the generator with its [generator] section, on the host loop's
 *  thread (as every generator call). 0, or -1 with err. */
GPUD_EXPORT int gpud_generator_open(const struct gpud_args *args, void **state,
				    struct gpud_error *err);
/** Required. Writes the next item into `item` (shared memory: no copy follows) and
 *  returns 1; it may block (results keep flowing to the sink meanwhile, from another
 *  thread); it returns 0 at the end of the stream, -1 with err on failure.
 *  An item larger than item->capacity (= max_task_bytes): set item->size to the size
 *  needed and return 1 without writing; the host reports that task as failed with a
 *  message giving both sizes and goes on.
 *  (ABI 1.7) Or returns GPUD_GENERATOR_TASK_FAILED with err filled: the item it stands
 *  for cannot be made (a member missing from an archive's sample, a damaged archive), and
 *  its task fails with err's message, counted and journaled as a failure, never run or
 *  retried, while the stream goes on with the next call. */
GPUD_EXPORT int gpud_generator_next(void *state, struct gpud_buf *item, struct gpud_error *err);
/** (ABI 1.7) Returned by gpud_generator_next: this item's task fails with err's message. */
#define GPUD_GENERATOR_TASK_FAILED 2
/** Optional (ABI 1.9). The name of the item the last gpud_generator_next call gave (it
 *  returned 1 or GPUD_GENERATOR_TASK_FAILED): a sample's key, a file's path; NULL for
 *  none. Called right after that call, on the same thread; the string (NUL-terminated,
 *  at most GPUD_NAME_MAX bytes are kept) is the generator's, valid until its next call:
 *  the host copies it. The host keeps it while the task runs and gives it to the sink in
 *  every event of the task (gpud_event.name); it is not journaled, so a task run again
 *  by --resume gets the name its generator gives then. */
GPUD_EXPORT const char *gpud_generator_name(void *state);
/** The longest task name kept, in bytes (a longer one is cut at a character's start). */
#define GPUD_NAME_MAX 4096
/** Optional. Frees the state; called once after the last next(). Not called when the
 *  run ended while a next() call had not returned (the call is left running). */
GPUD_EXPORT void gpud_generator_close(void *state);
/** Optional. The number of items the generator will yield, or -1 when unknown. */
GPUD_EXPORT int64_t gpud_generator_total(void *state);
/** (ABI 1.8) Which job, and which share of it, a run is, given to gpud_sink_job. Host
 *  memory, valid during the call. */
struct gpud_job_info {
	uint64_t job_id;   /* the same for every rank of one job and differing between jobs:
			    * a hash of the worker's, the stages' and the generator's plugins
			    * and keys as written ({rank} not put in) and base_seed; the
			    * `job_id` of --stats-json */
	uint32_t rank;     /* this run's rank, 0-based */
	uint32_t ranks;    /* the job's ranks (1 without ranks) */
	void *reserved[4]; /* NULL; room for later ABI minors */
};

/** Optional (ABI 1.8). Called once, right after the sink opened (gpud_sink_open or
 *  gpud_sink_resume) and before gpud_sink_tasks, gpud_sink_resumed and any event, with
 *  the job's identity: a sink whose ranks' outputs are joined later (an array shard per
 *  rank) records job_id in them, so that outputs of two jobs are not taken for one.
 *  0, or -1 with err (the run stops before any task runs, exit 2). */
GPUD_EXPORT int gpud_sink_job(void *state, const struct gpud_job_info *info,
			      struct gpud_error *err);

/** Optional (ABI 1.2). Called by `gpud check` instead of open: validates the arguments
 *  and whatever they name (an input file readable, a folder listable) WITHOUT side
 *  effects: it creates, truncates and consumes nothing (it must not read a pipe or
 *  standard input). 0, or -1 with err. Absent: `check` only loads the plugin. */
GPUD_EXPORT int gpud_generator_check(const struct gpud_args *args, struct gpud_error *err);
/** Optional (ABI 1.2). `gpud run --resume`: skips the next n items without yielding
 *  them (a generator that can seek jumps; called once, right after open, with the
 *  number of tasks at the start of the stream an earlier run finished). 0, or -1 with
 *  err. Absent: gpud generates those items and drops them. */
GPUD_EXPORT int gpud_generator_skip(void *state, uint64_t n, struct gpud_error *err);

/* ---------------------------------------------------------------------------------- */
/* Sink plugins                                                                         */
/* ---------------------------------------------------------------------------------- */

/** Event kinds. Sinks must ignore kinds they do not know: new ones may be added. */
enum gpud_event_kind {
	GPUD_TASK_START,     /* a worker began running a task */
	GPUD_TASK_OK,        /* process() succeeded: result/result_size */
	GPUD_TASK_ERROR,     /* the task failed: message */
	GPUD_TASK_TIMEOUT,   /* the task ran past task_timeout: seconds = the limit */
	GPUD_SETUP_FAILED,   /* a worker's setup failed: message, worker_id, gpu_id */
	GPUD_CLEANUP_FAILED, /* a worker's cleanup failed: message, worker_id, gpu_id */
	GPUD_GPU_RETIRED,    /* (ABI 1.1) a GPU's workers crashed past max_worker_restarts:
				no more tasks go to it; gpu_id, worker_id (the last), message */
};

/** The bit of an event kind in the mask returned by gpud_sink_events. */
#define GPUD_EVENT_BIT(kind) (UINT32_C(1) << (kind))
/** Every event kind, present and future. */
#define GPUD_EVENTS_ALL UINT32_C(0xffffffff)

/** One event. Every pointer is host memory valid during the call; input and result
 *  point straight into shared memory. task_id is -1 (all ones) for worker events. */
struct gpud_event {
	enum gpud_event_kind kind;
	uint64_t task_id;
	int worker_id;     /* -1 when no worker was involved (an oversized generator item) */
	int gpu_id;        /* -1 likewise */
	int attempt;       /* 0 on the first run of a task */
	const void *input; /* task events: the task's input (NULL when it was too large) */
	size_t input_size;
	const void *result; /* GPUD_TASK_OK */
	size_t result_size;
	const char *message; /* errors: the plugin's message, or the host's */
	double seconds;      /* time spent in process(); for a timeout, the limit exceeded.
			      * Tasks under 2 us carry an average over up to 32 of them. */
	const char *name;    /* (ABI 1.9) task events: the task's name as its generator gave
			      * it (gpud_generator_name: a sample's key), NUL-terminated; NULL
			      * when it gave none, for worker events, and for a sink built for
			      * ABI 1.8 or older (it was reserved[0] there) */
	void *reserved[3];   /* NULL; room for later ABI minors */
};

/** Final figures, given to gpud_sink_close (or gpud_sink_finish). generated = ok + failed +
 * timed_out + not_run. */
struct gpud_stats {
	uint64_t generated, ok, failed, timed_out, not_run, retried;
	uint32_t worker_restarts, setup_failures;
	double elapsed; /* seconds, wall clock */
};

/** Required. Opens the sink with its [sink] section, on the host loop's thread, before
 *  any other thread of the run starts. 0, or -1 with err. */
GPUD_EXPORT int gpud_sink_open(const struct gpud_args *args, void **state, struct gpud_error *err);
/** Required. Receives one event. Never two calls at once; a call may come from the host
 *  loop's thread or from its stand-in while the generator's next() is blocked (see
 *  Threads above). Returns 0, or -1 with err to abort the run (ABI 1.6: or
 *  GPUD_SINK_TASK_FAILED for a GPUD_TASK_OK event). */
GPUD_EXPORT int gpud_sink_event(void *state, const struct gpud_event *ev, struct gpud_error *err);
/** (ABI 1.6) Returned by gpud_sink_event for a GPUD_TASK_OK event, with err filled: the
 *  sink refuses this result (one of the wrong size for a row of an array, say) and the
 *  task fails with err's message instead of succeeding: counted failed, listed with the
 *  failures, recorded as an error by the journal (so --resume does not run it again;
 *  --retry-failed does), never retried within the run (the same worker would most likely
 *  give the same result). The sink gets no GPUD_TASK_ERROR event for it: it said so
 *  itself. For another kind of event, or from a plugin built for ABI 1.5 or older, any
 *  nonzero return aborts the run. */
#define GPUD_SINK_TASK_FAILED 1

/** Optional. Called exactly once at the end of every run that opened the sink, with the
 *  final stats; frees the state. 0, or -1 with err (the run then exits with status 3).
 *  Not called when the sink exports gpud_sink_finish (ABI 1.3), which takes its place. */
GPUD_EXPORT int gpud_sink_close(void *state, const struct gpud_stats *stats,
				struct gpud_error *err);
/** Optional. Called once after open: the event kinds this sink wants, as a mask of
 *  GPUD_EVENT_BIT(kind). Kinds outside the mask are not delivered, and the host skips
 *  the work of producing them; a sink that does not want GPUD_TASK_START costs nothing
 *  for it. Absent: every kind is delivered. */
GPUD_EXPORT uint32_t gpud_sink_events(void *state);
/** Optional (ABI 1.2). `gpud run --resume` calls it instead of open: it opens the sink
 *  to go on with an earlier run's output (keeping it, never emptying it; cutting what a
 *  crash left half-written) and calls done(ctx, task_id, status) for every task that
 *  output already holds (status 0 ok, 1 error, 2 timeout). Those are not run again, and
 *  what the output holds decides, not gpud's journal: with it a sink gets every task
 *  exactly once across crashes and resumes. Called on every --resume, also when the
 *  journal is missing. A task may be reported more than once (an error, then ok after
 *  --retry-failed): any ok report makes it ok. Returns 0; 1 when it opened but its
 *  output cannot be read back (standard output, a pipe, a device): nothing is reported
 *  and the journal decides, as for a sink without this function; -1 with err. Absent:
 *  the journal decides what runs again, and a task finished just before a crash may be
 *  delivered again (at least once). */
GPUD_EXPORT int gpud_sink_resume(const struct gpud_args *args, void **state,
				 void (*done)(void *ctx, uint64_t task_id, int status), void *ctx,
				 struct gpud_error *err);
/** (ABI 1.3) How a run ends, given to gpud_sink_finish. Host memory, valid during the
 *  call. */
struct gpud_run_end {
	int exit_status;          /* what gpud exits with when this call returns 0: 0 every task ok,
				   * 1 some failed or timed out, 2 an input changed (nothing new ran),
				   * 3 aborted, 4 interrupted with a journal (--resume finishes it) */
	const char *abort_reason; /* why the run stopped before its end, as gpud says it
				   * after "aborted: " ("interrupted", "the generator
				   * failed ..."); NULL when it did not */
	void *reserved[4];        /* NULL; room for later ABI minors */
};

/** Optional (ABI 1.3). Called instead of gpud_sink_close when exported: the same call
 *  (exactly once, the final stats, frees the state, -1 with err fails the run), with
 *  how the run ends, which struct gpud_stats has no room for. */
GPUD_EXPORT int gpud_sink_finish(void *state, const struct gpud_stats *stats,
				 const struct gpud_run_end *end, struct gpud_error *err);

/** (ABI 1.3) What earlier runs of the job finished, given to gpud_sink_resumed. Host
 *  memory, valid during the call. */
struct gpud_resume_info {
	const uint64_t *done; /* n_done pairs (first id, count), ascending, not touching:
			       * this rank's tasks that earlier runs gave their outcome (the
			       * journal's word, settled with gpud_sink_resume's), which this
			       * run neither runs nor delivers again */
	size_t n_done;
	const uint64_t *failed; /* n_failed ids, ascending: those of them whose outcome was
				 * an error or a timeout (--retry-failed: none, they run) */
	size_t n_failed;
	void *reserved[4]; /* NULL; room for later ABI minors */
};

/** Optional (ABI 1.3). `gpud run --resume`: called once, right after the sink opened
 *  (gpud_sink_resume or gpud_sink_open) and before any event, with the tasks earlier
 *  runs finished (none when the journal was missing). A sink that writes by task id (an
 *  array, a file per task) keeps their slots. 0, or -1 with err (the run stops before
 *  any task runs, exit 2). Not called on a fresh run. */
GPUD_EXPORT int gpud_sink_resumed(void *state, const struct gpud_resume_info *info,
				  struct gpud_error *err);

/** Optional (ABI 1.6). Called once, right after the sink opened (gpud_sink_open or
 *  gpud_sink_resume) and before gpud_sink_resumed and any event, with the number of tasks
 *  the generator says the job has (gpud_generator_total; with ranks, all ranks together,
 *  as task ids are global), or -1 when it does not say. A sink that writes by task id (an
 *  array of one row per task) sizes its output with it. 0, or -1 with err (the run stops
 *  before any task runs, exit 2). */
GPUD_EXPORT int gpud_sink_tasks(void *state, int64_t total, struct gpud_error *err);

/** Optional (ABI 1.2). Called by `gpud check` instead of open: validates the arguments
 *  and that the output could be written (its folder exists and is writable) WITHOUT
 *  creating or truncating anything. 0, or -1 with err. Absent: `check` only loads it. */
GPUD_EXPORT int gpud_sink_check(const struct gpud_args *args, struct gpud_error *err);

#ifdef __cplusplus
}
#endif

#endif /* GPUD_PLUGIN_H */
