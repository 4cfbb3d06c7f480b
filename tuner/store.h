/* store.h: what the tuner keeps in the database, through cache_db's API: one run per command, one row per
 * measurement (or model estimate), committed as it is made, and the lookup that lets a rerun skip finished work. */
#ifndef ATTN_STORE_H
#define ATTN_STORE_H

#include <stddef.h>
#include "db.h"
#include "spec.h"
#include "strategy.h"

typedef struct attn_store attn_store;

/* Opens (creating and migrating) the database at path. */
int  attn_store_open(const char *path, attn_store **out, char *err, size_t errlen);
void attn_store_close(attn_store *st);

/* A run: the device rows are filed under (name, and a JSON description), and the command line that made them. */
int attn_store_begin(attn_store *st, const char *device, const char *device_json, const char *command, char *err,
                     size_t errlen);
void attn_store_end(attn_store *st, int interrupted);
/* The CPU threads the rows of this run are measured on (part of their key); 0 (the default) for a GPU or the model. */
void attn_store_set_threads(attn_store *st, int threads);
/* The pass the rows stored and found from now on belong to (part of their key): 0 the forward (the default), 1 the
 * backward. */
void attn_store_set_backward(attn_store *st, int backward);
/* The database underneath (for the compiled kernels' resources, kres.h). */
attn_db *attn_store_db(attn_store *st);

/* 1 when a row for (problem, spec, provenance) is stored, with its result in *prev (when not NULL); 0 when not;
 * negative on a database error (err says why). A row whose failure the environment caused (status "error",
 * "launch_error", "skipped") counts as not stored: the next run measures it again. */
int attn_store_find(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance,
                    attn_eval *prev, char *err, size_t errlen);

/* Stores one row (committed before it returns). */
int attn_store_put(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance,
                   const attn_eval *e, char *err, size_t errlen);

/* Marks the stored row of (problem, spec, provenance) as the finalist round's choice for the problem. */
int attn_store_choose(attn_store *st, const attn_problem *p, const attn_spec *s, const char *provenance, char *err,
                      size_t errlen);

#endif
