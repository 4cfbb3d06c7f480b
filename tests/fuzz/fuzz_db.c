/* fuzz_db.c: libFuzzer target for the database loader (cache_db/db.c) on files that are not what they should be. The
 * input is the whole database file: its bytes are written to a temporary file (SQLite reads a path), which is then
 * opened the ways the project opens databases it did not just create, and read as each of those readers reads it:
 *   1. ATTN_DB_READER | ATTN_DB_CHECK: merge's sources (writable here, so a writer's open, checked first);
 *   2. ATTN_DB_READONLY: a file the process cannot write (the runtime's and show's fallback), never checked;
 *   3. the runtime: attn_open (ATTN_DB_READER, not checked: a migration may run on the damaged file) and
 *      attn_plan_choose, the stored row or the default, as attn_plan_create chooses it before compiling;
 *   4. `attntune show` or `show --json` (ATTN_DB_READER), its standard output sent to /dev/null;
 *   5. `attntune merge TARGET FILE`: the file as the source, merged into a small valid target.
 * Every open must succeed or fail with ATTN_EDB / ATTN_EUNSUPPORTED and a reason; every read after a successful open
 * must return a row or an error; an artifact is handed out only with the bytes its recorded SHA-256 names; a row
 * chosen for the runtime is a spec that parses; a merge adds rows or none, and leaves its target a sound database.
 * Each step starts from the input's bytes again, with a fresh mtime, so the open's "checked once per process" memory
 * (same device, inode, size, mtime) never spans two inputs. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cmds.h"
#include "db.h"
#include "internal.h"
#include "json_io.h"
#include "spec.h"

/* The checks report on the stderr of the start: the tests run with -close_fd_mask=3, which silences show's messages
 * on fd 2 (libFuzzer's and the sanitizers' reports go to a copy it keeps). */
static FILE *report;
#define CHECK(c)                                                                 \
  do {                                                                           \
    if (!(c)) {                                                                  \
      fprintf(report ? report : stderr, "fuzz_db: %s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      if (report) fflush(report);                                                \
      abort();                                                                   \
    }                                                                            \
  } while (0)

static char dir[4096], path[4200], target[4200];
static uint8_t *target_bytes; /* the merge target's file, made once (LLVMFuzzerInitialize) */
static size_t target_size;

/* The temporary directory goes when the run ends (libFuzzer exits through exit() unless something crashed). */
static void cleanup(void) {
  static const char *const names[] = {"fuzz.db",   "fuzz.db-wal",   "fuzz.db-shm",   "fuzz.db-journal",
                                      "target.db", "target.db-wal", "target.db-shm", "target.db-journal"};
  char p[4300];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(p, sizeof p, "%s/%s", dir, names[i]);
    unlink(p);
  }
  snprintf(p, sizeof p, "%s/so", dir);
  rmdir(p);
  rmdir(dir);
}
static long long stamp = 1000000000; /* mtime seconds of the next file: never one seen before in this process */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  /* tmpfs when there is one: a file per step */
  const char *base = getenv("TMPDIR");
  if (!base || !*base) base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(dir, sizeof dir, "%s/attn-fuzz-db-XXXXXX", base);
  if (!mkdtemp(dir)) {
    fprintf(stderr, "fuzz_db: cannot make a directory under %s: %s\n", base, strerror(errno));
    exit(1);
  }
  atexit(cleanup);
  int fd = dup(2);
  report = fd >= 0 ? fdopen(fd, "w") : NULL;
  snprintf(path, sizeof path, "%s/fuzz.db", dir);
  char cache[4200];
  snprintf(cache, sizeof cache, "%s/so", dir);
  mkdir(cache, 0700);
  setenv("ATTN_CACHE_DIR", cache, 1);  /* the runtime's open looks at its cache directory: not the user's */
  setenv("ATTN_DB_TIMEOUT_MS", "50", 1); /* nothing else holds the file: never wait for a lock long */
  setenv("ATTN_THREADS", "2", 1);       /* the runtime's thread count is part of its lookup: one value everywhere */
  if (!freopen("/dev/null", "w", stdout)) exit(1); /* show's tables; libFuzzer and the sanitizers write to stderr */
  /* merge's target: a device, a run and a row of its own, so that merge compares the source's with them */
  snprintf(target, sizeof target, "%s/target.db", dir);
  attn_db *db = NULL;
  char err[1024];
  long long dev = 0, run = 0;
  attn_db_meas m = {.device = "A100", .n = 256, .n_kv = 256, .d = 64, .batch = 1, .heads = 16, .heads_kv = 16,
                    .dtype = ATTN_F16, .time_ms = 0.01, .reads = -1, .writes = -1, .status = "ok",
                    .provenance = "model", .iqr_ms = -1, .load = -1,
                    .spec = "flash cuda f16 d=64 br=64 bc=64 causal=0 unroll=0 warps=4 stages=3 arch=sm_80 tile=0 "
                            "feature=taylor degree=0 rank=0 seed=0"};
  if (attn_db_open_ex(target, ATTN_DB_CREATE, &db, err, sizeof err) != ATTN_OK ||
      attn_db_device_id(db, "A100", NULL, &dev) != ATTN_OK || attn_db_run_begin(db, dev, "fuzz", &run) != ATTN_OK ||
      attn_db_meas_put(db, &m) != ATTN_OK) {
    fprintf(stderr, "fuzz_db: cannot make the merge target %s: %s\n", target, db ? attn_db_errmsg(db) : err);
    exit(1);
  }
  attn_db_close(db); /* the last connection folds the -wal into the file */
  FILE *f = fopen(target, "rb");
  struct stat sb;
  if (!f || fstat(fileno(f), &sb) != 0 || !(target_bytes = malloc((size_t)sb.st_size + 1)) ||
      fread(target_bytes, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
    fprintf(stderr, "fuzz_db: cannot read %s back\n", target);
    exit(1);
  }
  target_size = (size_t)sb.st_size;
  fclose(f);
  return 0;
}

/* data as the database file at file, alone (no -wal, -shm or -journal left from the step before). */
static void write_db(const char *file, const uint8_t *data, size_t size) {
  static const char *const side[] = {"", "-wal", "-shm", "-journal"};
  char p[4300];
  for (size_t i = 0; i < sizeof side / sizeof side[0]; i++) {
    snprintf(p, sizeof p, "%s%s", file, side[i]);
    if (unlink(p) != 0 && errno != ENOENT) abort();
  }
  int fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  CHECK(fd >= 0);
  for (size_t off = 0; off < size;) {
    ssize_t w = write(fd, data + off, size - off);
    CHECK(w > 0);
    off += (size_t)w;
  }
  struct timespec t[2] = {{stamp, 0}, {stamp, 0}};
  stamp++;
  CHECK(futimens(fd, t) == 0);
  CHECK(close(fd) == 0);
}

static void put_file(const uint8_t *data, size_t size) { write_db(path, data, size); }

static void touch(const char *s) {
  if (s) CHECK(strlen(s) < (1u << 30));
}

/* What the readers read: collected first, since a foreach callback must not call back into the handle. */
#define MAXQ 3 /* lookups per open: the lookup is the costliest statement to prepare and run */
typedef struct {
  attn_db_query q[MAXQ];
  char device[MAXQ][256];
  int nq, rows;
} seen;

static int on_device(void *ctx, const attn_db_device *d) {
  seen *s = ctx;
  CHECK(d->name != NULL); /* refused by db.c: callers compare names (merge crashed on a NULL one) */
  touch(d->name);
  touch(d->kind);
  touch(d->arch);
  touch(d->info);
  s->rows++;
  return 0;
}

static int on_run(void *ctx, const attn_db_run *r) {
  touch(r->device);
  touch(r->started);
  touch(r->ended);
  touch(r->command);
  touch(r->status);
  ((seen *)ctx)->rows++;
  return 0;
}

static int on_best(void *ctx, const attn_db_meas *m) {
  touch(m->device);
  touch(m->spec);
  touch(m->source_hash);
  touch(m->status);
  touch(m->log);
  touch(m->provenance);
  touch(m->created);
  ((seen *)ctx)->rows++;
  return 0;
}

static int on_meas(void *ctx, const attn_db_meas *m) {
  seen *s = ctx;
  on_best(ctx, m);
  if (s->nq < MAXQ && m->device) {
    attn_db_query *q = &s->q[s->nq];
    snprintf(s->device[s->nq], sizeof s->device[0], "%s", m->device);
    *q = (attn_db_query){.device = s->device[s->nq], .d = m->d, .causal = m->causal, .n = m->n, .dtype = m->dtype,
                         .tolerance = s->nq & 1 ? 0.5 : 0, .n_kv = m->n_kv, .batch = m->batch, .heads = m->heads,
                         .heads_kv = m->heads_kv, .threads = m->threads};
    s->nq++;
  }
  return 0;
}

static void lookup(attn_db *db, const attn_db_query *q) {
  attn_db_best b;
  int rc = attn_db_lookup(db, q, &b);
  CHECK(rc == ATTN_OK || rc == ATTN_EUNSUPPORTED || rc == ATTN_EDB || rc == ATTN_EINVAL);
  if (rc != ATTN_OK) {
    CHECK(attn_db_errmsg(db)[0] != '\0');
    return;
  }
  CHECK(memchr(b.spec, '\0', sizeof b.spec) && memchr(b.provenance, '\0', sizeof b.provenance));
  attn_spec s;
  char err[256];
  (void)attn_spec_parse(b.spec, &s, err, sizeof err); /* the runtime's next step: any text, an answer */
}

/* Every reader's reads on an open handle; nothing here may crash, whatever the file holds. */
static void read_all(attn_db *db) {
  (void)attn_db_readonly(db);
  touch(attn_db_filename(db));
  seen s = {0};
  if (attn_db_device_foreach(db, on_device, &s) != 0) CHECK(attn_db_errmsg(db)[0]);
  if (attn_db_run_foreach(db, on_run, &s) != 0) CHECK(attn_db_errmsg(db)[0]);
  if (attn_db_best_foreach(db, on_best, &s) != 0) CHECK(attn_db_errmsg(db)[0]);
  if (attn_db_meas_foreach(db, on_meas, &s) != 0) CHECK(attn_db_errmsg(db)[0]);
  (void)attn_db_meas_count(db);
  for (int i = 0; i < s.nq; i++) lookup(db, &s.q[i]);
  attn_db_query fixed = {.device = "A100", .d = 64, .n = 256, .dtype = ATTN_F16};
  lookup(db, &fixed);
  /* the seed databases hold one artifact under this key (tests/fuzz/make_seeds.sh) */
  void *blob = NULL;
  size_t len = 0;
  char want[65], have[65];
  int got = attn_db_artifact_get(db, "fuzz", "cc", "", "", &blob, &len);
  CHECK(got == ATTN_OK || got == ATTN_EUNSUPPORTED || got == ATTN_EDB);
  if (got == ATTN_OK) {
    /* handed out: its bytes are the ones whose hash is recorded */
    CHECK(attn_db_artifact_digest(db, "fuzz", "cc", "", "", want) == ATTN_OK);
    CHECK(attn_sha256_hex(blob, len, have) == 0 && strcmp(have, want) == 0);
  } else {
    CHECK(blob == NULL && len == 0);
  }
  free(blob);
  char err[1024];
  json_t *doc = attn_export_doc(db, path, err, sizeof err); /* `attntune export`'s reads */
  if (!doc) CHECK(err[0]);
  json_decref(doc);
}

static void open_and_read(const uint8_t *data, size_t size, int flags) {
  put_file(data, size);
  attn_db *db = NULL;
  char err[2048];
  int rc = attn_db_open_ex(path, flags, &db, err, sizeof err);
  if (rc != ATTN_OK) {
    CHECK(rc == ATTN_EDB || rc == ATTN_EUNSUPPORTED);
    CHECK(db == NULL && err[0] != '\0');
    return;
  }
  CHECK(db != NULL);
  read_all(db);
  attn_db_close(db);
}

/* The runtime: attn_open, then the configuration attn_plan_create would compile for a few problems. */
static void runtime(const uint8_t *data, size_t size) {
  put_file(data, size);
  attn_runtime *rt = NULL;
  if (attn_open(path, ATTN_TARGET_CPU, &rt) != ATTN_OK) {
    CHECK(rt == NULL && attn_last_error(NULL)[0]);
    return;
  }
  static const attn_problem probs[] = {
      {.batch = 1, .heads = 2, .n = 64, .d = 64, .dtype = ATTN_F32},
      {.batch = 1, .heads = 1, .n = 1, .n_kv = 4096, .d = 64, .dtype = ATTN_F32, .causal = 1},
      {.batch = 2, .heads = 8, .n = 1024, .d = 128, .dtype = ATTN_F32, .tolerance = 0.1, .algo = ATTN_ALGO_AUTO},
  };
  for (size_t i = 0; i < sizeof probs / sizeof probs[0]; i++) {
    attn_problem p;
    attn_spec s;
    char origin[128], err[256];
    CHECK(attn_problem_normalize(rt, &probs[i], &p) == ATTN_OK);
    if (attn_plan_choose(rt, &p, &s, origin, sizeof origin) != ATTN_OK) continue;
    /* what the plan would compile: a valid spec for this problem, stored or default */
    CHECK(attn_spec_check(&s, err, sizeof err) == ATTN_OK);
    CHECK(s.target == ATTN_TARGET_CPU && s.d == p.d && s.causal == p.causal && s.dtype == p.dtype);
  }
  attn_close(rt);
}

static void show(const uint8_t *data, size_t size, int json) {
  put_file(data, size);
  char *argv[] = {"show", "--db", path, json ? "--json" : NULL, NULL};
  int rc = attn_cmd_show(json ? 4 : 3, argv);
  CHECK(rc == 0 || rc == 1);
}

/* merge: all of the source or nothing, and the target stays a database that passes the check */
static void merge(const uint8_t *data, size_t size) {
  put_file(data, size);
  write_db(target, target_bytes, target_size);
  char *argv[] = {"merge", target, path, NULL};
  int rc = attn_cmd_merge(3, argv);
  CHECK(rc == 0 || rc == 1);
  attn_db *db = NULL;
  char err[2048];
  int orc = attn_db_open_ex(target, ATTN_DB_READER | ATTN_DB_CHECK, &db, err, sizeof err);
  if (orc != ATTN_OK) fprintf(report ? report : stderr, "fuzz_db: the target after the merge: %s\n", err);
  CHECK(orc == ATTN_OK);
  long long n = attn_db_meas_count(db);
  CHECK(rc == 0 ? n >= 1 : n == 1);
  attn_db_close(db);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  open_and_read(data, size, ATTN_DB_READER | ATTN_DB_CHECK);
  open_and_read(data, size, ATTN_DB_READONLY);
  runtime(data, size);
  show(data, size, (int)(size & 1));
  merge(data, size);
  return 0;
}
