/* json_io.h: the steps of `attntune export` and `attntune import` between the file and the database (cmd_json.c), apart
 * from the verbs' argument parsing and file handling, so that tests (tests/fuzz/fuzz_import.c) can feed documents to
 * the very code the verbs run, against an in-memory database. The document's format is cmd_json.c's header comment. */
#ifndef ATTN_JSON_IO_H
#define ATTN_JSON_IO_H

#include <jansson.h>
#include <stddef.h>
#include "db.h"

/* The database as an export document (new reference, caller decrefs), or NULL with the reason in err: "out of memory",
 * or "PATH: what failed" (path names the database in messages only). */
json_t *attn_export_doc(attn_db *db, const char *path, char *err, size_t errlen);

/* 0 when doc looks like an export ({"attntune_export": 1, "devices": [...], "measurements": [...], "runs": [...]},
 * runs optional); else -1 with "FILE: why" in err. Nothing else is checked here: attn_import_doc checks every row. */
int attn_import_check(json_t *doc, const char *file, char *err, size_t errlen);

typedef struct attn_import_counts {
  size_t devices, runs, measurements; /* the document's */
  int added, replaced, kept;          /* measurements: new keys, stored rows replaced, stored rows kept */
} attn_import_counts;

/* Imports a document that passed attn_import_check into db, in one transaction: every row or none. Strict: unknown
 * fields, wrong types and out-of-range values fail the whole import. A measurement whose key is stored replaces the
 * stored row only when attn_db_meas_better says so. Runs that give no start time all get the time of the import (one
 * run then, for one device and command: attn_db_run_put's rule). 0 with *counts; -1 with a one-line reason in err
 * ("FILE: measurements[3]: ... (nothing imported)", "out of memory", "PATH: ..."). file and path name the document and
 * the database in messages only. */
int attn_import_doc(attn_db *db, json_t *doc, const char *file, const char *path, attn_import_counts *counts,
                    char *err, size_t errlen);

#endif
