/* fuzz_import.c: libFuzzer target for `attntune import` (tuner/cmd_json.c). The input is the JSON file's bytes; they go
 * through the verb's own steps (json_io.h): Jansson's parse with the verb's flags, attn_import_check, then
 * attn_import_doc into a fresh in-memory database (":memory:", opened as the verb opens its target), so that no file
 * is touched per input. What must hold, beyond "no crash, no leak, no UB":
 *   - all or nothing: a failed import leaves the database empty, with a reason;
 *   - the counts add up: new + replaced + kept = the file's measurements, and the new ones are the rows stored;
 *   - every row stored is one import accepts: the database exports (attn_export_doc) and that export imports into
 *     another fresh database, whose export is the same document (cmd_json.c: export -> import -> export is identical);
 *   - importing the same file again changes nothing (0 new, 0 replaced: db.h's rule keeps a row as good as itself). */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "db.h"
#include "json_io.h"

#define CHECK(c)                                                                     \
  do {                                                                               \
    if (!(c)) {                                                                      \
      fprintf(stderr, "fuzz_import: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      abort();                                                                       \
    }                                                                                \
  } while (0)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  json_object_seed(1); /* Jansson's hash order is random per process otherwise: the same input, the same run */
  return 0;
}

static attn_db *fresh_db(void) {
  attn_db *db = NULL;
  char err[1024];
  int rc = attn_db_open_ex(":memory:", ATTN_DB_CREATE | ATTN_DB_CHECK, &db, err, sizeof err);
  if (rc != ATTN_OK) fprintf(stderr, "fuzz_import: %s\n", err);
  CHECK(rc == ATTN_OK);
  return db;
}

static int count_device(void *ctx, const attn_db_device *d) {
  (void)d;
  ++*(long long *)ctx;
  return 0;
}

static int count_run(void *ctx, const attn_db_run *r) {
  (void)r;
  ++*(long long *)ctx;
  return 0;
}

/* devices + runs + measurements stored */
static long long rows(attn_db *db) {
  long long n = 0;
  CHECK(attn_db_device_foreach(db, count_device, &n) == 0);
  CHECK(attn_db_run_foreach(db, count_run, &n) == 0);
  long long m = attn_db_meas_count(db);
  CHECK(m >= 0);
  return n + m;
}

static json_t *export(attn_db *db) {
  char err[1024];
  json_t *doc = attn_export_doc(db, ":memory:", err, sizeof err);
  if (!doc) fprintf(stderr, "fuzz_import: export: %s\n", err);
  CHECK(doc != NULL);
  return doc;
}

static void dump_both(json_t *a, json_t *b) {
  char *x = json_dumps(a, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  char *y = json_dumps(b, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
  fprintf(stderr, "fuzz_import: first export:\n%s\nfuzz_import: after import and export again:\n%s\n", x ? x : "?",
          y ? y : "?");
  free(x);
  free(y);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  json_error_t jerr;
  json_t *doc = json_loadb((const char *)data, size, 0, &jerr); /* the verb's flags (json_load_file(file, 0)) */
  if (!doc) return 0;
  char err[8192];
  err[0] = '\0';
  if (attn_import_check(doc, "fuzz.json", err, sizeof err) != 0) {
    CHECK(err[0] != '\0');
    json_decref(doc);
    return 0;
  }
  /* a database that a failed import left empty serves the next input too: a fresh one costs the migrations */
  static attn_db *empty;
  attn_db *db = empty ? empty : fresh_db();
  empty = NULL;
  attn_import_counts c;
  memset(&c, 0xff, sizeof c);
  if (attn_import_doc(db, doc, "fuzz.json", ":memory:", &c, err, sizeof err) != 0) {
    CHECK(err[0] != '\0');
    CHECK(rows(db) == 0); /* nothing imported */
    empty = db;
    json_decref(doc);
    return 0;
  }
  CHECK(c.measurements == json_array_size(json_object_get(doc, "measurements")));
  CHECK(c.added >= 0 && c.replaced >= 0 && c.kept >= 0);
  CHECK((size_t)c.added + (size_t)c.replaced + (size_t)c.kept == c.measurements);
  CHECK(attn_db_meas_count(db) == c.added);

  /* what was stored exports, and the export imports into another database and exports the same */
  json_t *out = export(db);
  attn_db *db2 = fresh_db();
  attn_import_counts c2;
  if (attn_import_check(out, "export.json", err, sizeof err) != 0 ||
      attn_import_doc(db2, out, "export.json", ":memory:", &c2, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_import: the export of an import does not import: %s\n", err);
    abort();
  }
  CHECK(c2.added == c.added && c2.replaced == 0 && c2.kept == 0);
  json_t *again = export(db2);
  if (!json_equal(out, again)) {
    dump_both(out, again);
    abort();
  }

  /* the same file again: every row is as good as the stored one, which stays */
  attn_import_counts c3;
  if (attn_import_doc(db, doc, "fuzz.json", ":memory:", &c3, err, sizeof err) != 0) {
    fprintf(stderr, "fuzz_import: a second import of the same file fails: %s\n", err);
    abort();
  }
  if (c3.added != 0 || c3.replaced != 0)
    fprintf(stderr, "fuzz_import: a second import of the same file: %d new, %d replaced\n", c3.added, c3.replaced);
  CHECK(c3.added == 0 && c3.replaced == 0);

  json_decref(again);
  json_decref(out);
  attn_db_close(db2);
  attn_db_close(db);
  json_decref(doc);
  return 0;
}
