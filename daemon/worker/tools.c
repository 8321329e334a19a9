/* SPDX-License-Identifier: MIT */
/* gpud-worker's helper modes: short-lived processes that load what the host must not
 * (a worker plugin, the CUDA runtime) and report on it. */
#define _GNU_SOURCE
#include "tools.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "loader.h"

int worker_check(const char *path)
{
	struct plugin pl;
	char err[1200];
	if (loader_open(&pl, path, LOADER_WORKER, err, sizeof err) < 0) {
		fprintf(stderr, "%s\n", err);
		return 2;
	}
	printf("%s %s\n", pl.info->name ? pl.info->name : "?",
	       pl.info->version ? pl.info->version : "?");
	/* The keys it declares (ABI 1.2): a line "keys", then one a line. */
	const char *const *keys = pl.keys;
	if (keys) {
		printf("keys\n");
		for (size_t i = 0; keys[i] && i < 4096; i++)
			printf("%s\n", keys[i]);
	}
	loader_close(&pl);
	return 0;
}

/* Counts CUDA devices through cudart, loaded at run time: this process exists only so
 * the host never creates a CUDA context. Prints the count, or one line naming the CUDA
 * error, and exits 0 or 2. */
int worker_count_gpus(void)
{
	static const char *const libs[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
					   "/usr/local/cuda/lib64/libcudart.so"};
	void *lib = NULL;
	for (size_t i = 0; i < sizeof libs / sizeof *libs && !lib; i++)
		lib = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "gpus = all: the CUDA runtime (libcudart) is not installed\n");
		return 2;
	}
	int (*get_count)(int *) = (int (*)(int *))dlsym(lib, "cudaGetDeviceCount");
	const char *(*get_name)(int) = (const char *(*)(int))dlsym(lib, "cudaGetErrorName");
	const char *(*get_string)(int) = (const char *(*)(int))dlsym(lib, "cudaGetErrorString");
	if (!get_count) {
		fprintf(stderr, "gpus = all: libcudart has no cudaGetDeviceCount\n");
		return 2;
	}
	int n = 0; /* cudart leaves it untouched on error */
	int rc = get_count(&n);
	/* Without a driver, cudart says "insufficient driver" (35) or "no device" (100):
	 * the real story is that this machine has no NVIDIA driver. */
	void *driver = rc != 0 ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) : NULL;
	if (rc != 0 && !driver) {
		fprintf(stderr, "gpus = all: this machine has no NVIDIA driver (libcuda.so.1 "
				"cannot be loaded), so there is no GPU to count; list GPU ids "
				"instead (gpus = 0,1) for plugins that simulate GPUs\n");
		return 2;
	}
	if (driver)
		dlclose(driver);
	if (rc == 100) {
		fprintf(stderr, "gpus = all: the NVIDIA driver sees no GPU (cudaErrorNoDevice)\n");
		return 2;
	}
	if (rc != 0) {
		fprintf(stderr, "gpus = all: no CUDA device usable: %s (%s)\n",
			get_name ? get_name(rc) : "error", get_string ? get_string(rc) : "?");
		return 2;
	}
	if (n <= 0) {
		fprintf(stderr, "gpus = all: no CUDA device found\n");
		return 2;
	}
	/* Then each device's PCI bus id, in CUDA's numbering (the one `gpus` and
	 * CUDA_VISIBLE_DEVICES use), for NVML, which numbers them otherwise. */
	printf("%d\n", n);
	int (*bus_id)(char *, int, int) =
		(int (*)(char *, int, int))dlsym(lib, "cudaDeviceGetPCIBusId");
	for (int i = 0; bus_id && i < n; i++) {
		char id[64] = "";
		printf("%s\n", bus_id(id, (int)sizeof id, i) == 0 ? id : "-");
	}
	return 0;
}

/* One line, tab-separated: kind, name, version, description. The plugin is checked
 * as fully as a run would (descriptor and required symbols). */
int worker_describe(const char *path)
{
	static const enum loader_kind kinds[] = {LOADER_WORKER, LOADER_GENERATOR, LOADER_SINK};
	struct plugin pl;
	char err[1200];
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "cannot load: %s\n", dlerror());
		return 2;
	}
	/* Its descriptor says which kind to load it as. */
	const struct gpud_plugin_info *info = dlsym(h, "gpud_plugin_info");
	if (!info || !info->kind) {
		fprintf(stderr, "not a gpud plugin (no gpud_plugin_info)\n");
		return 2;
	}
	for (size_t i = 0; i < 3; i++) {
		if (strcmp(info->kind, loader_kind_name(kinds[i])) != 0)
			continue;
		if (loader_open(&pl, path, kinds[i], err, sizeof err) < 0) {
			fprintf(stderr, "%s\n", err);
			return 2;
		}
		printf("%s\t%s\t%s\t%s\n", info->kind, info->name ? info->name : "?",
		       info->version ? info->version : "?", pl.description ? pl.description : "");
		loader_close(&pl);
		dlclose(h);
		return 0;
	}
	fprintf(stderr, "unknown plugin kind '%s'\n", info->kind);
	return 2;
}
