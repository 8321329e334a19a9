/* SPDX-License-Identifier: MIT */
/* Fuzz target: the host's decoder of a result ring, the memory a worker (and whatever
 * its plugin scribbled) wrote. Input: the consumer's tail (8 bytes), the producer's
 * head (8 bytes), then the ring's bytes (the largest power of two that fits, at least
 * two lines). Every record ring_check() accepts must lie inside the ring and before the
 * head; the decoder reads each payload whole, so ASan sees any overrun. */
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"
#include "ring.h"

static const uint32_t kinds[] = {REC_OK, REC_FAIL, REC_SKIP, 0}; /* as the host */

int fuzz_ring_one(const uint8_t *data, size_t size)
{
	uint64_t tail, head;
	if (size < 16 + 2 * SHM_LINE)
		return 0;
	memcpy(&tail, data, 8);
	memcpy(&head, data + 8, 8);
	size_t cap = 2 * SHM_LINE;
	while (cap * 2 <= size - 16 && cap < (1u << 20))
		cap *= 2;
	uint8_t *mem = aligned_alloc(SHM_LINE, cap);
	if (!mem)
		return 0;
	memcpy(mem, data + 16, cap);
	/* Positions are line-aligned in a real ring; keep the fuzzer near real states but
	 * let the head be anything. */
	tail &= ~(uint64_t)(SHM_LINE - 1);
	struct ring r = {mem, cap, 0};
	uint64_t max_payload = cap / 2;
	struct shm_rec *rec;
	const char *why;
	volatile uint32_t sum = 0;
	for (int i = 0; i < 10000; i++) {
		struct shm_rec copy;
		int rc = ring_check(&r, &tail, head, kinds, max_payload, &copy, &rec, &why);
		if (rc <= 0)
			break;
		const uint8_t *p = (const uint8_t *)rec + SHM_REC_HDR;
		if ((const uint8_t *)rec < mem || p + rec->size > mem + cap)
			abort(); /* ring_check let an out-of-ring record through */
		for (uint32_t k = 0; k < rec->size; k++)
			sum += p[k];
		tail += ring_span(rec->size);
	}
	free(mem);
	return 0;
}

#ifdef GPUD_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	return fuzz_ring_one(data, size);
}
#endif
