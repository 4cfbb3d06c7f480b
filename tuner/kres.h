/* kres.h: what ptxas reports for a CUDA configuration (registers, spills, static shared memory), for the search
 * space's admission and the performance model's occupancy: from this run's memory, else the database's
 * kernel_resources (keyed by spec text and NVRTC version), else (when compiling is allowed) compiled with NVRTC to a
 * cubin and stored. Without NVRTC nothing is known and callers use the estimate (space.h). */
#ifndef ATTN_KRES_H
#define ATTN_KRES_H

#include "db.h"
#include "space.h"

typedef struct attn_kres_entry {
  char spec[512];
  attn_kernel_res res;
  int known;                 /* 0: compile failed or not allowed */
} attn_kres_entry;

typedef struct attn_kres {
  attn_db *db;               /* may be NULL: this run's memory only */
  int compile;               /* 1: compile what is not stored (NVRTC present) */
  char compiler[32];         /* "nvrtc 13.0"; "" without NVRTC */
  attn_kres_entry *memo;
  int count, cap;
  int compiled, stored_hits; /* for the progress line */
  /* collect mode (attn_kres_collect): the specs asked for, to compile them in parallel before the space is built */
  int collecting;
  attn_spec *want;
  int nwant, capwant;
} attn_kres;

/* compile: 1 to compile configurations not stored (ignored without NVRTC). Never fails: without NVRTC every lookup
 * answers "unknown". */
void attn_kres_init(attn_kres *k, attn_db *db, int compile);
void attn_kres_free(attn_kres *k);

/* The attn_space_opts.resources hook: 0 with *out filled, -1 when unknown (the caller estimates). ctx: attn_kres. */
int attn_kres_get(void *ctx, const attn_spec *c, attn_kernel_res *out);

/* Collect mode: attn_kres_get records the configurations asked for and answers "unknown"; attn_kres_fill then
 * compiles the recorded ones that are not stored, with `jobs` threads, and ends the mode. */
void attn_kres_collect(attn_kres *k);
void attn_kres_fill(attn_kres *k, int jobs);

#endif
