/* SPDX-License-Identifier: MIT */
/* A stand-in CUDA runtime for machines without a GPU: linked as libcudart.so into a
 * folder on LD_LIBRARY_PATH, it makes `gpus = all` count FAKE_CUDA_DEVICES devices (4
 * by default). Only what gpud-worker --count-gpus calls is here. */
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
