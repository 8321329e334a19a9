/* SPDX-License-Identifier: MIT */
/* A stand-in CUDA runtime for machines without a GPU: linked as libcudart.so into a
 * folder on LD_LIBRARY_PATH, it makes `gpus = all` count FAKE_CUDA_DEVICES devices (4
 * by default). Only what gpud-worker --count-gpus and the pinning of rings call is here. */
#include <stddef.h>
#include <stdlib.h>

__attribute__((visibility("default"))) int cudaGetDeviceCount(int *count)
{
	const char *n = getenv("FAKE_CUDA_DEVICES");
	*count = n && *n ? atoi(n) : 4;
	return 0;
}

__attribute__((visibility("default"))) const char *cudaGetErrorName(int rc)
{
	return rc ? "cudaErrorUnknown" : "cudaSuccess";
}

__attribute__((visibility("default"))) const char *cudaGetErrorString(int rc)
{
	return rc ? "unknown error" : "no error";
}

/* Pinning (pin_memory = auto, a worker whose plugin loaded this runtime): there is no
 * device to register memory with, as on a machine without a GPU; the calls are
 * counted for the test that checks they were made, failed and were skipped. */
static int registers;

__attribute__((visibility("default"))) int cudaHostRegister(void *ptr, size_t size, unsigned flags)
{
	(void)ptr;
	(void)size;
	(void)flags;
	registers++;
	return 100; /* cudaErrorNoDevice */
}

__attribute__((visibility("default"))) int cudaGetLastError(void)
{
	return 0;
}

__attribute__((visibility("default"))) int fake_cuda_registers(void)
{
	return registers;
}
