/* SPDX-License-Identifier: MIT */
/* Compiled with -std=c11 -pedantic -Wall -Wextra -Werror: the header stands alone. */
#include <gpud/plugin.h>

GPUD_PLUGIN("worker", "abi-strict", "0");

int gpud_abi_strict_probe(void);
int gpud_abi_strict_probe(void)
{
	struct gpud_error e;
	return gpud_fail(&e, "%d", GPUD_ABI_MAJOR);
}
