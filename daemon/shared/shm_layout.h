/* SPDX-License-Identifier: MIT */
/*
 * The layout of a run's shared memory. Memory is split by who may write it, so that a
 * worker with a memory bug can only damage what it owns (docs/architecture.md):
 *
 *   run memfd   written by the host only. A worker gets it as a read-only descriptor
 *               (fd 3) and maps it PROT_READ; it can neither write it nor map it
 *               writable again.
 *                 [struct shm_header]                  offset 0
 *                 [struct shm_feed] x n_workers        header.feeds_off
 *                 [config blob]                        header.config_off
 *                 per worker: its task ring            page-aligned, shm_feed.task_ring_off
 *   out memfd   one per worker process, made fresh for every start or restart, given to
 *               that process only (fd 4), mapped read-write by it and the host:
 *                 [struct shm_report]                  offset 0 (the worker's control block)
 *                 [result ring]                        offset SHM_OUT_RING_OFF
 *               The worker maps the two parts apart, with an inaccessible guard page
 *               before, between and after them.
 *   bell memfd  one page (fd 5) holding the host's futex word: the only word every
 *               worker may write. Its value carries no information; writing it can only
 *               wake the host early.
 *
 * Each ring is single-producer single-consumer, of power-of-two size, and holds
 * 64-byte-aligned records: a struct shm_rec then the payload. A record never wraps: a
 * producer that would cross the end writes a REC_PAD record and starts over at offset 0.
 *
 * Task ring:   the host writes tasks and publishes shm_feed.task_head; the worker reads
 *              them in order and reports shm_report.task_tail as it starts each one. Only
 *              the host frees task space, when it has consumed the task's result, so an
 *              input stays valid until the sink has seen its result.
 * Result ring: the worker writes one result per task, in task order, and publishes
 *              shm_report.result_head; the host consumes them and publishes
 *              shm_feed.result_tail.
 *
 * Everything a worker writes is input to the host: it checks every position against
 * its own records and every result header against the task it handed out.
 */
#ifndef GPUD_SHM_LAYOUT_H
#define GPUD_SHM_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC UINT64_C(0x326d687364757067) /* "gpudshm2", little-endian */
#define SHM_VERSION 5u
#define SHM_LINE 64u
#define SHM_PAGE 4096u
#define SHM_REC_HDR 64u
#define SHM_MSG_MAX 1024u
#define SHM_MAX_ARGS 4096u /* [worker] keys a worker takes (= CFG_MAX_KEYS) */
/* A failed task's message travels as its result payload, so a result slot holds one. */
#define SHM_MAX_PAYLOAD (UINT32_C(1) << 30)
/* Where the result ring starts in an out memfd: the report block has the first page. */
#define SHM_OUT_RING_OFF SHM_PAGE

/* The descriptors a worker process is started with. */
#define SHM_FD_RUN 3
#define SHM_FD_OUT 4
#define SHM_FD_BELL 5
#define SHM_FD_HOST                                                                                \
	6 /* read end of a pipe whose write end only the host holds: EOF = the                     \
	     host is gone */

enum shm_rec_kind {
	REC_PAD = 0x50414444u,  /* "PADD": skip to the ring's next lap */
	REC_TASK = 0x5441534bu, /* "TASK": a task's input */
	REC_OK = 0x524f4b21u,   /* "ROK!": a result */
	REC_FAIL = 0x52464149u, /* "RFAI": a failed task; payload = message (no NUL) */
	REC_SKIP = 0x534b4950u, /* "SKIP": filler to skip; a batch's unused result space */
};

/* shm_header.pin_memory */
enum shm_pin { SHM_PIN_AUTO = 0, SHM_PIN_ON = 1, SHM_PIN_OFF = 2 };

/* A worker's exit status after gpud_task_fatal(): its message is in shm_report.message. */
#define WORKER_EXIT_FATAL 70

/* A worker's exit status after the plugin wrote before a result buffer: what else it
 * wrote is unknown, so the process is replaced; the call it made takes a strike. */
#define WORKER_EXIT_TAINTED 71

/* REC_FAIL flags */
#define REC_FLAG_FATAL 1u   /* the plugin marked the worker unusable (gpud_task_fatal) */
#define REC_FLAG_BOUNDS 2u  /* the plugin wrote outside its result buffer */
#define REC_FLAG_REJECT 4u  /* the plugin rejected the task for good (gpud_task_reject) */
#define REC_FLAG_TIMEOUT 8u /* its call was interrupted past task_timeout (ABI 1.5) */
/* Results of gpud_worker_process_batch: flags >> REC_CALL_SHIFT is the number of tasks
 * of the call on its first result, 0 on the others (for the batch-size metric). */
#define REC_CALL_SHIFT 8

/* The head of every record in either ring. `check` (results only) is shm_rec_check()
 * of the other fields and the record's ring position: a header overwritten after the
 * worker finished it no longer matches. */
struct shm_rec {
	uint64_t task_id;
	uint32_t kind;    /* enum shm_rec_kind */
	uint32_t size;    /* payload bytes after the header */
	uint32_t attempt; /* 0 on a task's first run */
	uint32_t flags;   /* REC_FLAG_* */
	double seconds;   /* results: time spent in process() */
	uint64_t check;
	uint8_t _pad1[24];
};

/* Results up to this size are copied by the host, which then reads their check word
 * again: a worker that rewrites its memory while the host reads (a plugin scribbling
 * over its own results) changes the header too and is caught, and what is delivered
 * is what was checked. Larger results are read in place (zero copy). */
#define SHM_COPIED_MAX 256u

/* The check word of a result header at ring position `pos`. */
static inline uint64_t shm_rec_check(uint64_t task_id, uint32_t kind, uint32_t size,
				     uint32_t attempt, uint32_t flags, uint64_t seconds_bits,
				     uint64_t pos)
{
	/* Each field multiplied by its own odd constant (a bijection), then all xored: a
	 * change to any one field changes the word, and the multiplications run side by
	 * side (this is on every result's path, in the worker and in the host). It is a
	 * check against accidents, not against a worker that means to forge it. */
	return task_id * UINT64_C(0x9e3779b97f4a7c15) ^ pos * UINT64_C(0xc2b2ae3d27d4eb4f) ^
	       ((uint64_t)kind << 32 | size) * UINT64_C(0x165667b19e3779f9) ^
	       ((uint64_t)attempt << 32 | flags) * UINT64_C(0xd6e8feb86659fd93) ^
	       seconds_bits * UINT64_C(0xff51afd7ed558ccd);
}

/* A sleeper's futex word and flag live apart, each in memory its writer owns: the bell
 * with the waker, the flag with the sleeper (see wait.h for the protocol). */
struct shm_bell {
	_Atomic uint32_t bell;
	uint8_t _pad[60];
};

enum shm_worker_state {
	WS_SPAWNED = 0,        /* exec'd, not yet in setup */
	WS_SETUP = 1,          /* running the plugin's setup */
	WS_READY = 2,          /* taking tasks */
	WS_SETUP_FAILED = 3,   /* message holds the plugin's reason; the worker exits */
	WS_CLEANUP = 4,        /* stop seen, running cleanup */
	WS_DONE = 5,           /* cleanup succeeded; the worker exits 0 */
	WS_CLEANUP_FAILED = 6, /* message holds the reason; the worker exits */
};

/* What the host tells one worker (run memfd: read-only to the worker). Fields that are
 * written at different rates, or read by the worker at different times, sit on lines
 * of their own: a line the worker polls should change only when it has news. */
struct shm_feed {
	/* line 0, host, once per burst of tasks */
	_Atomic uint64_t task_head;
	_Atomic uint32_t stop;    /* 1 = finish the tasks you hold, clean up and exit */
	_Atomic uint32_t drained; /* 1 = the generator has ended: no new task will come
				     (a wait for tasks is then idle time, not starving) */
	uint8_t _pad0[48];
	/* line 1, host, once per burst of results taken */
	_Atomic uint64_t result_tail;
	uint8_t _pad1[56];
	/* line 2: the worker sleeps on this; the host rings it */
	struct shm_bell bell;
	/* line 3, written by the host before each start of a worker in this slot */
	uint64_t task_base; /* ring position of the first task this process is given */
	uint64_t task_ring_off;
	uint64_t task_ring_cap;
	uint64_t result_ring_cap;
	uint64_t seed;
	int32_t worker_id;
	int32_t gpu_id;
	uint32_t incarnation;  /* starts of this slot so far */
	uint32_t interrupt_ms; /* its task_timeout in ms (rounded up), for a plugin with
				  gpud_worker_interrupt: the call is then interrupted; 0: never
				  (no limit, or timeout_grace = 0) */
	uint8_t _pad3[8];
};

/* Where a worker's time goes (docs/reference.md, "Where each worker's time goes"): each
 * reading of the clock ends one stretch of time and starts the next, and every stretch
 * is added to exactly one phase, so the phases add up to end_ns - start_ns. */
enum shm_phase {
	PH_SETUP = 0,    /* loading the plugin, its setup and its cleanup */
	PH_WAIT = 1,     /* waiting for tasks while the generator goes on (starved), and for
			    a batch to fill (batch_wait_ms) */
	PH_UNPACK = 2,   /* gpud taking a call's tasks: the ring, result slots, and what the
			    plugin reports as its unpacking (python: items made objects) */
	PH_USER = 3,     /* the user's process/process_batch (tasks under 2 us: gpud's
			    own bookkeeping between them too, timed in stretches) */
	PH_HANDBACK = 4, /* results handed back: the plugin's packing, the records written
			    and published, waiting for the host to take results */
	PH_IDLE = 5,     /* waiting for tasks after the generator ended (or before a stop) */
	PH_COUNT = 6,
};

/* Calls of the plugin by size: bucket 0 holds calls of 1 task, bucket b calls of
 * 2^(b-1)+1 .. 2^b tasks (batch_size is at most 65536 = 2^16). */
#define SHM_CALL_BUCKETS 17

/* Written by the worker alone, at each reading of the clock it makes anyway (slow paths,
 * and once a call or stretch of tiny calls); the host reads it for the dashboard, the
 * metrics and the stats, and keeps it when the process ends. */
struct shm_times {
	_Atomic uint64_t start_ns; /* CLOCK_MONOTONIC when the process started */
	_Atomic uint64_t end_ns;   /* the last reading added to a phase */
	_Atomic uint64_t phase_ns[PH_COUNT];
	_Atomic uint64_t calls[SHM_CALL_BUCKETS];
	_Atomic uint32_t call_min, call_max; /* 0 until a call */
	_Atomic uint64_t items;              /* the calls' tasks (or items), all together */
	_Atomic uint64_t cpu_ns;             /* CPU time of the process (all its threads) and */
	_Atomic uint64_t main_cpu_ns;        /* of its main thread, read at most every 10 ms */
	_Atomic uint64_t user_cpu_ns;        /* of phase_ns[PH_USER], the CPU time of the
					      * thread that made the calls (measured around
					      * calls, a sample of them when they are short) */
	uint8_t _pad[16];
};

/* What one worker tells the host (out memfd, offset 0). Each line has one writer: the
 * worker. The host reads it as untrusted input. The host polls result_head and reads
 * `sleeping` whenever it hands out tasks, so neither shares a line with what the worker
 * writes for every task: the line would bounce between the cores at each task. */
struct shm_report {
	/* line 0, once per call of the plugin */
	_Atomic uint64_t task_tail;     /* ring position past the tasks it runs or ran */
	_Atomic uint64_t busy_since_ns; /* CLOCK_MONOTONIC when process() began; 0 idle */
	_Atomic uint64_t cur_task;      /* id of the (first) task it runs */
	_Atomic uint64_t run_from;      /* ring position of the first task of the current
					   call (a batch runs [run_from, task_tail)) */
	_Atomic uint64_t timed_to;      /* tasks in flight: ring position past the oldest
					   one, which busy_since_ns times and a timeout blames
					   alone; 0: busy_since_ns times the whole call */
	uint8_t _pad0[24];
	/* line 1, once per burst of results */
	_Atomic uint64_t result_head;
	uint8_t _pad1[56];
	/* line 2, when it changes state or goes to sleep, or its batch size changes */
	_Atomic uint32_t state;      /* enum shm_worker_state */
	_Atomic uint32_t sleeping;   /* it sleeps on shm_feed.bell */
	_Atomic uint32_t batch_now;  /* the most tasks its next call gets (the batch size as
				      * adapted to out-of-memory calls); 0 until it says */
	_Atomic uint32_t oom_splits; /* calls of this process that ran out of memory and were
				      * split */
	_Atomic uint32_t flight;     /* it runs tasks in flight (gpud_worker_submit/poll), up
				      * to this many; 0: process() or process_batch() */
	_Atomic uint32_t interrupts; /* 1: it interrupts a call past task_timeout itself
				      * (gpud_worker_interrupt): timeout_grace before a kill */
	uint8_t _pad2[40];
	/* setup/cleanup/fatal message, NUL-terminated (the host reads at most this much) */
	char message[SHM_MSG_MAX];
	/* where its time goes, written at each clock reading (above) */
	struct shm_times times;
};

struct shm_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size; /* sizeof(struct shm_header) */
	uint64_t total_size;
	uint32_t n_workers;
	uint32_t feed_size; /* sizeof(struct shm_feed) */
	uint64_t feeds_off;
	/* worker plugin path, NUL, then n_args (key NUL value NUL); then per CPU stage:
	 * its plugin path NUL, its key count in decimal NUL, its keys and values */
	uint64_t config_off;
	uint64_t config_len;
	uint32_t n_args;
	uint32_t max_task_bytes;
	uint32_t max_result_bytes;
	uint32_t batch_size;      /* most tasks a gpud_worker_process_batch call gets */
	uint32_t pin_memory;      /* CFG_PIN_AUTO / ON / OFF: cudaHostRegister the rings */
	uint32_t report_size;     /* sizeof(struct shm_report) */
	uint64_t batch_wait_ns;   /* how long to wait to fill a batch */
	uint64_t out_size;        /* bytes of each out memfd */
	uint32_t max_in_flight;   /* most tasks gpud_worker_submit holds at once */
	uint32_t batch_wait_auto; /* 1: batch_wait_ns is a cap, and a GPU worker waits the
				   * time its batch takes to fill at the rate its tasks come
				   * (behind a CPU stage, batch_wait_ms not set), and not once
				   * its feed is drained */
	uint32_t isolate;         /* [job] isolate_failures: a batch that fails whole is split */
	uint8_t _pad1[20];
	/* line 2, host: it sleeps on the bell memfd's word */
	_Atomic uint32_t host_sleeping;
	uint8_t _pad2[60];
};

/* A result slot: the payload has a canary line right after its capacity, and the header
 * before it is filled with a canary until the call returns, so a plugin that writes
 * past either end of its buffer is caught (worker.c). A result with a payload is
 * followed by SHM_SLOT_GAP unused bytes, so a write before the next slot's buffer of up
 * to that much (plus that slot's header) cannot reach the payload before it is caught.
 * An empty result needs no such gap: what lies before the next buffer is then at most
 * headers, whose check words show any change (the host runs the worker's unconsumed
 * tasks again). It is followed by one unused line (SHM_EMPTY_GAP) instead, for the
 * canary: a no-op result then takes two lines, and in a stream of them, with a
 * capacity that is a multiple of 128 bytes (the default 1 MiB, any power of two from 128
 * up), every canary line falls on one of those unused lines, never on a header the host
 * reads, so arming it does not pull a line out of the host's cache. Measured side by side
 * (docs/benchmarks.md): the 256-byte gap after every result cost 5% of the no-op rate; with no gap
 * at all after empty results the canaries fell on headers and far placement lost 20%. */
#define SHM_CANARY UINT64_C(0xc0ffee5ca1ab1e5d)
#define SHM_SLOT_GAP 256u
#define SHM_EMPTY_GAP SHM_LINE

/* The layout, checked where it is declared. */
_Static_assert(sizeof(struct shm_rec) == SHM_REC_HDR, "record header is one line");
_Static_assert(offsetof(struct shm_rec, seconds) == 24, "shm_rec layout");
_Static_assert(offsetof(struct shm_rec, check) == 32, "shm_rec layout");
_Static_assert(offsetof(struct shm_rec, flags) == 20, "shm_rec layout");
_Static_assert(sizeof(struct shm_bell) == SHM_LINE, "a bell is one line");
_Static_assert(offsetof(struct shm_feed, result_tail) == 1 * SHM_LINE, "feed line 1");
_Static_assert(offsetof(struct shm_feed, bell) == 2 * SHM_LINE, "feed line 2");
_Static_assert(offsetof(struct shm_feed, task_base) == 3 * SHM_LINE, "feed line 3");
_Static_assert(sizeof(struct shm_feed) == 4 * SHM_LINE, "shm_feed size");
_Static_assert(offsetof(struct shm_report, result_head) == 1 * SHM_LINE, "report line 1");
_Static_assert(offsetof(struct shm_report, state) == 2 * SHM_LINE, "report line 2");
_Static_assert(offsetof(struct shm_report, batch_now) == 2 * SHM_LINE + 8, "report line 2");
_Static_assert(offsetof(struct shm_report, message) == 3 * SHM_LINE, "report message");
_Static_assert(sizeof(struct shm_times) == 4 * SHM_LINE, "shm_times size");
_Static_assert(offsetof(struct shm_report, times) == 3 * SHM_LINE + SHM_MSG_MAX, "report times");
_Static_assert(sizeof(struct shm_report) == 7 * SHM_LINE + SHM_MSG_MAX, "shm_report size");
_Static_assert(sizeof(struct shm_report) <= SHM_OUT_RING_OFF, "report fits its page");
_Static_assert(offsetof(struct shm_header, max_result_bytes) == 64, "shm_header layout");
_Static_assert(offsetof(struct shm_header, batch_wait_ns) == 80, "shm_header layout");
_Static_assert(offsetof(struct shm_header, batch_wait_auto) == 100, "shm_header layout");
_Static_assert(offsetof(struct shm_header, host_sleeping) == 2 * SHM_LINE, "host line 2");
_Static_assert(sizeof(struct shm_header) == 3 * SHM_LINE, "shm_header size");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4, "atomics");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "magic is little-endian");

#endif /* GPUD_SHM_LAYOUT_H */
