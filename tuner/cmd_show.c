/* cmd_show.c: `attntune show [--db PATH] [--json]`: the best stored configuration per (device, d, n, dtype,
 * causal), from cache_db's `best` view, as an aligned table or a JSON array. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmds.h"
#include "db.h"
#include "spec.h"

typedef struct {
  char *device, *spec, *summary, *algo, *created;
  int d, n, n_kv, batch, heads, heads_kv, causal;
  attn_dtype dtype;
  double time_ms, gflops, error;
  int has_error;
  long long reads, writes;
  char provenance[16];
} show_row;

typedef struct {
  show_row *rows;
  int count, cap;
} show_list;

static char *dup_str(const char *s) {
  s = s ? s : "";
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p) memcpy(p, s, n);
  return p;
}

static int collect(void *ctx, const attn_db_meas *m) {
  show_list *l = ctx;
  if (l->count == l->cap) {
    int cap = l->cap ? 2 * l->cap : 64;
    show_row *r = realloc(l->rows, sizeof *r * (size_t)cap);
    if (!r) return 1;
    l->rows = r;
    l->cap = cap;
  }
  show_row *r = &l->rows[l->count];
  memset(r, 0, sizeof *r);
  attn_spec s;
  char err[256], sum[384];
  int parsed = attn_spec_parse(m->spec, &s, err, sizeof err) == ATTN_OK;
  if (parsed) attn_spec_summary(&s, sum, sizeof sum);
  r->device = dup_str(m->device);
  r->spec = dup_str(m->spec);
  r->summary = dup_str(parsed ? sum : m->spec);
  r->algo = dup_str(parsed ? attn_algo_name(s.algo) : "?");
  r->created = dup_str(m->created);
  l->count++; /* counted before the check so the strings are freed either way */
  if (!r->device || !r->spec || !r->summary || !r->algo || !r->created) return 1;
  r->d = m->d;
  r->n = m->n;
  r->n_kv = m->n_kv;
  r->batch = m->batch;
  r->heads = m->heads;
  r->heads_kv = m->heads_kv;
  r->causal = m->causal;
  r->dtype = m->dtype;
  r->time_ms = m->time_ms;
  r->gflops = m->gflops;
  r->has_error = m->has_error;
  r->error = m->error;
  r->reads = m->reads;
  r->writes = m->writes;
  snprintf(r->provenance, sizeof r->provenance, "%s", m->provenance ? m->provenance : "");
  return 0;
}

static void free_list(show_list *l) {
  for (int i = 0; i < l->count; i++) {
    free(l->rows[i].device);
    free(l->rows[i].spec);
    free(l->rows[i].summary);
    free(l->rows[i].algo);
    free(l->rows[i].created);
  }
  free(l->rows);
}

static int print_json(const show_list *l) {
  json_t *arr = json_array();
  for (int i = 0; arr && i < l->count; i++) {
    const show_row *r = &l->rows[i];
    json_t *o = json_pack("{s:s, s:i, s:i, s:i, s:s, s:b, s:i, s:i, s:i, s:s, s:s, s:s, s:f, s:f, s:s, s:s}",
                          "device", r->device, "d", r->d, "n", r->n, "n_kv", r->n_kv, "dtype",
                          attn_dtype_name(r->dtype), "causal", r->causal, "batch", r->batch, "heads", r->heads,
                          "heads_kv", r->heads_kv, "algo", r->algo, "spec", r->spec, "summary", r->summary,
                          "time_ms", r->time_ms, "gflops", r->gflops, "provenance", r->provenance, "created",
                          r->created);
    if (!o || json_array_append_new(arr, o) != 0) {
      json_decref(arr);
      arr = NULL;
      break;
    }
    json_object_set_new(o, "error", r->has_error ? json_real(r->error) : json_null());
    json_object_set_new(o, "reads", r->reads >= 0 ? json_integer(r->reads) : json_null());
    json_object_set_new(o, "writes", r->writes >= 0 ? json_integer(r->writes) : json_null());
  }
  char *s = arr ? json_dumps(arr, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(arr);
  if (!s) {
    fprintf(stderr, "attntune show: out of memory\n");
    return 1;
  }
  puts(s);
  free(s);
  return 0;
}

static void print_table(const show_list *l) {
  int wdev = (int)strlen("device"), wsum = (int)strlen("configuration");
  for (int i = 0; i < l->count; i++) {
    int a = (int)strlen(l->rows[i].device), b = (int)strlen(l->rows[i].summary);
    if (a > wdev) wdev = a;
    if (b > wsum) wsum = b;
  }
  printf("%-*s %4s %7s %-5s %6s  %-*s %11s %9s %9s  %s\n", wdev, "device", "d", "n", "dtype", "causal", wsum,
         "configuration", "time_ms", "GFLOP/s", "error", "provenance");
  for (int i = 0; i < l->count; i++) {
    const show_row *r = &l->rows[i];
    char err[32];
    if (r->has_error) snprintf(err, sizeof err, "%.2e", r->error);
    else snprintf(err, sizeof err, "-");
    printf("%-*s %4d %7d %-5s %6d  %-*s %11.4f %9.1f %9s  %s\n", wdev, r->device, r->d, r->n,
           attn_dtype_name(r->dtype), r->causal, wsum, r->summary, r->time_ms, r->gflops, err, r->provenance);
  }
}

int attn_cmd_show(int argc, char **argv) {
  const char *db_arg = NULL;
  int json = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--db") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "attntune show: --db needs a path\n");
        return 2;
      }
      db_arg = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: attntune show [--db PATH] [--json]\n"
             "  the best stored configuration per (device, d, n, dtype, causal): exact algorithms before\n"
             "  approximate ones, measured rows before model rows, then the fastest.\n"
             "  database: --db, else $ATTN_DB, else ~/.cache/attntune/attntune.db\n");
      return 0;
    } else {
      fprintf(stderr, "attntune show: unknown option '%s' (usage: attntune show [--db PATH] [--json])\n", argv[i]);
      return 2;
    }
  }
  char path[4096], err[1024];
  if (db_arg) snprintf(path, sizeof path, "%s", db_arg);
  else if (attn_db_default_path(path, sizeof path) != 0) {
    fprintf(stderr, "attntune show: database path too long\n");
    return 2;
  }
  attn_db *db = NULL;
  if (attn_db_open(path, 0, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune show: %s\n", err);
    return 1;
  }
  show_list l = {0};
  int rc = attn_db_best_foreach(db, collect, &l);
  int status = 0;
  if (rc != 0) {
    fprintf(stderr, "attntune show: %s: %s\n", path, rc < 0 ? attn_db_errmsg(db) : "out of memory");
    status = 1;
  } else if (json) {
    status = print_json(&l);
  } else if (l.count == 0) {
    printf("no tuned rows in %s (run attntune --gpu cpu --d 64 to make some)\n", path);
  } else {
    print_table(&l);
  }
  free_list(&l);
  attn_db_close(db);
  return status;
}
