/* cmd_json.c: `attntune export FILE.json` and `attntune import FILE.json` [--db PATH]: the database's devices, runs
 * and measurements as one JSON document (Jansson), every field kept, so export -> import -> export is identical.
 *   {"attntune_export": 1, "schema_version": V, "devices": [...], "runs": [...], "measurements": [...]}
 * Runs are numbered 1.. within the file; measurements name their device and kernel spec. Compiled artifacts are
 * machine-specific and not exported. Import is one transaction: all rows or none. A measurement whose key is
 * stored already replaces the stored row only when it is better by the tuner's rule (attn_db_meas_better: ok over
 * failed, a kernel's own failure over an environmental one, finalist over screening, lower time, newer).
 * Schema-4 fields (threads, reps, iqr_ms, load, final, chosen, is_default) and schema 6's bound are optional on
 * import: older files lack them and read as not recorded. Schema 7's d_v (the head dimension of V and O) is optional
 * too: a row without it takes its kernel's (the spec's dv, else d); one that contradicts the spec is refused. The
 * steps between the document and the database are json_io.h's functions (attn_export_doc, attn_import_check,
 * attn_import_doc); the verbs add the arguments and the files. Schema 8's pass ("fwd" | "bwd") and variant (score
 * modifiers and KV layout as text, "" for dense) are part of the key and optional: a file without them holds forward
 * rows of dense attention. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>
#include "cmds.h"
#include "model.h"
#include "db.h"
#include "json_io.h"
#include "spec.h"

/* ---- shared option parsing: VERB FILE [--db PATH] */

static int parse_args(const char *verb, int argc, char **argv, const char **file, char *path, size_t plen) {
  const char *db_arg = NULL;
  *file = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--db") == 0) {
      if (i + 1 >= argc) {
        fprintf(stderr, "attntune %s: --db needs a path\n", verb);
        return 2;
      }
      db_arg = argv[++i];
    } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      printf("usage: attntune %s FILE.json [--db PATH]\n"
             "  %s the database's devices, runs and measurements %s JSON (FILE '-': %s)\n"
             "  database: --db, else $ATTN_DB, else $XDG_CACHE_HOME/attntune/attntune.db, else\n"
             "  ~/.cache/attntune/attntune.db\n",
             verb, strcmp(verb, "export") == 0 ? "writes" : "reads", strcmp(verb, "export") == 0 ? "as" : "from",
             strcmp(verb, "export") == 0 ? "standard output" : "standard input");
      return -1;
    } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
      fprintf(stderr, "attntune %s: unknown option '%s' (usage: attntune %s FILE.json [--db PATH])\n", verb, argv[i],
              verb);
      return 2;
    } else if (*file) {
      fprintf(stderr, "attntune %s: one file only ('%s' and '%s')\n", verb, *file, argv[i]);
      return 2;
    } else {
      *file = argv[i];
    }
  }
  if (!*file) {
    fprintf(stderr, "attntune %s: no file given (usage: attntune %s FILE.json [--db PATH])\n", verb, verb);
    return 2;
  }
  if (db_arg) snprintf(path, plen, "%s", db_arg);
  else if (attn_db_default_path(path, plen) != 0) {
    fprintf(stderr, "attntune %s: database path too long\n", verb);
    return 2;
  }
  return 0;
}

static json_t *str_or_null(const char *s) { return s ? json_string(s) : json_null(); }

/* ---- export */

typedef struct {
  json_t *arr;
  long long *run_ids; /* database run ids in order: the file's run k is run_ids[k - 1] */
  int runs, cap;
  int failed;
} export_ctx;

static int export_device(void *vctx, const attn_db_device *d) {
  export_ctx *c = vctx;
  json_t *o = json_object();
  if (!o || json_array_append_new(c->arr, o) != 0) return c->failed = 1;
  json_object_set_new(o, "name", json_string(d->name));
  json_object_set_new(o, "kind", json_string(d->kind));
  json_object_set_new(o, "arch", str_or_null(d->arch));
  /* the tuner stores the device's description as JSON text: exported as the object it is, so that a reader
   * of the file need not parse a string within it; text that is not an object (older imports) stays a string */
  json_t *info = d->info ? json_loads(d->info, JSON_REJECT_DUPLICATES, NULL) : NULL;
  if (!json_is_object(info)) {
    json_decref(info);
    info = str_or_null(d->info);
  }
  json_object_set_new(o, "info", info);
  return 0;
}

static int export_run(void *vctx, const attn_db_run *r) {
  export_ctx *c = vctx;
  if (c->runs == c->cap) {
    int cap = c->cap ? 2 * c->cap : 32;
    long long *p = realloc(c->run_ids, sizeof *p * (size_t)cap);
    if (!p) return c->failed = 1;
    c->run_ids = p;
    c->cap = cap;
  }
  c->run_ids[c->runs++] = r->id;
  json_t *o = json_object();
  if (!o || json_array_append_new(c->arr, o) != 0) return c->failed = 1;
  json_object_set_new(o, "id", json_integer(c->runs));
  json_object_set_new(o, "device", str_or_null(r->device));
  json_object_set_new(o, "started", str_or_null(r->started));
  json_object_set_new(o, "ended", str_or_null(r->ended));
  json_object_set_new(o, "command", str_or_null(r->command));
  json_object_set_new(o, "status", str_or_null(r->status));
  return 0;
}

static int file_run(const export_ctx *c, long long id) {
  int lo = 0, hi = c->runs - 1; /* run ids come in ascending order */
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (c->run_ids[mid] == id) return mid + 1;
    if (c->run_ids[mid] < id) lo = mid + 1;
    else hi = mid - 1;
  }
  return 0;
}

static int export_meas(void *vctx, const attn_db_meas *m) {
  export_ctx *c = vctx;
  json_t *o = json_object();
  if (!o || json_array_append_new(c->arr, o) != 0) return c->failed = 1;
  int run = m->run_id > 0 ? file_run(c, m->run_id) : 0;
  json_object_set_new(o, "device", json_string(m->device));
  json_object_set_new(o, "spec", json_string(m->spec));
  json_object_set_new(o, "source_hash", str_or_null(m->source_hash));
  json_object_set_new(o, "run", run > 0 ? json_integer(run) : json_null());
  json_object_set_new(o, "n", json_integer(m->n));
  json_object_set_new(o, "n_kv", json_integer(m->n_kv));
  json_object_set_new(o, "d", json_integer(m->d));
  json_object_set_new(o, "d_v", json_integer(m->d_v > 0 ? m->d_v : m->d));
  json_object_set_new(o, "dtype", json_string(attn_dtype_name(m->dtype)));
  json_object_set_new(o, "causal", json_integer(m->causal));
  json_object_set_new(o, "batch", json_integer(m->batch));
  json_object_set_new(o, "heads", json_integer(m->heads));
  json_object_set_new(o, "heads_kv", json_integer(m->heads_kv));
  json_object_set_new(o, "time_ms", json_real(m->time_ms));
  json_object_set_new(o, "gflops", json_real(m->gflops));
  json_object_set_new(o, "reads", m->reads >= 0 ? json_integer(m->reads) : json_null());
  json_object_set_new(o, "writes", m->writes >= 0 ? json_integer(m->writes) : json_null());
  json_object_set_new(o, "error", m->has_error ? json_real(m->error) : json_null());
  json_object_set_new(o, "status", json_string(m->status));
  json_object_set_new(o, "log", json_string(m->log ? m->log : ""));
  json_object_set_new(o, "provenance", json_string(m->provenance));
  json_object_set_new(o, "created", json_string(m->created));
  /* schema 4: how the time was measured; null where not recorded (the database's NULLs) */
  json_object_set_new(o, "threads", json_integer(m->threads));
  json_object_set_new(o, "reps", m->reps > 0 ? json_integer(m->reps) : json_null());
  json_object_set_new(o, "iqr_ms", m->reps > 0 && m->iqr_ms >= 0 ? json_real(m->iqr_ms) : json_null());
  json_object_set_new(o, "load", m->load >= 0 ? json_real(m->load) : json_null());
  json_object_set_new(o, "final", json_integer(m->final));
  json_object_set_new(o, "chosen", json_integer(m->chosen));
  json_object_set_new(o, "is_default", json_integer(m->is_default));
  /* schema 6: what limits a model row's time; null on measured rows */
  json_object_set_new(o, "bound", m->bound ? json_string(m->bound) : json_null());
  /* schema 8: the pass and the variant, part of the key */
  json_object_set_new(o, "pass", json_string(m->pass ? m->pass : "fwd"));
  json_object_set_new(o, "variant", json_string(m->variant ? m->variant : ""));
  return 0;
}

/* A new temporary beside file (same directory, so the rename is atomic), as FILE.tmp-XXXXXXXX: O_CREAT|O_EXCL never
 * opens a name that exists, so a symlink or file planted there is neither followed nor truncated (O_NOFOLLOW says
 * so again), and the random suffix keeps others from guessing the name. The name goes to tmp; returns the
 * descriptor, or -1 with errno. */
static int open_temp(const char *file, char *tmp, size_t len) {
  static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
  for (unsigned attempt = 0; attempt < 64; attempt++) {
    unsigned char rnd[8];
    if (getrandom(rnd, sizeof rnd, GRND_NONBLOCK) != (ssize_t)sizeof rnd) {
      /* no entropy to be had: a guessable name costs at most a retry, O_EXCL still refuses a planted one */
      struct timespec ts = {0};
      if (clock_gettime(CLOCK_REALTIME, &ts) != 0) ts.tv_nsec = 0;
      unsigned long long x = ((unsigned long long)ts.tv_nsec ^ ((unsigned long long)getpid() << 30)) +
                             attempt * 0x9e3779b97f4a7c15ULL;
      memcpy(rnd, &x, sizeof rnd);
    }
    char suffix[sizeof rnd + 1];
    for (size_t i = 0; i < sizeof rnd; i++) suffix[i] = digits[rnd[i] % 36];
    suffix[sizeof rnd] = '\0';
    int w = snprintf(tmp, len, "%s.tmp-%s", file, suffix);
    if (w < 0 || (size_t)w >= len) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1; /* errno: EEXIST */
}

json_t *attn_export_doc(attn_db *db, const char *path, char *err, size_t errlen) {
  json_t *doc = json_object(), *devs = json_array(), *runs = json_array(), *meas = json_array(), *ret = NULL;
  export_ctx c = {0};
  if (!doc || !devs || !runs || !meas) {
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  json_object_set_new(doc, "attntune_export", json_integer(1));
  json_object_set_new(doc, "schema_version", json_integer(attn_db_schema_version()));
  json_object_set(doc, "devices", devs);
  json_object_set(doc, "runs", runs);
  json_object_set(doc, "measurements", meas);
  /* one read of each table; a writer running meanwhile is not blocked (WAL) */
  c.arr = devs;
  int r1 = attn_db_device_foreach(db, export_device, &c);
  c.arr = runs;
  int r2 = r1 ? r1 : attn_db_run_foreach(db, export_run, &c);
  c.arr = meas;
  int r3 = r2 ? r2 : attn_db_meas_foreach(db, export_meas, &c);
  if (r1 || r2 || r3) {
    snprintf(err, errlen, "%s: %s", path, c.failed ? "out of memory" : attn_db_errmsg(db));
    goto out;
  }
  ret = doc;
  doc = NULL;
out:
  json_decref(devs);
  json_decref(runs);
  json_decref(meas);
  json_decref(doc);
  free(c.run_ids);
  return ret;
}

int attn_cmd_export(int argc, char **argv) {
  const char *file;
  char path[4096], err[1024], msg[8192]; /* msg: "PATH: reason", whatever the path's length */
  int rc = parse_args("export", argc, argv, &file, path, sizeof path);
  if (rc) return rc < 0 ? 0 : rc;
  attn_db *db = NULL;
  /* a reader: works on a file it cannot write (read-only then, db.h) */
  if (attn_db_open_ex(path, ATTN_DB_READER, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune export: %s\n", err);
    return 1;
  }
  int status = 1;
  json_t *doc = attn_export_doc(db, path, msg, sizeof msg);
  if (!doc) {
    fprintf(stderr, "attntune export: %s\n", msg);
    goto out;
  }
  size_t flags = JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17);
  if (strcmp(file, "-") == 0) {
    if (json_dumpf(doc, stdout, flags) != 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0) {
      fprintf(stderr, "attntune export: cannot write to standard output\n");
      goto out;
    }
  } else {
    /* write a fresh temporary beside, then rename: a failed export never leaves half a file under the name, and a
     * link planted where the temporary goes is never followed (open_temp) */
    char tmp[4200];
    int fd = open_temp(file, tmp, sizeof tmp);
    if (fd < 0) {
      fprintf(stderr, "attntune export: cannot create a temporary file beside %s: %s\n", file, strerror(errno));
      goto out;
    }
    FILE *f = fdopen(fd, "w");
    int ok = 0;
    if (!f) {
      int e = errno;
      if (close(fd) != 0) fprintf(stderr, "attntune export: closing %s: %s\n", tmp, strerror(errno));
      errno = e;
    } else {
      errno = 0;
      /* fsync before the rename: after a crash the name holds the old file or the whole new one */
      ok = json_dumpf(doc, f, flags) == 0 && fputc('\n', f) != EOF && fflush(f) == 0 && fsync(fd) == 0;
      if (fclose(f) != 0) ok = 0;
    }
    if (!ok || rename(tmp, file) != 0) {
      int e = errno;
      fprintf(stderr, "attntune export: cannot write %s: %s\n", file, e ? strerror(e) : "write failed");
      if (unlink(tmp) != 0) fprintf(stderr, "attntune export: cannot remove %s: %s\n", tmp, strerror(errno));
      goto out;
    }
    fprintf(stderr, "exported %zu devices, %zu runs, %zu measurements from %s to %s\n",
            json_array_size(json_object_get(doc, "devices")), json_array_size(json_object_get(doc, "runs")),
            json_array_size(json_object_get(doc, "measurements")), path, file);
  }
  status = 0;
out:
  json_decref(doc);
  attn_db_close(db);
  return status;
}

/* ---- import: strict reading, every field checked, unknown fields refused */

typedef struct {
  const char *file, *where;
  int index;
  char msg[512];
} import_err;

static int bad(import_err *e, const char *key, const char *what) {
  snprintf(e->msg, sizeof e->msg, "%s: %s[%d]: \"%s\" %s", e->file, e->where, e->index, key, what);
  return -1;
}

static int only_keys(import_err *e, json_t *o, const char *const *keys) {
  const char *k;
  json_t *v;
  json_object_foreach(o, k, v) {
    int known = 0;
    for (int i = 0; keys[i] && !known; i++) known = strcmp(k, keys[i]) == 0;
    if (!known) return bad(e, k, "is not a known field");
  }
  return 0;
}

/* A string (nullable: NULL for a JSON null or a missing key). */
static int get_str(import_err *e, json_t *o, const char *key, int nullable, const char **out) {
  json_t *v = json_object_get(o, key);
  *out = NULL;
  if ((!v || json_is_null(v)) && nullable) return 0;
  if (!json_is_string(v)) return bad(e, key, nullable ? "must be a string or null" : "must be a string");
  *out = json_string_value(v);
  return 0;
}

static int get_ll(import_err *e, json_t *o, const char *key, long long lo, long long hi, int nullable,
                  long long *out) {
  json_t *v = json_object_get(o, key);
  if ((!v || json_is_null(v)) && nullable) {
    *out = -1;
    return 0;
  }
  if (!json_is_integer(v)) return bad(e, key, nullable ? "must be an integer or null" : "must be an integer");
  *out = json_integer_value(v);
  if (*out < lo || *out > hi) return bad(e, key, "is out of range");
  return 0;
}

static int get_int(import_err *e, json_t *o, const char *key, int lo, int hi, int *out) {
  long long v;
  if (get_ll(e, o, key, lo, hi, 0, &v)) return -1;
  *out = (int)v;
  return 0;
}

static int get_num(import_err *e, json_t *o, const char *key, int nullable, int *has, double *out) {
  json_t *v = json_object_get(o, key);
  *has = 0;
  *out = 0;
  if ((!v || json_is_null(v)) && nullable) return 0;
  if (!json_is_number(v)) return bad(e, key, nullable ? "must be a number or null" : "must be a number");
  *out = json_number_value(v);
  *has = 1;
  return 0;
}

/* An optional integer (lo >= 0): missing or null gives dflt, the value of a file written before the field existed. */
static int get_opt_int(import_err *e, json_t *o, const char *key, int lo, int hi, int dflt, int *out) {
  long long v;
  if (get_ll(e, o, key, lo, hi, 1, &v)) return -1;
  *out = v < 0 ? dflt : (int)v; /* get_ll's -1 is "absent" since lo >= 0 */
  return 0;
}

/* An optional number >= 0: missing or null gives -1 (not recorded), as the database reads a NULL. */
static int get_opt_nonneg(import_err *e, json_t *o, const char *key, double *out) {
  int has;
  if (get_num(e, o, key, 1, &has, out)) return -1;
  if (has && !(*out >= 0)) return bad(e, key, "must be a number >= 0 or null");
  if (!has) *out = -1;
  return 0;
}

static int import_meas(import_err *e, json_t *o, const long long *runs, int nruns, attn_db_meas *m) {
  static const char *const keys[] = {"device", "spec", "source_hash", "run", "n", "n_kv", "d", "dtype", "causal",
                                     "batch", "heads", "heads_kv", "time_ms", "gflops", "reads", "writes", "error",
                                     "status", "log", "provenance", "created", "threads", "reps", "iqr_ms", "load",
                                     "final", "chosen", "is_default", "bound", "d_v", "pass", "variant",
                                     NULL};
  memset(m, 0, sizeof *m);
  if (!json_is_object(o)) return bad(e, "", "must be an object");
  if (only_keys(e, o, keys)) return -1;
  const char *dtype;
  long long run;
  int has;
  if (get_str(e, o, "device", 0, &m->device) || get_str(e, o, "spec", 0, &m->spec) ||
      get_str(e, o, "source_hash", 1, &m->source_hash) || get_ll(e, o, "run", 1, nruns, 1, &run) ||
      get_int(e, o, "n", 1, 1 << 30, &m->n) || get_int(e, o, "n_kv", 1, 1 << 30, &m->n_kv) ||
      get_int(e, o, "d", 1, 1 << 20, &m->d) || get_str(e, o, "dtype", 0, &dtype) ||
      get_int(e, o, "causal", 0, 1, &m->causal) || get_int(e, o, "batch", 1, 1 << 30, &m->batch) ||
      get_int(e, o, "heads", 1, 1 << 30, &m->heads) || get_int(e, o, "heads_kv", 1, 1 << 30, &m->heads_kv) ||
      get_num(e, o, "time_ms", 0, &has, &m->time_ms) || get_num(e, o, "gflops", 1, &has, &m->gflops) ||
      get_ll(e, o, "reads", 0, (long long)9e18, 1, &m->reads) ||
      get_ll(e, o, "writes", 0, (long long)9e18, 1, &m->writes) ||
      get_num(e, o, "error", 1, &m->has_error, &m->error) || get_str(e, o, "status", 0, &m->status) ||
      get_str(e, o, "log", 1, &m->log) || get_str(e, o, "provenance", 0, &m->provenance) ||
      get_str(e, o, "created", 1, &m->created) || get_opt_int(e, o, "threads", 0, 1 << 20, 0, &m->threads) ||
      get_opt_int(e, o, "reps", 0, 1 << 30, 0, &m->reps) || get_opt_nonneg(e, o, "iqr_ms", &m->iqr_ms) ||
      get_opt_nonneg(e, o, "load", &m->load) || get_opt_int(e, o, "final", 0, 1, 0, &m->final) ||
      get_opt_int(e, o, "chosen", 0, 1, 0, &m->chosen) || get_opt_int(e, o, "is_default", 0, 1, 0, &m->is_default) ||
      get_str(e, o, "bound", 1, &m->bound) || get_opt_int(e, o, "d_v", 1, 1 << 20, 0, &m->d_v) ||
      get_str(e, o, "pass", 1, &m->pass) || get_str(e, o, "variant", 1, &m->variant))
    return -1;
  /* files from before schema 8 have neither: their rows are the forward's, dense */
  if (m->pass && strcmp(m->pass, "fwd") && strcmp(m->pass, "bwd")) return bad(e, "pass", "must be fwd, bwd or null");
  if (m->variant) {
    size_t i = 0;
    for (; m->variant[i]; i++)
      if (m->variant[i] < 0x20 || m->variant[i] > 0x7e) break;
    if (m->variant[i] || i > ATTN_DB_VARIANT_MAX)
      return bad(e, "variant", "must be printable ASCII of at most 255 bytes, or null");
  }
  /* d_v is the kernel's: a row that says otherwise would be served to problems its kernel does not compute */
  attn_spec ks;
  char kerr[256];
  if (m->d_v > 0 && attn_spec_parse(m->spec, &ks, kerr, sizeof kerr) == ATTN_OK && attn_spec_dv(&ks) != m->d_v) {
    char why[96];
    snprintf(why, sizeof why, "%d contradicts the spec's d_v %d", m->d_v, attn_spec_dv(&ks));
    return bad(e, "d_v", why);
  }
  /* the model's names only, so show prints nothing a file made up */
  if (m->bound && !attn_model_bound_known(m->bound))
    return bad(e, "bound", "must be null or one of tensor_cores, special_functions, fp32_alu, shared_memory, "
                           "dram, l2, occupancy, launch");
  /* checked here, not only by meas_put: a row the rule keeps out is never put, and a bad file must still fail */
  static const char *const statuses[] = {"ok", "wrong", "compile_error", "launch_error", "skipped", "invalid",
                                         "error", NULL};
  int known = 0;
  for (int i = 0; statuses[i] && !known; i++) known = strcmp(m->status, statuses[i]) == 0;
  if (!known) return bad(e, "status", "must be ok, wrong, compile_error, launch_error, skipped, invalid or error");
  int dt = attn_dtype_parse(dtype);
  if (dt < 0) return bad(e, "dtype", "must be f32, f16 or bf16");
  m->dtype = (attn_dtype)dt;
  m->run_id = run > 0 ? runs[run - 1] : 0;
  return 0;
}

/* Now as the database writes times (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')); "" if the clock fails. */
static void now_text(char *buf, size_t len) {
  struct timespec ts;
  struct tm tm;
  buf[0] = '\0';
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0 || !gmtime_r(&ts.tv_sec, &tm)) return;
  size_t k = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
  if (k == 0) buf[0] = '\0';
  else snprintf(buf + k, len - k, ".%03ldZ", ts.tv_nsec / 1000000);
}

int attn_import_check(json_t *doc, const char *file, char *err, size_t errlen) {
  json_t *devs = json_object_get(doc, "devices"), *runs = json_object_get(doc, "runs"),
         *meas = json_object_get(doc, "measurements");
  json_t *tag = json_object_get(doc, "attntune_export");
  if (!json_is_object(doc) || !json_is_integer(tag) || json_integer_value(tag) != 1) {
    snprintf(err, errlen, "%s: not an attntune export (no \"attntune_export\": 1)", file);
    return -1;
  }
  if (!json_is_array(devs) || !json_is_array(meas) || (runs && !json_is_array(runs))) {
    snprintf(err, errlen, "%s: \"devices\" and \"measurements\" (and \"runs\") must be arrays", file);
    return -1;
  }
  return 0;
}

int attn_import_doc(attn_db *db, json_t *doc, const char *file, const char *path, attn_import_counts *counts,
                    char *err, size_t errlen) {
  json_t *devs = json_object_get(doc, "devices"), *runs = json_object_get(doc, "runs"),
         *meas = json_object_get(doc, "measurements");
  import_err e = {.file = file};
  size_t nruns = runs ? json_array_size(runs) : 0;
  long long *run_ids = calloc(nruns + 1, sizeof *run_ids);
  int status = -1, added = 0, replaced = 0, kept = 0;
  attn_db_meas *have = malloc(sizeof *have); /* the stored row of a key (large: its log buffer) */
  if (!run_ids || !have) {
    snprintf(err, errlen, "out of memory");
    goto out;
  }
  if (attn_db_begin(db) != ATTN_OK) {
    snprintf(err, errlen, "%s: %s", path, attn_db_errmsg(db));
    goto out;
  }
  /* one start time for every run of the file that gives none: such runs of one device and command are then one run
   * (attn_db_run_put's rule), now and when this database's export is imported again. With a time per run taken
   * from the clock, two of them fell in one millisecond or not, and two identical runs stored made the export of the
   * database import as one (export -> import -> export not identical). */
  char stamp[40];
  now_text(stamp, sizeof stamp);
  size_t i;
  json_t *o;
  e.where = "devices";
  json_array_foreach(devs, i, o) {
    static const char *const keys[] = {"name", "kind", "arch", "info", NULL};
    attn_db_device d = {0};
    e.index = (int)i;
    if (!json_is_object(o)) {
      bad(&e, "", "must be an object");
      goto fail;
    }
    /* info: the object export writes, or the string older exports wrote (stored as it is) */
    json_t *info = json_object_get(o, "info");
    char *info_text = NULL;
    if (info && !json_is_object(info) && !json_is_string(info) && !json_is_null(info)) {
      bad(&e, "info", "must be an object, a string or null");
      goto fail;
    }
    if (json_is_object(info)) {
      if (!(info_text = json_dumps(info, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17)))) {
        snprintf(e.msg, sizeof e.msg, "out of memory");
        goto fail;
      }
      d.info = info_text;
    }
    if (only_keys(&e, o, keys) || get_str(&e, o, "name", 0, &d.name) || get_str(&e, o, "kind", 1, &d.kind) ||
        get_str(&e, o, "arch", 1, &d.arch) || (!info_text && get_str(&e, o, "info", 1, &d.info))) {
      free(info_text);
      goto fail;
    }
    int put = attn_db_device_put(db, &d, NULL);
    free(info_text);
    if (put != ATTN_OK) goto dbfail;
  }
  e.where = "runs";
  json_array_foreach(runs, i, o) {
    static const char *const keys[] = {"id", "device", "started", "ended", "command", "status", NULL};
    attn_db_run r = {0};
    long long id;
    e.index = (int)i;
    if (!json_is_object(o)) {
      bad(&e, "", "must be an object");
      goto fail;
    }
    if (only_keys(&e, o, keys) || get_ll(&e, o, "id", (long long)i + 1, (long long)i + 1, 0, &id) ||
        get_str(&e, o, "device", 1, &r.device) || get_str(&e, o, "started", 1, &r.started) ||
        get_str(&e, o, "ended", 1, &r.ended) || get_str(&e, o, "command", 1, &r.command) ||
        get_str(&e, o, "status", 1, &r.status))
      goto fail;
    if (!r.started && stamp[0]) r.started = stamp;
    if (attn_db_run_put(db, &r, &run_ids[i]) != ATTN_OK) goto dbfail;
  }
  e.where = "measurements";
  json_array_foreach(meas, i, o) {
    attn_db_meas m;
    e.index = (int)i;
    if (import_meas(&e, o, run_ids, (int)nruns, &m)) goto fail;
    int found = attn_db_meas_exists(db, &m, have);
    if (found < 0) goto dbfail;
    /* a stored row that is as good (a re-import of the same file, an older or slower time) stays */
    if (found && !attn_db_meas_better(&m, have)) {
      kept++;
      continue;
    }
    if (attn_db_meas_put(db, &m) != ATTN_OK) goto dbfail;
    if (found) replaced++;
    else added++;
  }
  if (attn_db_commit(db) != ATTN_OK) goto dbfail;
  *counts = (attn_import_counts){.devices = json_array_size(devs), .runs = nruns,
                                 .measurements = json_array_size(meas), .added = added, .replaced = replaced,
                                 .kept = kept};
  status = 0;
  goto out;
dbfail:
  snprintf(e.msg, sizeof e.msg, "%s: %s[%d]: %s", file, e.where ? e.where : "?", e.index, attn_db_errmsg(db));
fail:
  attn_db_rollback(db);
  snprintf(err, errlen, "%s (nothing imported)", e.msg);
out:
  free(have);
  free(run_ids);
  return status;
}

int attn_cmd_import(int argc, char **argv) {
  const char *file;
  char path[4096], err[1024], msg[8192]; /* msg: a reason naming the file and the database, whatever their length */
  int rc = parse_args("import", argc, argv, &file, path, sizeof path);
  if (rc) return rc < 0 ? 0 : rc;
  json_error_t jerr;
  json_t *doc = strcmp(file, "-") == 0 ? json_loadf(stdin, 0, &jerr) : json_load_file(file, 0, &jerr);
  if (!doc) {
    fprintf(stderr, "attntune import: %s:%d:%d: %s\n", strcmp(file, "-") == 0 ? "<stdin>" : file, jerr.line,
            jerr.column, jerr.text);
    return 1;
  }
  if (attn_import_check(doc, file, msg, sizeof msg) != 0) {
    fprintf(stderr, "attntune import: %s\n", msg);
    json_decref(doc);
    return 1;
  }
  attn_db *db = NULL;
  /* a writer, checked whatever its size: rows merged into a damaged file are not safe */
  if (attn_db_open_ex(path, ATTN_DB_CREATE | ATTN_DB_CHECK, &db, err, sizeof err) != ATTN_OK) {
    fprintf(stderr, "attntune import: %s\n", err);
    json_decref(doc);
    return 1;
  }
  attn_import_counts n;
  int status = 1;
  if (attn_import_doc(db, doc, file, path, &n, msg, sizeof msg) != 0) {
    fprintf(stderr, "attntune import: %s\n", msg);
  } else {
    fprintf(stderr, "imported %zu devices, %zu runs, %zu measurements (%d new, %d replaced, %d kept) from %s into %s\n",
            n.devices, n.runs, n.measurements, n.added, n.replaced, n.kept, file, path);
    status = 0;
  }
  attn_db_close(db);
  json_decref(doc);
  return status;
}
