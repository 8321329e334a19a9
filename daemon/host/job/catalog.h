/* SPDX-License-Identifier: MIT */
#ifndef GPUD_CATALOG_H
#define GPUD_CATALOG_H

#include <gpud/gpud.h>

/* `gpud plugins`: every plugin found by name, as the list gpud_plugins_list gives (its
 * text what the command prints). Returns the list (NULL only out of memory) and its
 * status in *rc: 0, or 2 with the reason logged and in list->error. */
struct gpud_plugin_list *catalog_list(int *rc);

/* Frees a list catalog_list made. NULL is ignored. */
void catalog_free(struct gpud_plugin_list *list);

#endif
