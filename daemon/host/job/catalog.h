/* SPDX-License-Identifier: MIT */
#ifndef GPUD_CATALOG_H
#define GPUD_CATALOG_H

/* `gpud plugins`: prints every plugin found by name; the exit status. */
int catalog_list(void);

#endif
