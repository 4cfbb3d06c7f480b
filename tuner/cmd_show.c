/* cmd_show.c: `attntune show [--db PATH] [--json]`: the best stored configuration per problem (device, d, d_v, n, n_kv,
 * dtype, causal, batch*heads, heads_kv, threads, pass, variant), from cache_db's `best` view, as an aligned table or a
 * JSON array, with how each time was measured: repetitions, spread, the load meanwhile, a flag on noisy rows, and for
 * rows of the performance model what limits the time (`bound`). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmds.h"
#include "db.h"
#include "spec.h"

typedef struct {
  char *device, *spec, *summary, *algo, *created;
  int d, d_v, n, n_kv, batch, heads, heads_kv, causal;
  int gpu;                 /* a CUDA kernel's row: its rate is shown in TFLOP/s */
  attn_dtype dtype;
  double time_ms, gflops, error;
  int has_error;
  long long reads, writes;
  char provenance[16];
  int threads, reps, final, chosen, is_default;
  double iqr_ms, load;
  char bound[32];          /* model rows: what limits the time; "" when none */
  char pass[4];            /* "fwd" | "bwd" */
  char *variant;           /* score modifiers, KV layout; "" for dense attention */
} show_row;

/* A row is flagged noisy when its repetitions spread over more than this fraction of the median, or other processes
 * used more than this many cores while it was measured (the estimate corrects for them, but less surely). */
#define NOISY_SPREAD 0.10
#define NOISY_LOAD 0.5

static int noisy(const show_row *r) {
  return r->reps > 0 && ((r->iqr_ms >= 0 && r->iqr_ms > NOISY_SPREAD * r->time_ms) || r->load > NOISY_LOAD);
}

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
  const int bwd = m->pass && strcmp(m->pass, "bwd") == 0;
  /* a backward row's tiles follow the backward's rules, not the forward's */
  int parsed = (bwd ? attn_spec_parse_fields : attn_spec_parse)(m->spec, &s, err, sizeof err) == ATTN_OK;
  if (parsed) attn_spec_summary(&s, sum, sizeof sum);
  r->device = dup_str(m->device);
  r->spec = dup_str(m->spec);
  r->summary = dup_str(parsed ? sum : m->spec);
  if (r->summary && (bwd || (m->variant && m->variant[0]))) {
    /* the backward's rows say so after the configuration, as attn_plan_describe does, and a variant's its text */
    const char *v = m->variant ? m->variant : "";
    char *both = malloc(strlen(r->summary) + strlen(v) + 16);
    if (both) sprintf(both, "%s%s%s%s%s", r->summary, bwd ? " backward" : "", v[0] ? " [" : "", v, v[0] ? "]" : "");
    free(r->summary);
    r->summary = both;
  }
  r->algo = dup_str(parsed ? attn_algo_name(s.algo) : "?");
  r->created = dup_str(m->created);
  r->variant = dup_str(m->variant);
  l->count++; /* counted before the check so the strings are freed either way */
  if (!r->device || !r->spec || !r->summary || !r->algo || !r->created || !r->variant) return 1;
  snprintf(r->pass, sizeof r->pass, "%s", bwd ? "bwd" : "fwd");
  r->d = m->d;
  r->d_v = m->d_v > 0 ? m->d_v : m->d;
  r->gpu = parsed && s.target == ATTN_TARGET_CUDA;
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
  r->threads = m->threads;
  r->reps = m->reps;
  r->iqr_ms = m->iqr_ms;
  r->load = m->load;
  r->final = m->final;
  r->chosen = m->chosen;
  r->is_default = m->is_default;
  snprintf(r->bound, sizeof r->bound, "%s", m->bound ? m->bound : "");
  return 0;
}

static void free_list(show_list *l) {
  for (int i = 0; i < l->count; i++) {
    free(l->rows[i].device);
    free(l->rows[i].spec);
    free(l->rows[i].summary);
    free(l->rows[i].algo);
    free(l->rows[i].created);
    free(l->rows[i].variant);
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
    json_object_set_new(o, "d_v", json_integer(r->d_v));
    json_object_set_new(o, "error", r->has_error ? json_real(r->error) : json_null());
    json_object_set_new(o, "reads", r->reads >= 0 ? json_integer(r->reads) : json_null());
    json_object_set_new(o, "writes", r->writes >= 0 ? json_integer(r->writes) : json_null());
    json_object_set_new(o, "threads", json_integer(r->threads));
    json_object_set_new(o, "reps", r->reps > 0 ? json_integer(r->reps) : json_null());
    json_object_set_new(o, "iqr_ms", r->reps > 0 && r->iqr_ms >= 0 ? json_real(r->iqr_ms) : json_null());
    json_object_set_new(o, "load", r->load >= 0 ? json_real(r->load) : json_null());
    json_object_set_new(o, "final", json_boolean(r->final));
    json_object_set_new(o, "chosen", json_boolean(r->chosen));
    json_object_set_new(o, "is_default", json_boolean(r->is_default));
    json_object_set_new(o, "noisy", json_boolean(noisy(r)));
    json_object_set_new(o, "bound", r->bound[0] ? json_string(r->bound) : json_null());
    json_object_set_new(o, "pass", json_string(r->pass));
    json_object_set_new(o, "variant", json_string(r->variant));
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

/* Length of the valid UTF-8 sequence at s (1..4), with its code point; 0 when the bytes there are not one (a stray
 * continuation byte, a lead byte without its continuations, an overlong form, a surrogate, beyond U+10FFFF). */
static int utf8_seq(const unsigned char *s, unsigned long *cp) {
  int len;
  unsigned long c, min;
  if (s[0] < 0x80) {
    *cp = s[0];
    return 1;
  }
  if (s[0] >= 0xc2 && s[0] <= 0xdf) len = 2, c = s[0] & 0x1f, min = 0x80;
  else if (s[0] >= 0xe0 && s[0] <= 0xef) len = 3, c = s[0] & 0x0f, min = 0x800;
  else if (s[0] >= 0xf0 && s[0] <= 0xf4) len = 4, c = s[0] & 0x07, min = 0x10000;
  else return 0;
  for (int i = 1; i < len; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0; /* the string's NUL ends this loop too */
    c = c << 6 | (s[i] & 0x3f);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
  *cp = c;
  return len;
}

/* Writes s for a terminal (f NULL: only counts): a database can come from elsewhere (import, merge), and a name with
 * ESC [ 2 J would clear the screen, or worse. Control characters (below 0x20, 0x7f, and the C1 range U+0080..U+009F,
 * which some terminals obey too) and every byte not part of valid UTF-8 come out as \xNN. Returns the bytes written. */
static size_t put_text(FILE *f, const char *str) {
  const unsigned char *s = (const unsigned char *)str;
  size_t out = 0;
  while (*s) {
    unsigned long cp = 0;
    int len = utf8_seq(s, &cp);
    int control = len > 0 && (cp < 0x20 || (cp >= 0x7f && cp <= 0x9f));
    if (len > 0 && !control) {
      if (f) fwrite(s, 1, (size_t)len, f);
      out += (size_t)len;
      s += len;
      continue;
    }
    /* a control character: all its bytes; invalid UTF-8: the one byte, and the next ones are looked at afresh */
    for (int i = 0; i < (len > 0 ? len : 1); i++) {
      if (f) fprintf(f, "\\x%02x", s[i]);
      out += 4;
    }
    s += len > 0 ? len : 1;
  }
  return out;
}

/* put_text left-aligned in a field of width bytes. */
static void put_field(const char *s, int width) {
  size_t w = put_text(stdout, s);
  for (; w < (size_t)width; w++) putchar(' ');
}

static void print_table(const show_list *l) {
  int wdev = (int)strlen("device"), wsum = (int)strlen("configuration");
  for (int i = 0; i < l->count; i++) {
    /* widths of the escaped text: that is what is printed */
    size_t a = put_text(NULL, l->rows[i].device), b = put_text(NULL, l->rows[i].summary);
    if (a > (size_t)wdev) wdev = a < 4096 ? (int)a : 4096;
    if (b > (size_t)wsum) wsum = b < 4096 ? (int)b : 4096;
  }
  /* the rate with its unit on each row: a GPU's hundreds of TFLOP/s read badly as GFLOP/s beside a CPU's tens */
  printf("%-*s %4s %4s %7s %7s %5s %3s %-5s %6s  %-*s %11s %17s %9s  %-10s %s\n", wdev, "device", "d", "d_v", "n",
         "n_kv", "b*h", "thr", "dtype", "causal", wsum, "configuration", "time_ms", "rate", "error", "provenance",
         "measured");
  int flagged = 0;
  for (int i = 0; i < l->count; i++) {
    const show_row *r = &l->rows[i];
    char err[32], how[160] = "", thr[16] = "-";
    if (r->has_error) snprintf(err, sizeof err, "%.2e", r->error);
    else snprintf(err, sizeof err, "-");
    if (r->threads > 0) snprintf(thr, sizeof thr, "%d", r->threads);
    if (r->reps > 0) {
      size_t k = (size_t)snprintf(how, sizeof how, "%d reps", r->reps);
      if (r->iqr_ms >= 0 && r->time_ms > 0 && k < sizeof how)
        k += (size_t)snprintf(how + k, sizeof how - k, ", iqr %.1f%%", 100 * r->iqr_ms / r->time_ms);
      if (r->load >= 0 && k < sizeof how) k += (size_t)snprintf(how + k, sizeof how - k, ", load %.1f", r->load);
    }
    size_t k = strlen(how);
    if (r->chosen && k < sizeof how)
      k += (size_t)snprintf(how + k, sizeof how - k, "%s%s", k ? "; " : "",
                            r->is_default ? "default kept by the finalist round" : "beat the default");
    if (noisy(r) && k < sizeof how) {
      snprintf(how + k, sizeof how - k, "%sNOISY", k ? "; " : "");
      flagged++;
    }
    /* the database's strings escaped (put_field), the numbers and the fixed words as they are */
    put_field(r->device, wdev);
    printf(" %4d %4d %7d %7d %5lld %3s %-5s %6d  ", r->d, r->d_v, r->n, r->n_kv, (long long)r->batch * r->heads, thr,
           attn_dtype_name(r->dtype), r->causal);
    put_field(r->summary, wsum);
    printf(" %11.4f %9.1f %-7s %9s  ", r->time_ms, r->gpu ? r->gflops / 1000 : r->gflops,
           r->gpu ? "TFLOP/s" : "GFLOP/s", err);
    put_field(r->provenance, 10);
    if (r->bound[0]) { /* a model row: what limits its time */
      printf(" %s%sbound: ", how, how[0] ? "; " : "");
      put_text(stdout, r->bound);
      putchar('\n');
    } else {
      printf(" %s\n", how[0] ? how : "-");
    }
  }
  if (flagged)
    printf("NOISY: the repetitions spread over more than %.0f%% of the median, or other processes used more than %.1f "
           "cores meanwhile; `attntune tune --remeasure` with the same arguments times them again\n",
           NOISY_SPREAD * 100, NOISY_LOAD);
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
             "  the best stored configuration per problem (device, d, d_v, n, n_kv, dtype, causal, batch*heads,\n"
             "  heads_kv, threads, pass, variant): exact algorithms before approximate ones, measured rows before\n"
             "  model rows, the finalist round's choice, then the fastest (within 3%%: the fewest transfers). The\n"
             "  backward's rows (pass bwd, attn_plan_create_backward's) say \"backward\" after the configuration, and\n"
             "  a variant's score modifiers follow it in [ ] (--json: \"pass\" and \"variant\"). The last column\n"
             "  says how the time was measured; NOISY marks rows whose repetitions spread over 10%% or that ran\n"
             "  beside other load.\n"
             "  The rate is in GFLOP/s on CPU rows and TFLOP/s on GPU rows (--json: gflops on every row; a backward\n"
             "  counts 2.5 times the forward's flops, as FlashAttention does).\n"
             "  database: --db, else $ATTN_DB, else $XDG_CACHE_HOME/attntune/attntune.db, else\n"
             "  ~/.cache/attntune/attntune.db\n");
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
  /* a reader: works on a file it cannot write (read-only then, db.h) */
  if (attn_db_open_ex(path, ATTN_DB_READER, &db, err, sizeof err) != ATTN_OK) {
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
