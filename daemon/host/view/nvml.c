/* SPDX-License-Identifier: MIT */
#define _GNU_SOURCE
#include "view/nvml.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

/* The few NVML entry points used, with their C types (nvml.h is not needed). */
typedef void *nvml_device;
struct nvml_util {
	unsigned gpu, memory;
};
struct nvml_mem {
	unsigned long long total, free, used;
};

struct nvml {
	void *lib;
	int (*shutdown)(void);
	int (*by_index)(unsigned, nvml_device *);
	int (*by_bus)(const char *, nvml_device *);
	int (*by_uuid)(const char *, nvml_device *);
	int (*util)(nvml_device, struct nvml_util *);
	int (*mem)(nvml_device, struct nvml_mem *);
};

struct nvml *nvml_open(void)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		return NULL;
	struct nvml *n = calloc(1, sizeof *n);
	int (*init)(void) = (int (*)(void))dlsym(lib, "nvmlInit_v2");
	if (!n || !init)
		goto fail;
	n->lib = lib;
	n->shutdown = (int (*)(void))dlsym(lib, "nvmlShutdown");
	n->by_index = (int (*)(unsigned, nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByIndex_v2");
	n->by_bus = (int (*)(const char *, nvml_device *))dlsym(lib,
								"nvmlDeviceGetHandleByPciBusId_v2");
	n->by_uuid = (int (*)(const char *, nvml_device *))dlsym(lib, "nvmlDeviceGetHandleByUUID");
	n->util = (int (*)(nvml_device, struct nvml_util *))dlsym(lib,
								  "nvmlDeviceGetUtilizationRates");
	n->mem = (int (*)(nvml_device, struct nvml_mem *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
	if (!n->shutdown || !n->by_index || !n->util || !n->mem || init() != 0)
		goto fail;
	return n;
fail:
	free(n);
	dlclose(lib);
	return NULL;
}

int nvml_sample(struct nvml *n, const char *bus_id, int gpu_id, struct nvml_sample *s)
{
	nvml_device dev;
	struct nvml_util u;
	struct nvml_mem m;
	if (!n)
		return -1;
	if (bus_id && (!strncmp(bus_id, "GPU-", 4) || !strncmp(bus_id, "MIG-", 4))) {
		if (!n->by_uuid || n->by_uuid(bus_id, &dev) != 0)
			return -1;
	} else if (bus_id && bus_id[0] && n->by_bus) {
		if (n->by_bus(bus_id, &dev) != 0)
			return -1;
	} else if (gpu_id < 0 || n->by_index((unsigned)gpu_id, &dev) != 0) {
		return -1;
	}
	if (n->util(dev, &u) != 0 || n->mem(dev, &m) != 0)
		return -1;
	s->util = u.gpu;
	s->mem_used = m.used;
	s->mem_total = m.total;
	return 0;
}

void nvml_close(struct nvml *n)
{
	if (!n)
		return;
	n->shutdown();
	dlclose(n->lib);
	free(n);
}
