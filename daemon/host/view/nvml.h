/* SPDX-License-Identifier: MIT */
/* GPU utilisation and memory for the dashboard, through NVML when the machine has it
 * (libnvidia-ml.so.1, loaded at run time; no CUDA context is created). */
#ifndef GPUD_NVML_H
#define GPUD_NVML_H

struct nvml;

struct nvml_sample {
	unsigned util;                /* percent */
	unsigned long long mem_used;  /* bytes */
	unsigned long long mem_total; /* bytes */
};

/* NULL when NVML is absent or does not start. */
struct nvml *nvml_open(void);
/* 0 with *s filled, or -1 (no such device, NVML error). NVML numbers GPUs its own way
 * (PCI order) and ignores CUDA_VISIBLE_DEVICES, so the GPU is looked up by its PCI bus
 * id as CUDA reported it ("0000:3B:00.0"); only without one (no CUDA runtime to ask)
 * by gpu_id as an NVML index. */
int nvml_sample(struct nvml *n, const char *bus_id, int gpu_id, struct nvml_sample *s);
void nvml_close(struct nvml *n);

#endif
