/* SPDX-License-Identifier: MIT */
/*
 * Example CUDA worker `dense`: a batched dense layer. Each task is a float32 vector of
 * in_dim elements; the result is W·x, out_dim float32s. W (out_dim x in_dim) is made in
 * setup from the run's base seed (info->seed - info->worker_id), so every worker holds
 * the same model and dense-check can verify any result on the CPU.
 *
 * Keys: in_dim (1024), out_dim (1024); fault = N makes the batch holding task N write
 * through a bad device pointer (a sticky CUDA error: the worker asks to be replaced).
 *
 * With batching (`[job] batch_size`) a call gets up to batch_size tasks: their inputs go
 * to the GPU in one strided copy when they lie evenly in the task ring (the usual case),
 * one kernel computes the whole batch, and the results come back the same way. With
 * pinned rings (`[job] pin_memory`, GPUD_WORKER_PINNED) those copies are direct DMA from
 * and into shared memory; without, they go through a pinned staging buffer.
 */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpud/plugin.h>

#include "dense_common.h"

GPUD_PLUGIN("worker", "dense", "1.0");
GPUD_PLUGIN_DESCRIPTION("example (CUDA): a batched dense layer, W·x per float32 vector");
GPUD_PLUGIN_KEYS("in_dim", "out_dim", "fault");

#define TILE 16

struct dense {
	uint32_t in_dim, out_dim, batch;
	bool pinned;
	long fault;
	float *d_w, *d_x, *d_y;
	float *h_x, *h_y; /* pinned staging, when the rings are not pinned */
	cudaStream_t stream;
	/* per call: the tasks that go to the GPU, their inputs and result buffers */
	struct gpud_task **ok;
	const void **ins;
	void **outs;
};

/* y[b][o] = sum_i w[o][i] * x[b][i], tiled over (b, o) with shared memory. */
__global__ void dense_kernel(const float *__restrict__ w, const float *__restrict__ x,
			     float *__restrict__ y, int n, int in_dim, int out_dim)
{
	__shared__ float xs[TILE][TILE + 1];
	__shared__ float ws[TILE][TILE + 1];
	int b = blockIdx.y * TILE + threadIdx.y;
	int o = blockIdx.x * TILE + threadIdx.x;
	float acc = 0;
	for (int k0 = 0; k0 < in_dim; k0 += TILE) {
		int kx = k0 + threadIdx.x, kw = k0 + threadIdx.y;
		xs[threadIdx.y][threadIdx.x] =
			(b < n && kx < in_dim) ? x[(size_t)b * in_dim + kx] : 0;
		int wo = blockIdx.x * TILE + threadIdx.x;
		ws[threadIdx.y][threadIdx.x] =
			(wo < out_dim && kw < in_dim) ? w[(size_t)wo * in_dim + kw] : 0;
		__syncthreads();
		for (int k = 0; k < TILE; k++)
			acc += xs[threadIdx.y][k] * ws[k][threadIdx.x];
		__syncthreads();
	}
	if (b < n && o < out_dim)
		y[(size_t)b * out_dim + o] = acc;
}

/* The fault hook: a store through a pointer no allocation covers. */
__global__ void bad_store(float *p)
{
	p[threadIdx.x] = 1.0f;
}

static int cuda_fail(struct gpud_error *err, const char *what, cudaError_t e)
{
	return gpud_fail(err, "dense: %s: %s (%s)", what, cudaGetErrorName(e),
			 cudaGetErrorString(e));
}

/* Errors after which the context is unusable: the process must go. */
static bool sticky(cudaError_t e)
{
	return e == cudaErrorIllegalAddress || e == cudaErrorLaunchFailure ||
	       e == cudaErrorMisalignedAddress || e == cudaErrorIllegalInstruction ||
	       e == cudaErrorHardwareStackError || e == cudaErrorInvalidPc ||
	       e == cudaErrorAssert || e == cudaErrorECCUncorrectable;
}

static void release(struct dense *d)
{
	cudaFree(d->d_w);
	cudaFree(d->d_x);
	cudaFree(d->d_y);
	cudaFreeHost(d->h_x);
	cudaFreeHost(d->h_y);
	if (d->stream)
		cudaStreamDestroy(d->stream);
	free(d->ok);
	free(d->ins);
	free(d->outs);
	free(d);
}

int gpud_worker_setup(const struct gpud_worker_info *info, void **state, struct gpud_error *err)
{
	long in_dim, out_dim, fault;
	cudaError_t e;
	if (gpud_arg_parse_long(info->args, "in_dim", 1024, &in_dim, err) < 0 ||
	    gpud_arg_parse_long(info->args, "out_dim", 1024, &out_dim, err) < 0 ||
	    gpud_arg_parse_long(info->args, "fault", -1, &fault, err) < 0)
		return -1;
	if (in_dim < 1 || out_dim < 1 || in_dim > (1 << 20) || out_dim > (1 << 20))
		return gpud_fail(err, "dense: in_dim and out_dim must be from 1 to 1048576");

	/* This process sees its GPU as device 0 (CUDA_VISIBLE_DEVICES). */
	if ((e = cudaSetDevice(0)) != cudaSuccess)
		return cuda_fail(err, "cannot use the GPU", e);

	struct dense *d = (struct dense *)calloc(1, sizeof *d);
	if (!d)
		return gpud_fail(err, "dense: out of memory");
	d->in_dim = (uint32_t)in_dim;
	d->out_dim = (uint32_t)out_dim;
	d->batch = info->batch_size ? info->batch_size : 1;
	d->pinned = info->flags & GPUD_WORKER_PINNED;
	d->fault = fault;
	d->ok = (struct gpud_task **)calloc(d->batch, sizeof *d->ok);
	d->ins = (const void **)calloc(d->batch, sizeof *d->ins);
	d->outs = (void **)calloc(d->batch, sizeof *d->outs);
	if (!d->ok || !d->ins || !d->outs) {
		release(d);
		return gpud_fail(err, "dense: out of memory");
	}

	size_t wbytes = (size_t)in_dim * out_dim * sizeof(float);
	float *w = (float *)malloc(wbytes);
	if (!w) {
		release(d);
		return gpud_fail(err, "dense: out of memory for W");
	}
	uint64_t base_seed = info->seed - (uint64_t)info->worker_id;
	for (uint32_t o = 0; o < d->out_dim; o++)
		for (uint32_t i = 0; i < d->in_dim; i++)
			w[(size_t)o * d->in_dim + i] = dense_weight(base_seed, d->in_dim, o, i);

	size_t xbytes = (size_t)d->batch * d->in_dim * sizeof(float);
	size_t ybytes = (size_t)d->batch * d->out_dim * sizeof(float);
	if ((e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking)) != cudaSuccess ||
	    (e = cudaMalloc(&d->d_w, wbytes)) != cudaSuccess ||
	    (e = cudaMalloc(&d->d_x, xbytes)) != cudaSuccess ||
	    (e = cudaMalloc(&d->d_y, ybytes)) != cudaSuccess ||
	    (!d->pinned && (e = cudaMallocHost(&d->h_x, xbytes)) != cudaSuccess) ||
	    (!d->pinned && (e = cudaMallocHost(&d->h_y, ybytes)) != cudaSuccess) ||
	    (e = cudaMemcpy(d->d_w, w, wbytes, cudaMemcpyHostToDevice)) != cudaSuccess) {
		free(w);
		release(d);
		return cuda_fail(err, "setting up the GPU", e);
	}
	free(w);
	*state = d;
	return 0;
}

/* Whether the n buffers lie at one stride from the first (one strided copy moves them). */
static size_t even_stride(const void *const *p, size_t n)
{
	if (n < 2)
		return 0;
	ptrdiff_t s = (const char *)p[1] - (const char *)p[0];
	if (s <= 0)
		return 0;
	for (size_t i = 2; i < n; i++)
		if ((const char *)p[i] - (const char *)p[i - 1] != s)
			return 0;
	return (size_t)s;
}

int gpud_worker_process_batch(void *state, struct gpud_task *t, size_t n)
{
	struct dense *d = (struct dense *)state;
	size_t in_bytes = (size_t)d->in_dim * sizeof(float);
	size_t out_bytes = (size_t)d->out_dim * sizeof(float);
	const void **ins = d->ins;
	void **outs = d->outs;
	struct gpud_task **ok = d->ok;
	size_t good = 0;
	bool fault = false;
	cudaError_t e = cudaSuccess;

	/* Tasks of the wrong size fail alone; the others are packed in order. */
	for (size_t i = 0; i < n; i++) {
		if (t[i].input_size != in_bytes) {
			gpud_task_fail(
				&t[i],
				"dense: input of %zu bytes, expected %zu (in_dim = %u floats)",
				t[i].input_size, in_bytes, d->in_dim);
			continue;
		}
		if (t[i].result.capacity < out_bytes) {
			gpud_task_fail(&t[i], "dense: max_result_bytes must be at least %zu",
				       out_bytes);
			continue;
		}
		fault |= d->fault >= 0 && t[i].id == (uint64_t)d->fault;
		ok[good] = &t[i];
		ins[good] = t[i].input;
		outs[good] = t[i].result.data;
		good++;
	}
	if (!good)
		return 0;

	/* Inputs: straight from the (pinned) ring when they lie evenly, else staged. */
	size_t stride = even_stride(ins, good);
	if (d->pinned && stride)
		e = cudaMemcpy2DAsync(d->d_x, in_bytes, ins[0], stride, in_bytes, good,
				      cudaMemcpyHostToDevice, d->stream);
	else if (d->pinned)
		for (size_t i = 0; i < good && e == cudaSuccess; i++)
			e = cudaMemcpyAsync(d->d_x + i * d->in_dim, ins[i], in_bytes,
					    cudaMemcpyHostToDevice, d->stream);
	else {
		for (size_t i = 0; i < good; i++)
			memcpy(d->h_x + i * d->in_dim, ins[i], in_bytes);
		e = cudaMemcpyAsync(d->d_x, d->h_x, good * in_bytes, cudaMemcpyHostToDevice,
				    d->stream);
	}

	if (e == cudaSuccess) {
		dim3 block(TILE, TILE);
		dim3 grid((d->out_dim + TILE - 1) / TILE, (unsigned)((good + TILE - 1) / TILE));
		dense_kernel<<<grid, block, 0, d->stream>>>(d->d_w, d->d_x, d->d_y, (int)good,
							    (int)d->in_dim, (int)d->out_dim);
		if (fault)
			bad_store<<<1, 32, 0, d->stream>>>((float *)(uintptr_t)0x10);
		e = cudaGetLastError();
	}

	/* Results: straight into each task's result buffer in the ring, or via staging. */
	size_t ostride = even_stride((const void *const *)outs, good);
	if (e == cudaSuccess) {
		if (d->pinned && ostride)
			e = cudaMemcpy2DAsync(outs[0], ostride, d->d_y, out_bytes, out_bytes, good,
					      cudaMemcpyDeviceToHost, d->stream);
		else if (d->pinned)
			for (size_t i = 0; i < good && e == cudaSuccess; i++)
				e = cudaMemcpyAsync(outs[i], d->d_y + i * d->out_dim, out_bytes,
						    cudaMemcpyDeviceToHost, d->stream);
		else
			e = cudaMemcpyAsync(d->h_y, d->d_y, good * out_bytes,
					    cudaMemcpyDeviceToHost, d->stream);
	}
	if (e == cudaSuccess)
		e = cudaStreamSynchronize(d->stream);
	if (e == cudaSuccess && !d->pinned)
		for (size_t i = 0; i < good; i++)
			memcpy(outs[i], d->h_y + i * d->out_dim, out_bytes);

	for (size_t i = 0; i < good; i++) {
		if (e == cudaSuccess)
			ok[i]->result.size = out_bytes;
		else if (sticky(e))
			gpud_task_fatal(ok[i], "dense: %s (%s): this worker's CUDA context is lost",
					cudaGetErrorName(e), cudaGetErrorString(e));
		else
			gpud_task_fail(ok[i], "dense: %s (%s)", cudaGetErrorName(e),
				       cudaGetErrorString(e));
	}
	return 0;
}

int gpud_worker_process(void *state, struct gpud_task *task)
{
	return gpud_worker_process_batch(state, task, 1);
}

int gpud_worker_cleanup(void *state, struct gpud_error *err)
{
	(void)err;
	release((struct dense *)state);
	return 0;
}
