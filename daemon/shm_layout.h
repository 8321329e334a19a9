/* SPDX-License-Identifier: MIT */
/*
 * The layout of a run's shared memory: one memfd, created by the host, inherited by
 * every worker as fd 3 and mapped whole. Everything here is fixed-width and padded by
 * hand; the asserts at the end pin it.
 *
 *   [struct shm_header]                      offset 0
 *   [struct shm_worker] x n_workers          header.workers_off
 *   [config blob]                            header.config_off (worker plugin + args)
 *   per worker: task ring, result ring       page-aligned, offsets in shm_worker
 *
 * Each ring is single-producer single-consumer, of power-of-two size, and holds
 * 64-byte-aligned records: a struct shm_rec then the payload. A record never wraps: a
 * producer that would cross the end writes a REC_PAD record and starts over at offset 0.
 *
 * Task ring:   the host writes tasks (producer) and publishes task_head; the worker
 *              reads them in order and publishes task_tail as it starts each one. Only
 *              the host frees task space, when it has consumed the task's result, so an
 *              input stays valid until the sink has seen its result.
 * Result ring: the worker writes one result per task, in task order, and publishes
 *              result_head; the host consumes them and publishes result_tail.
 */
#ifndef GPUD_SHM_LAYOUT_H
#define GPUD_SHM_LAYOUT_H

#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define SHM_MAGIC UINT64_C(0x316d687364757067) /* "gpudshm1", little-endian */
#define SHM_VERSION 2u
#define SHM_LINE 64u
#define SHM_REC_HDR 64u
#define SHM_MSG_MAX 1024u
/* A failed task's message travels as its result payload, so a result slot holds one. */
#define SHM_MAX_PAYLOAD (UINT32_C(1) << 30)

enum shm_rec_kind {
	REC_PAD = 0x50414444u,  /* "PADD": skip to the ring's next lap */
	REC_TASK = 0x5441534bu, /* "TASK": a task's input */
	REC_OK = 0x524f4b21u,   /* "ROK!": a result */
	REC_FAIL = 0x52464149u, /* "RFAI": a failed task; payload = message (no NUL) */
	REC_SKIP = 0x534b4950u, /* "SKIP": filler to skip; a batch's unused result space */
};

/* shm_header.pin_memory */
enum shm_pin { SHM_PIN_AUTO = 0, SHM_PIN_ON = 1, SHM_PIN_OFF = 2 };

/* A worker's exit status after gpud_task_fatal(): its message is in shm_worker.message. */
#define WORKER_EXIT_FATAL 70

/* REC_FAIL flags */
#define REC_FLAG_FATAL 1u /* the plugin marked the worker unusable (gpud_task_fatal) */

/* The head of every record in either ring. */
struct shm_rec {
	uint64_t task_id;
	uint32_t kind;    /* enum shm_rec_kind */
	uint32_t size;    /* payload bytes after the header */
	uint32_t attempt; /* 0 on a task's first run */
	uint32_t flags;   /* REC_FLAG_* */
	double seconds;   /* results: time spent in process() */
	uint8_t _pad1[32];
};

/* A sleeper's futex and flag (see wait.h for the protocol). */
struct shm_doorbell {
	_Atomic uint32_t bell;
	_Atomic uint32_t sleeping;
	uint8_t _pad[56];
};

enum shm_worker_state {
	WS_SPAWNED = 0,      /* exec'd, not yet in setup */
	WS_SETUP = 1,        /* running the plugin's setup */
	WS_READY = 2,        /* taking tasks */
	WS_SETUP_FAILED = 3, /* message holds the plugin's reason; the worker exits */
	WS_CLEANUP = 4,      /* stop seen, running cleanup */
	WS_DONE = 5,         /* cleanup succeeded; the worker exits 0 */
	WS_CLEANUP_FAILED = 6, /* message holds the reason; the worker exits */
};

/* One worker's control block. Each line has a single writer. */
struct shm_worker {
	/* line 0, host, once per burst */
	_Atomic uint64_t task_head;
	uint8_t _pad0[56];
	/* line 1, worker, once per task */
	_Atomic uint64_t task_tail;     /* ring position past the task it runs or ran */
	_Atomic uint64_t busy_since_ns; /* CLOCK_MONOTONIC when process() began; 0 idle */
	_Atomic uint64_t cur_task;      /* id of the task it runs */
	_Atomic uint64_t run_from;      /* ring position of the first task of the current call
					   (a batch runs [run_from, task_tail) together) */
	uint8_t _pad1[32];
	/* line 2, worker, once per burst */
	_Atomic uint64_t result_head;
	uint8_t _pad2[56];
	/* line 3, host, once per burst */
	_Atomic uint64_t result_tail;
	uint8_t _pad3[56];
	/* line 4: wakes the worker */
	struct shm_doorbell bell;
	/* line 5, written once by the host before spawn, then state/stop */
	_Atomic uint32_t state; /* worker: enum shm_worker_state */
	_Atomic uint32_t stop;  /* host: 1 = finish the tasks you hold, clean up and exit */
	int32_t worker_id;
	int32_t gpu_id;
	uint64_t seed;
	uint64_t task_ring_off;
	uint64_t task_ring_cap;
	uint64_t result_ring_off;
	uint64_t result_ring_cap;
	uint8_t _pad5[8];
	/* setup/cleanup failure message, NUL-terminated */
	char message[SHM_MSG_MAX];
};

struct shm_header {
	uint64_t magic;
	uint32_t version;
	uint32_t header_size; /* sizeof(struct shm_header) */
	uint64_t total_size;
	uint32_t n_workers;
	uint32_t worker_size; /* sizeof(struct shm_worker) */
	uint64_t workers_off;
	uint64_t config_off; /* worker plugin path, NUL, then n_args (key NUL value NUL) */
	uint64_t config_len;
	uint32_t n_args;
	uint32_t max_task_bytes;
	uint32_t max_result_bytes;
	uint32_t batch_size;    /* most tasks a gpud_worker_process_batch call gets */
	uint32_t pin_memory;    /* CFG_PIN_AUTO / ON / OFF: cudaHostRegister the rings */
	uint32_t _pad0;
	uint64_t batch_wait_ns; /* how long to wait to fill a batch */
	uint8_t _pad1[40];
	/* line 2: wakes the host; every worker may ring it */
	struct shm_doorbell host_bell;
};

_Static_assert(sizeof(struct shm_rec) == SHM_REC_HDR, "record header is one line");
_Static_assert(offsetof(struct shm_rec, seconds) == 24, "shm_rec layout");
_Static_assert(offsetof(struct shm_rec, flags) == 20, "shm_rec layout");
_Static_assert(sizeof(struct shm_doorbell) == SHM_LINE, "doorbell is one line");
_Static_assert(offsetof(struct shm_worker, task_tail) == 1 * SHM_LINE, "line 1");
_Static_assert(offsetof(struct shm_worker, result_head) == 2 * SHM_LINE, "line 2");
_Static_assert(offsetof(struct shm_worker, result_tail) == 3 * SHM_LINE, "line 3");
_Static_assert(offsetof(struct shm_worker, bell) == 4 * SHM_LINE, "line 4");
_Static_assert(offsetof(struct shm_worker, state) == 5 * SHM_LINE, "line 5");
_Static_assert(offsetof(struct shm_worker, message) == 6 * SHM_LINE, "message");
_Static_assert(sizeof(struct shm_worker) == 6 * SHM_LINE + SHM_MSG_MAX, "shm_worker size");
_Static_assert(sizeof(struct shm_worker) % SHM_LINE == 0, "workers stay line-aligned");
_Static_assert(offsetof(struct shm_header, max_result_bytes) == 64, "shm_header layout");
_Static_assert(offsetof(struct shm_header, batch_wait_ns) == 80, "shm_header layout");
_Static_assert(offsetof(struct shm_header, host_bell) == 2 * SHM_LINE, "host bell on line 2");
_Static_assert(sizeof(struct shm_header) == 3 * SHM_LINE, "shm_header size");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4, "atomics");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "magic is little-endian");

#endif /* GPUD_SHM_LAYOUT_H */
