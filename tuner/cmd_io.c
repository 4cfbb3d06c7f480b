/* cmd_io.c: `attntune io`: runs the counting build of a real kernel with tiles chosen for a fast memory of M
 * entries, and sets the counted transfers beside the kernel's closed form and the theory's lower bound.
 * `--sweep M1..M2 --plot out.svg` does it for the three algorithms over M (doubling) and draws the regimes; each
 * measured point in the SVG carries its numbers (data-algo, data-m, data-entries) and each decade line its exponent
 * (data-decade), so that tests/io_sweep.c can check the figure against the counts. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmds.h"
#include "io_theory.h"
#include "range.h"
#include "spec_bwd.h"
#include "space.h"

static const char io_usage[] =
    "usage: attntune io --algo flash|smallcache|lowrank --n N --d D [--dv DV] --M M [--br B --bc B] [--tile T]\n"
    "                   [--causal] [--window W] [--feature taylor|random] [--degree G] [--rank R] [--seed S] [--n-kv N]\n"
    "                   [--json]\n"
    "       attntune io --n N --d D [--dv DV] --sweep M1..M2 [--plot out.svg] [--json]\n"
    "       attntune io --pass bwd --n N --d D [--dv DV] [--causal] [--n-kv N] (--M M [--br B --bc B] |\n"
    "                   --sweep M1..M2 [--plot out.svg]) [--json]\n"
    "  M: fast-memory size in entries; tiles not given are chosen to minimise transfers within M\n"
    "  --pass bwd: flash's backward (templates/flash_bwd.c) instead of the forward; its sweep draws the forward\n"
    "              flash beside it\n"
    "  D, DV: head dimensions of Q, K and of V, O, each in 1..576 (DV default: D)\n"
    "  --window W: a sliding window (attn.h; 0: none) for flash and smallcache: only the keys it reaches are read\n";

static int usage(const char *fmt, const char *arg) {
  fprintf(stderr, "attntune io: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  return 2;
}

static int parse_m(const char *s, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 1) || v > 1e15 || v != floor(v)) return -1;
  *out = v;
  return 0;
}

typedef struct {
  attn_spec s;
  int bwd; /* the backward pass */
  double M;
  long n, n_kv;
  long window; /* the problem's sliding window, 0: none */
  attn_io io;
  unsigned long long f_reads, f_writes;
  double rel_error;
} io_point;

/* Chooses the missing tiles, runs the counting build and fills the closed form. 2: usage error, 1: failure. */
static int io_run_point_bwd(attn_runtime *rt, io_point *pt, int given_tiles, char *err, size_t errlen) {
  if (!given_tiles) {
    if (attn_io_choose_bwd(&pt->s, pt->n, pt->M, err, errlen) != ATTN_OK) return 2;
  } else if (attn_io_fast_need_bwd(&pt->s) > pt->M) {
    snprintf(err, errlen, "M=%.0f is too small: the flash backward with these tiles needs at least %.0f", pt->M,
             attn_io_fast_need_bwd(&pt->s));
    return 2;
  }
  if (attn_spec_check_backward(&pt->s, err, errlen) != ATTN_OK) return 2;
  if (attn_io_measure_bwd(rt, &pt->s, pt->n, pt->n_kv, &pt->io, &pt->rel_error) != ATTN_OK) {
    snprintf(err, errlen, "%s", attn_last_error(rt));
    return 1;
  }
  attn_io_formula_bwd(&pt->s, 1, 1, 1, pt->n, pt->n_kv, &pt->f_reads, &pt->f_writes);
  return 0;
}

static int io_run_point(attn_runtime *rt, io_point *pt, int given_tiles, char *err, size_t errlen) {
  if (pt->bwd) return io_run_point_bwd(rt, pt, given_tiles, err, errlen);
  if (!given_tiles) {
    if (attn_io_choose(&pt->s, pt->n, pt->M, err, errlen) != ATTN_OK) return 2;
  } else if (attn_io_fast_need(&pt->s) > pt->M) {
    snprintf(err, errlen, "M=%.0f is too small: %s with these tiles needs at least %.0f", pt->M,
             attn_algo_name(pt->s.algo), attn_io_fast_need(&pt->s));
    return 2;
  }
  int rc = attn_spec_check(&pt->s, err, errlen);
  if (rc != ATTN_OK) return 2;
  rc = attn_io_measure_window(rt, &pt->s, pt->n, pt->n_kv, pt->window, &pt->io, &pt->rel_error);
  if (rc != ATTN_OK) {
    snprintf(err, errlen, "%s", attn_last_error(rt));
    return 1;
  }
  attn_io_formula_window(&pt->s, 1, pt->n, pt->n_kv, pt->window, &pt->f_reads, &pt->f_writes);
  return 0;
}

static void print_point(const io_point *pt, int json) {
  const double d = pt->s.d, dv = attn_spec_dv(&pt->s), n = (double)pt->n;
  const unsigned long long total = pt->io.reads + pt->io.writes, ftotal = pt->f_reads + pt->f_writes;
  const double lb = attn_io_lower_bound(n, d, dv, pt->M), fl = attn_io_floor(n, d, dv);
  const int t = pt->s.algo == ATTN_ALGO_SMALLCACHE ? (pt->s.tile > 0 ? pt->s.tile : pt->s.br) : 0;
  const double need = pt->bwd ? attn_io_fast_need_bwd(&pt->s) : attn_io_fast_need(&pt->s);
  if (json) {
    /* d_v after the fields of before, so that their order stays what it was */
    printf("{\"algo\": \"%s\", \"n\": %ld, \"d\": %d, \"M\": %.0f, \"br\": %d, \"bc\": %d, \"reads\": %llu, "
           "\"writes\": %llu, \"formula\": %llu, \"lower_bound\": %.0f, \"tile\": %d, \"total\": %llu, "
           "\"ratio\": %.4f, \"bound_theory\": %.0f, \"floor\": %.0f, \"fast_need\": %.0f, \"causal\": %d, "
           "\"rel_error\": %.3e, \"d_v\": %d",
           attn_algo_name(pt->s.algo), pt->n, pt->s.d, pt->M, pt->s.br, pt->s.bc, pt->io.reads, pt->io.writes,
           ftotal, lb, t, total, (double)total / lb, attn_io_bound_theory(n, d, dv, pt->M), fl,
           need, pt->s.causal, pt->rel_error, attn_spec_dv(&pt->s));
    if (pt->bwd) printf(", \"pass\": \"bwd\", \"n_kv\": %ld", pt->n_kv);
    if (pt->window > 0) printf(", \"window\": %ld, \"n_kv\": %ld", pt->window, pt->n_kv);
    if (pt->s.algo == ATTN_ALGO_LOWRANK)
      printf(", \"feature\": \"%s\", \"rank\": %ld", pt->s.feature == ATTN_FEAT_TAYLOR ? "taylor" : "random",
             attn_io_rank(&pt->s));
    printf("}\n");
    return;
  }
  char dvs[24] = "";
  if (dv != d) snprintf(dvs, sizeof dvs, " d_v=%d", attn_spec_dv(&pt->s));
  printf("%s%s n=%ld d=%d%s M=%.0f: br=%d bc=%d", attn_algo_name(pt->s.algo), pt->bwd ? " backward" : "", pt->n,
         pt->s.d, dvs, pt->M, pt->s.br, pt->s.bc);
  if (t) printf(" tile=%d", t);
  if (pt->window > 0) printf(" window=%ld n_kv=%ld", pt->window, pt->n_kv);
  if (pt->s.algo == ATTN_ALGO_LOWRANK) printf(" %s r=%ld", pt->s.feature == ATTN_FEAT_TAYLOR ? "taylor" : "random",
                                              attn_io_rank(&pt->s));
  printf(" (fast memory used %.0f of %.0f)\n", need, pt->M);
  printf("  counted:     reads %llu  writes %llu  total %llu\n", pt->io.reads, pt->io.writes, total);
  printf("  formula:     reads %llu  writes %llu  total %llu  (%s)\n", pt->f_reads, pt->f_writes, ftotal,
         ftotal == total && pt->f_reads == pt->io.reads ? "equal" : "MISMATCH");
  if (pt->window > 0)
    printf("  lower bound: none here (the theory's is dense attention's; a window reads only the keys it reaches)\n");
  else if (dv == d)
    printf("  lower bound: %.0f = max(min(n^2 d^2/M, n^2 d/sqrt(M)) = %.0f, 4 n d = %.0f); counted / bound = %.2f\n",
           lb, attn_io_bound_theory(n, d, dv, pt->M), fl, (double)total / lb);
  else
    printf("  lower bound: %.0f = max(min(n^2 m^2/M, n^2 m/sqrt(M)) = %.0f with m = min(d, d_v), 2 n (d + d_v) = "
           "%.0f); counted / bound = %.2f\n",
           lb, attn_io_bound_theory(n, d, dv, pt->M), fl, (double)total / lb);
  printf("  %s rel error vs fp64: %.3e\n", pt->bwd ? "gradients' (worst of dq, dk, dv)" : "output", pt->rel_error);
}

/* --- the regimes figure: a direct SVG writer with log-log axes --- */
#define SV_W 860.0
#define SV_H 560.0
#define SV_L 90.0
#define SV_R 200.0
#define SV_T 40.0
#define SV_B 60.0

/* The legend's text is as wide as its longest label: the canvas widens to hold it. Characters are counted as
 * SV_CHAR_W pixels, more than a 13 px sans-serif's widest common glyphs take, so no renderer clips a label. */
#define SV_CHAR_W 8.0

typedef struct {
  double x0, x1, y0, y1; /* log10 ranges */
} sv_axes;

/* Characters a label shows: an entity (&#178;, &amp;) is one. */
static int sv_chars(const char *s) {
  int c = 0;
  for (; *s; s++, c++)
    if (*s == '&') {
      const char *semi = strchr(s, ';');
      if (semi) s = semi;
    }
  return c;
}

static double sv_x(const sv_axes *a, double v) { return SV_L + (log10(v) - a->x0) / (a->x1 - a->x0) * (SV_W - SV_L - SV_R); }
static double sv_y(const sv_axes *a, double v) {
  return SV_H - SV_B - (log10(v) - a->y0) / (a->y1 - a->y0) * (SV_H - SV_T - SV_B);
}

/* algo NULL: a theory curve; otherwise measured points, each a dot that carries the numbers it plots. */
static void sv_curve(FILE *f, const sv_axes *a, const double *xs, const double *ys, int cnt, const char *color,
                     const char *dash, const char *algo) {
  fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s%s%s", color,
          dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
  if (algo) fprintf(f, " class=\"measured\" data-algo=\"%s\"", algo);
  fprintf(f, " points=\"");
  for (int i = 0; i < cnt; i++)
    if (ys[i] > 0) fprintf(f, "%.1f,%.1f ", sv_x(a, xs[i]), sv_y(a, ys[i]));
  fprintf(f, "\"/>\n");
  if (algo)
    for (int i = 0; i < cnt; i++)
      if (ys[i] > 0)
        fprintf(f, "<circle class=\"point\" data-algo=\"%s\" data-m=\"%.0f\" data-entries=\"%.0f\" cx=\"%.1f\" "
                   "cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", algo, xs[i], ys[i], sv_x(a, xs[i]), sv_y(a, ys[i]), color);
}

/* ncurve measured curves (at most 3): names[] their legend labels, algos[] their data-algo. */
static int write_svg(const char *path, long n, int d, int dv, const double *ms, int nm, double meas[3][64],
                     int ncurve, const char *const names[3], const char *const algos[3]) {
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  double th1[64], th2[64], fl[64];
  double ylo = 1e300, yhi = 0;
  const double m = dv < d ? dv : d; /* the theory's dimension (io_theory.h) */
  for (int i = 0; i < nm; i++) {
    th1[i] = (double)n * n * m * m / ms[i];
    th2[i] = (double)n * n * m / sqrt(ms[i]);
    fl[i] = attn_io_floor((double)n, d, dv);
    for (int a = 0; a < ncurve; a++)
      if (meas[a][i] > 0) {
        if (meas[a][i] < ylo) ylo = meas[a][i];
        if (meas[a][i] > yhi) yhi = meas[a][i];
      }
  }
  if (fl[0] < ylo) ylo = fl[0];
  sv_axes ax = {floor(log10(ms[0])), ceil(log10(ms[nm - 1])), floor(log10(ylo)), ceil(log10(yhi))};
  if (ax.y1 <= ax.y0) ax.y1 = ax.y0 + 1;
  if (ax.x1 <= ax.x0) ax.x1 = ax.x0 + 1;
  /* theory curves only where they fall inside the plot */
  for (int i = 0; i < nm; i++) {
    if (log10(th1[i]) > ax.y1 || log10(th1[i]) < ax.y0) th1[i] = -1;
    if (log10(th2[i]) > ax.y1 || log10(th2[i]) < ax.y0) th2[i] = -1;
  }
  /* legend: a 28 px line, then the label 34 px from the line's start */
  const char *lab[6];
  for (int i = 0; i < ncurve; i++) lab[i] = names[i];
  lab[ncurve] = "n&#178;d&#178;/M";
  lab[ncurve + 1] = "n&#178;d/&#8730;M";
  lab[ncurve + 2] = dv == d ? "4nd (read Q,K,V, write O)" : "2n(d+d_v) (read Q,K,V, write O)";
  int longest = 0;
  for (int i = 0; i < ncurve + 3; i++)
    if (sv_chars(lab[i]) > longest) longest = sv_chars(lab[i]);
  const double legend_x = SV_W - SV_R + 14, width = fmax(SV_W, legend_x + 34 + SV_CHAR_W * longest + 10);
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\" "
             "font-size=\"13\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n", width, SV_H);
  char dvs[24] = "";
  if (dv != d) snprintf(dvs, sizeof dvs, ", d_v=%d", dv);
  fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"15\">Counted transfers vs fast memory M (entries), n=%ld, d=%d%s"
             " (attntune io --sweep)</text>\n", SV_L, n, d, dvs);
  /* grid and decade labels */
  for (double e = ax.x0; e <= ax.x1 + 1e-9; e++) {
    double x = sv_x(&ax, pow(10, e));
    fprintf(f, "<line class=\"xtick\" data-decade=\"%.0f\" x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" "
               "stroke=\"#ddd\"/>\n", e, x, SV_T, x, SV_H - SV_B);
    fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\">1e%.0f</text>\n", x, SV_H - SV_B + 18, e);
  }
  for (double e = ax.y0; e <= ax.y1 + 1e-9; e++) {
    double y = sv_y(&ax, pow(10, e));
    fprintf(f, "<line class=\"ytick\" data-decade=\"%.0f\" x1=\"%.0f\" y1=\"%.1f\" x2=\"%.0f\" y2=\"%.1f\" "
               "stroke=\"#ddd\"/>\n", e, SV_L, y, SV_W - SV_R, y);
    fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">1e%.0f</text>\n", SV_L - 6, y + 4, e);
  }
  fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"black\"/>\n", SV_L,
          SV_T, SV_W - SV_L - SV_R, SV_H - SV_T - SV_B);
  fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">M (entries of fast memory)</text>\n",
          (SV_L + SV_W - SV_R) / 2, SV_H - 18);
  fprintf(f, "<text x=\"20\" y=\"%.0f\" transform=\"rotate(-90 20 %.0f)\" text-anchor=\"middle\">entries read + "
             "written</text>\n", (SV_T + SV_H - SV_B) / 2, (SV_T + SV_H - SV_B) / 2);
  /* M = d^2: the boundary between the regimes */
  double md = m * m;
  if (log10(md) >= ax.x0 && log10(md) <= ax.x1) {
    double x = sv_x(&ax, md);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"black\" stroke-dasharray=\"2,4\"/>\n"
               "<text x=\"%.1f\" y=\"%.0f\">M = d&#178;</text>\n", x, SV_T, x, SV_H - SV_B, x + 4, SV_T + 14);
  }
  static const char *const colors[3] = {"#1f77b4", "#d62728", "#2ca02c"};
  sv_curve(f, &ax, ms, th1, nm, "#888", "8,4", NULL);
  sv_curve(f, &ax, ms, th2, nm, "#888", "2,3", NULL);
  sv_curve(f, &ax, ms, fl, nm, "#bbb", "1,2", NULL);
  for (int a = 0; a < ncurve; a++) sv_curve(f, &ax, ms, meas[a], nm, colors[a], NULL, algos[a]);
  const char *col[6], *dsh[6];
  for (int i = 0; i < ncurve; i++) col[i] = colors[i], dsh[i] = NULL;
  col[ncurve] = col[ncurve + 1] = "#888", col[ncurve + 2] = "#bbb";
  dsh[ncurve] = "8,4", dsh[ncurve + 1] = "2,3", dsh[ncurve + 2] = "1,2";
  for (int i = 0; i < ncurve + 3; i++) {
    double y = SV_T + 20 + 22 * i, x = legend_x;
    fprintf(f, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"%s%s%s/>\n", x,
            y, x + 28, y, col[i], dsh[i] ? " stroke-dasharray=\"" : "", dsh[i] ? dsh[i] : "", dsh[i] ? "\"" : "");
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n", x + 34, y + 4, lab[i]);
  }
  fprintf(f, "</svg>\n");
  return fclose(f) == 0 ? 0 : -1;
}

static int run_sweep(attn_runtime *rt, const io_point *proto, double m1, double m2, const char *plot, int json) {
  double ms[64];
  int nm = 0;
  for (double m = m1; m <= m2 * (1 + 1e-12) && nm < 64; m *= 2) ms[nm++] = floor(m);
  static const attn_algo algos[3] = {ATTN_ALGO_FLASH, ATTN_ALGO_SMALLCACHE, ATTN_ALGO_LOWRANK};
  static const char *const names[3] = {"flash (FA2 order)", "smallcache (Saha &amp; Ye)", "lowrank (random r=256)"};
  static const char *const attrs[3] = {"flash", "smallcache", "lowrank"};
  /* the backward's sweep: the forward flash, then its backward */
  static const char *const bnames[2] = {"flash forward", "flash backward (FA2)"};
  static const char *const battrs[2] = {"flash", "flash-bwd"};
  const int ncurve = proto->bwd ? 2 : 3;
  double meas[3][64];
  int mismatches = 0;
  for (int a = 0; a < ncurve; a++)
    for (int i = 0; i < nm; i++) {
      meas[a][i] = -1;
      io_point pt = *proto;
      pt.bwd = proto->bwd && a == 1;
      pt.s = attn_spec_default(proto->bwd ? ATTN_ALGO_FLASH : algos[a], ATTN_TARGET_CPU, ATTN_F32, proto->s.d,
                               proto->s.causal);
      pt.s.dv = proto->s.dv;
      if (algos[a] == ATTN_ALGO_LOWRANK && proto->s.algo == ATTN_ALGO_LOWRANK) pt.s = proto->s; /* its feature map */
      pt.M = ms[i];
      char err[1024] = "";
      int rc = io_run_point(rt, &pt, 0, err, sizeof err);
      if (rc == 2) continue; /* M too small for this algorithm: no point */
      const char *what = proto->bwd ? battrs[a] : attrs[a];
      if (rc != 0) {
        fprintf(stderr, "attntune io: %s at M=%.0f: %s\n", what, ms[i], err);
        return 1;
      }
      meas[a][i] = (double)(pt.io.reads + pt.io.writes);
      if (pt.io.reads != pt.f_reads || pt.io.writes != pt.f_writes) {
        fprintf(stderr, "attntune io: %s at M=%.0f: counted %llu/%llu but the closed form says %llu/%llu\n",
                what, ms[i], pt.io.reads, pt.io.writes, pt.f_reads, pt.f_writes);
        mismatches++;
      }
      if (json) {
        print_point(&pt, 1);
      } else {
        printf("%-10s M=%-9.0f br=%-5d bc=%-4d tile=%-4d counted=%-12.0f formula=%-12llu bound=%.0f\n",
               what, ms[i], pt.s.br, pt.s.bc, pt.s.tile, meas[a][i], pt.f_reads + pt.f_writes,
               attn_io_lower_bound((double)pt.n, pt.s.d, attn_spec_dv(&pt.s), ms[i]));
      }
      fflush(stdout);
    }
  if (plot && write_svg(plot, proto->n, proto->s.d, attn_spec_dv(&proto->s), ms, nm, meas, ncurve,
                        proto->bwd ? bnames : names, proto->bwd ? battrs : attrs) != 0) {
    fprintf(stderr, "attntune io: cannot write %s\n", plot);
    return 1;
  }
  if (plot && !json) printf("wrote %s\n", plot);
  return mismatches ? 1 : 0;
}

int attn_cmd_io(int argc, char **argv) {
  const char *algo_s = NULL, *feature_s = NULL, *sweep = NULL, *plot = NULL, *pass_s = NULL;
  long n = -1, d = -1, dv = 0, br = 0, bc = 0, tile = 0, degree = -1, rank = -1, seed = -1, n_kv = 0, window = 0;
  double M = -1;
  int json = 0, causal = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(io_usage, stdout);
      return 0;
    }
    if (!strcmp(a, "--json")) { json = 1; continue; }
    if (!strcmp(a, "--causal")) { causal = 1; continue; }
    if (i + 1 >= argc) return usage("%s needs a value", a);
    const char *v = argv[++i];
    int bad = 0;
    if (!strcmp(a, "--algo")) algo_s = v;
    else if (!strcmp(a, "--n")) bad = attn_parse_long(v, 1, 1L << 20, &n);
    else if (!strcmp(a, "--n-kv")) bad = attn_parse_long(v, 1, 1L << 20, &n_kv);
    else if (!strcmp(a, "--d")) bad = attn_parse_long(v, 1, 4096, &d);
    else if (!strcmp(a, "--dv")) bad = attn_parse_long(v, 1, 4096, &dv);
    else if (!strcmp(a, "--M")) bad = parse_m(v, &M);
    else if (!strcmp(a, "--br")) bad = attn_parse_long(v, 1, 1024, &br);
    else if (!strcmp(a, "--bc")) bad = attn_parse_long(v, 1, 1024, &bc);
    else if (!strcmp(a, "--tile")) bad = attn_parse_long(v, 1, 1024, &tile);
    else if (!strcmp(a, "--degree")) bad = attn_parse_long(v, 0, 64, &degree);
    else if (!strcmp(a, "--rank")) bad = attn_parse_long(v, 1, 1L << 20, &rank);
    else if (!strcmp(a, "--seed")) bad = attn_parse_long(v, 0, 0xffffffffL, &seed);
    else if (!strcmp(a, "--window")) {
      if (attn_parse_long(v, 0, 1L << 20, &window))
        return usage("bad value for --window '%s': an integer in 0..1048576 (0: none)", v);
    } else if (!strcmp(a, "--feature")) feature_s = v;
    else if (!strcmp(a, "--sweep")) sweep = v;
    else if (!strcmp(a, "--plot")) plot = v;
    else if (!strcmp(a, "--pass")) pass_s = v;
    else return usage("unknown option %s (attntune io --help)", a);
    if (bad) return usage("bad value for %s", a);
  }
  const int bwd = pass_s && !strcmp(pass_s, "bwd");
  if (pass_s && !bwd && strcmp(pass_s, "fwd")) return usage("--pass %s: expected fwd or bwd", pass_s);
  if (bwd && algo_s && strcmp(algo_s, "flash"))
    return usage("--pass bwd: the backward is flash's (FlashAttention-2's recomputation), not %s", algo_s);
  if (bwd && (tile > 0 || feature_s || degree >= 0 || rank > 0 || seed >= 0))
    return usage("%s", "--pass bwd takes no --tile, --feature, --degree, --rank or --seed (flash's backward)");
  if (bwd && !algo_s) algo_s = "flash";
  if (window > 0 && bwd) return usage("%s", "--window: the backward has no window yet (the forward has)");
  if (window > 0 && sweep) return usage("%s", "--window takes one --M, not --sweep");
  if (window > 0 && algo_s && !strcmp(algo_s, "lowrank"))
    return usage("%s", "--window: lowrank's running sums cover every key (flash or smallcache)");
  if (n < 0) return usage("%s", "--n N is required");
  if (d < 0) return usage("%s", "--d D is required");
  if (!sweep && M < 0) return usage("%s", "--M M (fast-memory entries) is required");
  if (plot && !sweep) return usage("%s", "--plot needs --sweep M1..M2");
  int algo = algo_s ? attn_algo_parse(algo_s) : (sweep ? ATTN_ALGO_FLASH : -1);
  if (!algo_s && !sweep) return usage("%s", "--algo flash|smallcache|lowrank is required");
  if (algo < 0 || algo == ATTN_ALGO_AUTO)
    return usage("unknown algorithm '%s': algo must be flash, smallcache or lowrank", algo_s);
  {
    char why[160];
    if (attn_space_dims_ok(ATTN_TARGET_CPU, (int)d, (int)dv, why, sizeof why) != 0) return usage("%s", why);
  }

  io_point pt;
  memset(&pt, 0, sizeof pt);
  pt.s = attn_spec_default((attn_algo)algo, ATTN_TARGET_CPU, ATTN_F32, (int)d, causal);
  pt.s.dv = dv > 0 && dv != d ? (int)dv : 0;
  pt.n = n;
  pt.n_kv = n_kv > 0 ? n_kv : n;
  pt.window = window;
  pt.M = M;
  pt.bwd = bwd;
  if (bwd) pt.s.br = pt.s.bc = 64; /* a backward spec: given tiles replace these */
  if (feature_s) {
    if (!strcmp(feature_s, "taylor")) pt.s.feature = ATTN_FEAT_TAYLOR;
    else if (!strcmp(feature_s, "random")) pt.s.feature = ATTN_FEAT_RANDOM;
    else return usage("unknown feature map '%s': taylor or random", feature_s);
  }
  if (degree >= 0) pt.s.degree = (int)degree;
  if (rank > 0) pt.s.rank = (int)rank;
  if (seed >= 0) pt.s.seed = (unsigned)seed;
  if (pt.s.algo == ATTN_ALGO_LOWRANK && attn_io_rank(&pt.s) < 1)
    return usage("%s", "Taylor features of this degree for this d have rank C(d+g,g) > 65536: use random features");
  int given = br > 0 || bc > 0 || tile > 0;
  if (given) {
    if (br > 0) pt.s.br = (int)br;
    if (bc > 0) pt.s.bc = (int)bc;
    if (tile > 0) pt.s.tile = (int)tile;
    if (pt.s.algo == ATTN_ALGO_SMALLCACHE && tile == 0 && br > 0) pt.s.tile = (int)br;
  }

  double m1 = 0, m2 = 0;
  if (sweep) {
    const char *dots = strstr(sweep, "..");
    char lo[64];
    if (!dots || (size_t)(dots - sweep) >= sizeof lo) return usage("bad --sweep '%s': M1..M2", sweep);
    memcpy(lo, sweep, (size_t)(dots - sweep));
    lo[dots - sweep] = 0;
    if (parse_m(lo, &m1) || parse_m(dots + 2, &m2) || m2 < m1) return usage("bad --sweep '%s': M1..M2", sweep);
  }

  attn_runtime *rt = NULL;
  int rc = attn_open(NULL, ATTN_TARGET_CPU, &rt);
  if (rc != ATTN_OK) {
    fprintf(stderr, "attntune io: %s\n", attn_last_error(NULL));
    return 1;
  }
  int ret;
  if (sweep) {
    ret = run_sweep(rt, &pt, m1, m2, plot, json);
  } else {
    char err[1024] = "";
    ret = io_run_point(rt, &pt, given, err, sizeof err);
    if (ret) {
      fprintf(stderr, "attntune io: %s\n", err);
    } else {
      print_point(&pt, json);
      if (pt.io.reads != pt.f_reads || pt.io.writes != pt.f_writes) ret = 1; /* the count disagrees with theory */
    }
  }
  attn_close(rt);
  return ret;
}
