/* io_sweep: `attntune io --sweep` end to end. Every (algorithm, M) whose tiles fit M must be a point; each point's
 * tiles must be the ones attn_io_choose gives, its counted reads and writes the closed form of io_theory.c; and the
 * SVG must plot exactly those numbers: one dot per point carrying its total, drawn where the figure's own decade
 * lines put that (M, total), joined by its algorithm's line. The checker is also shown a figure with one dot moved
 * and one with a number changed, and must reject both. The text form writes the same figure and says so.
 *   io_sweep ATTNTUNE WORKDIR */
#include "check.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "io_theory.h"

#define N 128
#define D 32
#define M1 256
#define M2 16384
#define MAXP 64

typedef struct {
  char algo[16];
  double M;
  unsigned long long total;
} point;

static point pts[MAXP];
static int npts;

/* Runs cmd; its stdout into *out (malloc'd, NUL-terminated); returns its exit status, -1 if it did not exit. */
static int run(const char *cmd, char **out) {
  *out = NULL;
  FILE *p = popen(cmd, "r");
  if (!p) return -1;
  size_t cap = 1 << 16, len = 0, got;
  char *buf = malloc(cap);
  while (buf && (got = fread(buf + len, 1, cap - len - 1, p)) > 0) {
    len += got;
    if (len + 1 == cap) {
      char *nb = realloc(buf, cap *= 2);
      if (!nb) {
        free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
    }
  }
  int st = pclose(p);
  if (!buf) return -1;
  buf[len] = '\0';
  *out = buf;
  return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long len = -1;
  if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
      (buf = malloc((size_t)len + 1)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
    buf[len] = '\0';
  } else {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  return buf;
}

/* The JSON lines against attn_io_choose and attn_io_formula; fills pts. */
static void check_json(char *out) {
  static const attn_algo algos[3] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE, ATTN_ALGO_LOWRANK};
  int seen[3][MAXP] = {{0}}, expected = 0;
  for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
    json_error_t jerr;
    json_t *o = json_loads(line, 0, &jerr);
    CHECK(o && json_is_object(o), "not a JSON object: %s (%s)", line, jerr.text);
    if (!o) continue;
    const char *algo = json_string_value(json_object_get(o, "algo"));
    const double M = json_number_value(json_object_get(o, "M"));
    int a = -1;
    for (int i = 0; i < 3 && algo; i++)
      if (!strcmp(algo, attn_algo_name(algos[i]))) a = i;
    const int mi = M >= M1 && M <= M2 ? (int)lround(log2(M / M1)) : -1;
    CHECK(a >= 0 && mi >= 0 && M == ldexp(M1, mi), "unexpected point %s", line);
    if (a < 0 || mi < 0 || mi >= MAXP || npts == MAXP) {
      json_decref(o);
      continue;
    }
    CHECK(!seen[a][mi]++, "%s at M=%.0f printed twice", algo, M);
    CHECK(json_integer_value(json_object_get(o, "n")) == N && json_integer_value(json_object_get(o, "d")) == D &&
          json_integer_value(json_object_get(o, "causal")) == 0, "n, d or causal wrong: %s", line);
    /* the tiles this M gives, chosen here */
    attn_spec s = attn_spec_default(algos[a], ATTN_TARGET_CPU, ATTN_F32, D, 0);
    char err[512];
    int rc = attn_io_choose(&s, N, M, err, sizeof err);
    CHECK(rc == ATTN_OK, "%s at M=%.0f is printed but its tiles do not fit: %s", algo, M, err);
    CHECK(json_integer_value(json_object_get(o, "br")) == s.br && json_integer_value(json_object_get(o, "bc")) == s.bc,
          "%s at M=%.0f: tiles %lld x %lld, attn_io_choose gives %d x %d", algo, M,
          json_integer_value(json_object_get(o, "br")), json_integer_value(json_object_get(o, "bc")), s.br, s.bc);
    if (algos[a] == ATTN_ALGO_LOWRANK)
      CHECK(json_integer_value(json_object_get(o, "rank")) == attn_io_rank(&s), "lowrank rank %lld, expected %ld",
            json_integer_value(json_object_get(o, "rank")), attn_io_rank(&s));
    unsigned long long fr = 0, fw = 0;
    rc = attn_io_formula(&s, 1, N, N, &fr, &fw);
    CHECK(rc == ATTN_OK, "no closed form for %s", algo);
    const unsigned long long reads = (unsigned long long)json_integer_value(json_object_get(o, "reads")),
                             writes = (unsigned long long)json_integer_value(json_object_get(o, "writes")),
                             total = (unsigned long long)json_integer_value(json_object_get(o, "total"));
    CHECK(reads == fr && writes == fw, "%s at M=%.0f: counted %llu/%llu, the closed form says %llu/%llu", algo, M,
          reads, writes, fr, fw);
    CHECK(total == reads + writes &&
          (unsigned long long)json_integer_value(json_object_get(o, "formula")) == fr + fw,
          "%s at M=%.0f: total %llu, formula %lld for %llu + %llu", algo, M, total,
          json_integer_value(json_object_get(o, "formula")), reads, writes);
    snprintf(pts[npts].algo, sizeof pts[npts].algo, "%s", algo);
    pts[npts].M = M;
    pts[npts++].total = total;
    json_decref(o);
  }
  /* every point whose tiles fit is there */
  for (int a = 0; a < 3; a++)
    for (int mi = 0; ldexp(M1, mi) <= M2; mi++) {
      attn_spec s = attn_spec_default(algos[a], ATTN_TARGET_CPU, ATTN_F32, D, 0);
      char err[512];
      if (attn_io_choose(&s, N, ldexp(M1, mi), err, sizeof err) != ATTN_OK) continue;
      expected++;
      CHECK(seen[a][mi], "%s at M=%d is missing", attn_algo_name(algos[a]), M1 << mi);
    }
  CHECK(npts == expected && npts > 0, "%d points, expected %d", npts, expected);
}

/* The value of attribute name in the element starting at el (up to its '>'), or NULL. */
static const char *attr(const char *el, const char *name, char *buf, size_t len) {
  const char *end = strchr(el, '>');
  char key[64];
  snprintf(key, sizeof key, " %s=\"", name);
  const char *p = strstr(el, key);
  if (!p || (end && p > end)) return NULL;
  p += strlen(key);
  const char *q = strchr(p, '"');
  if (!q || (size_t)(q - p) >= len) return NULL;
  memcpy(buf, p, (size_t)(q - p));
  buf[q - p] = '\0';
  return buf;
}

static double num(const char *el, const char *name) {
  char buf[64];
  return attr(el, name, buf, sizeof buf) ? strtod(buf, NULL) : NAN;
}

/* Pixel = a + b log10(v) from the figure's decade lines of one axis (class xtick or ytick, coordinate x1 or y1). */
static int axis(const char *svg, const char *cls, const char *coord, double *a, double *b, int quiet) {
  char key[64];
  snprintf(key, sizeof key, "class=\"%s\"", cls);
  double e0 = NAN, p0 = NAN, e1 = NAN, p1 = NAN;
  int n = 0;
  for (const char *p = strstr(svg, key); p; p = strstr(p + 1, key)) {
    const char *el = p;
    while (el > svg && *el != '<') el--;
    double e = num(el, "data-decade"), px = num(el, coord);
    if (n++ == 0) e0 = e, p0 = px;
    e1 = e, p1 = px;
  }
  if (n < 2 || !(e1 > e0) || isnan(p0) || isnan(p1)) {
    if (!quiet) fprintf(stderr, "%s: %d decade lines, need two\n", cls, n);
    return -1;
  }
  *b = (p1 - p0) / (e1 - e0);
  *a = p0 - *b * e0;
  return 0;
}

/* Problems in the figure against pts: each dot's numbers, its place, its line. 0 when it plots what was counted. */
static int svg_problems(const char *svg, int quiet) {
  int bad = 0, dots = 0, used[MAXP] = {0};
  double ax, bx, ay, by;
  if (axis(svg, "xtick", "x1", &ax, &bx, quiet) || axis(svg, "ytick", "y1", &ay, &by, quiet)) return 1;
  /* the printed coordinates have one decimal: half a tenth of a pixel each, a little more through the fit */
  const double tol = 0.15;
  for (const char *p = strstr(svg, "<circle class=\"point\""); p; p = strstr(p + 1, "<circle class=\"point\"")) {
    char algo[32];
    dots++;
    const double m = num(p, "data-m"), e = num(p, "data-entries"), cx = num(p, "cx"), cy = num(p, "cy");
    int k = -1;
    for (int i = 0; i < npts && attr(p, "data-algo", algo, sizeof algo); i++)
      if (!strcmp(pts[i].algo, algo) && pts[i].M == m) k = i;
    if (k < 0 || used[k]++) {
      if (!quiet) fprintf(stderr, "a dot for no point, or a second one: %.60s\n", p);
      bad++;
      continue;
    }
    if (e != (double)pts[k].total) {
      if (!quiet) fprintf(stderr, "%s M=%.0f: the dot says %.0f entries, counted %llu\n", algo, m, e, pts[k].total);
      bad++;
    }
    const double wx = ax + bx * log10(m), wy = ay + by * log10((double)pts[k].total);
    if (fabs(cx - wx) > tol || fabs(cy - wy) > tol) {
      if (!quiet)
        fprintf(stderr, "%s M=%.0f: the dot is at (%.1f, %.1f), %llu entries belong at (%.2f, %.2f)\n", algo, m, cx,
                cy, pts[k].total, wx, wy);
      bad++;
    }
    /* the algorithm's line passes through the dot */
    char key[64], pointsbuf[4096], at[32];
    snprintf(key, sizeof key, "class=\"measured\" data-algo=\"%s\"", algo);
    const char *line = strstr(svg, key);
    snprintf(at, sizeof at, "%.1f,%.1f ", cx, cy);
    if (!line || !attr(line, "points", pointsbuf, sizeof pointsbuf) || !strstr(pointsbuf, at)) {
      if (!quiet) fprintf(stderr, "%s M=%.0f: the %s line does not pass through its dot\n", algo, m, algo);
      bad++;
    }
  }
  if (dots != npts) {
    if (!quiet) fprintf(stderr, "%d dots for %d points\n", dots, npts);
    bad++;
  }
  return bad;
}

/* A copy of svg with the number after the first occurrence of key (within the first dot) changed by delta. */
static char *tamper(const char *svg, const char *key, double delta) {
  const char *dot = strstr(svg, "<circle class=\"point\"");
  const char *p = dot ? strstr(dot, key) : NULL;
  if (!p) return NULL;
  p += strlen(key);
  char *end;
  double v = strtod(p, &end);
  size_t len = strlen(svg);
  char *out = malloc(len + 64);
  if (!out) return NULL;
  int head = (int)(p - svg);
  snprintf(out, len + 64, "%.*s%.1f%s", head, svg, v + delta, end);
  return out;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: io_sweep ATTNTUNE WORKDIR\n");
    return 2;
  }
  char cmd[8192], json_svg[4096], text_svg[4096], *out = NULL;
  snprintf(json_svg, sizeof json_svg, "%s/io-sweep.svg", argv[2]);
  snprintf(text_svg, sizeof text_svg, "%s/io-sweep-text.svg", argv[2]);
  remove(json_svg);
  remove(text_svg);
  snprintf(cmd, sizeof cmd, "'%s' io --n %d --d %d --sweep %d..%d --json --plot '%s'", argv[1], N, D, M1, M2, json_svg);
  int st = run(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  if (out) check_json(out);
  free(out);
  char *svg = slurp(json_svg);
  CHECK(svg != NULL, "no figure at %s", json_svg);
  if (svg) {
    int bad = svg_problems(svg, 0);
    CHECK(bad == 0, "the figure does not plot the counted numbers (%d problems)", bad);
    /* the checker itself: a dot moved by a pixel, or carrying another number, must not pass */
    char *moved = tamper(svg, "cy=\"", 1.0), *renumbered = tamper(svg, "data-entries=\"", 1.0);
    CHECK(moved && svg_problems(moved, 1) > 0, "a figure with a dot moved by one pixel passed the check");
    CHECK(renumbered && svg_problems(renumbered, 1) > 0, "a figure whose dot says another number passed the check");
    free(moved);
    free(renumbered);
  }
  /* the text form: its lines, "wrote", and the same figure */
  snprintf(cmd, sizeof cmd, "'%s' io --n %d --d %d --sweep %d..%d --plot '%s'", argv[1], N, D, M1, M2, text_svg);
  st = run(cmd, &out);
  CHECK(st == 0, "%s exited %d", cmd, st);
  char wrote[4200];
  snprintf(wrote, sizeof wrote, "wrote %s\n", text_svg);
  CHECK(out && strstr(out, wrote), "the text form did not say '%s'", wrote);
  free(out);
  char *svg2 = slurp(text_svg);
  CHECK(svg && svg2 && !strcmp(svg, svg2), "the text form wrote another figure than the JSON form");
  free(svg);
  free(svg2);
  printf("io_sweep: %d points, %d checks, %d failures\n", npts, checks, failures);
  return failures ? 1 : 0;
}
