/* strategy_find.h: where `attntune tune --strategy NAME` finds NAME.lua. */
#ifndef ATTN_STRATEGY_FIND_H
#define ATTN_STRATEGY_FIND_H

#include <stddef.h>

/* NAME.lua in $ATTN_SCRIPTS_DIR when set, else in the strategy directory beside the running executable
 * (attn_strategy_dir). 0 with the file in path; -1 with a one-line reason in why that names the directory looked
 * in and the strategies it holds (none when it is missing), never strategies that are not there. */
int attn_strategy_find(const char *name, char *path, size_t len, char *why, size_t whylen);

/* The installed strategies' directory for this executable: /proc/self/exe's directory joined with the path from
 * the install's bin directory to its share/attntune/strategies (../share/attntune/strategies by default; the build
 * tree keeps a copy at the same place relative to the CLI). 0, or -1 when the executable's path is unknown. */
int attn_strategy_dir(char *dir, size_t len);

#endif
