/* model_ptx: the performance model's per-key-block instruction counts (tuner/kcount.c, derived from the template's
 * loop structure) against the PTX NVRTC generates for the same configuration. In the PTX the key loop is the
 * smallest loop around every mma.sync; within it, loops nested inside (S = Q K^T's k-steps when Q is read from
 * shared memory) count their body times their trip count, and where the body branches (masked and unmasked copies of
 * the softmax) every path from the loop's head to its back edge must give the same count.
 *   model_ptx                      a handful of f16/bf16 flash configurations on sm_80 and sm_90
 *   model_ptx "SPEC" [dump]        one configuration (canonical text); dump prints the key loop's blocks
 * Exit 77 (CTest: skipped) without NVRTC. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "kcount.h"
#include "spec.h"

enum { C_MMA, C_EX2, C_LDSM, C_N };
static const char *const cnames[C_N] = {"mma.sync", "ex2", "ldmatrix"};

typedef struct {
  int first, last;          /* line indices of the block's instructions */
  char label[64];           /* "" when the block starts without one */
  char target[64];          /* branch target, "" when none */
  int cond, ends;           /* conditional branch; ends in an unconditional branch, ret or exit */
  long cnt[C_N];
} block;

static int failures;

static const char *skip_ws(const char *s) {
  while (*s == ' ' || *s == '\t') s++;
  return s;
}

/* Splits the first entry's body into basic blocks. Returns the number of blocks (*out malloc'd). */
static int blocks_of(char **lines, int nl, block **out) {
  block *b = calloc((size_t)nl + 1, sizeof *b);
  int n = 0, open = 0;
  for (int i = 0; i < nl; i++) {
    const char *s = skip_ws(lines[i]);
    size_t len = strlen(s);
    if (s[0] == '$' && len > 1 && s[len - 1] == ':') { /* a label starts a block */
      if (open) n++;
      memset(&b[n], 0, sizeof b[n]);
      snprintf(b[n].label, sizeof b[n].label, "%.*s", (int)(len - 1), s);
      b[n].first = b[n].last = i;
      open = 1;
      continue;
    }
    if (!len || s[0] == '.' || s[0] == '/' || s[0] == '{' || s[0] == '}' || s[0] == ')' || s[0] == '(') continue;
    if (!strchr(s, ';')) continue;
    if (!open) {
      memset(&b[n], 0, sizeof b[n]);
      b[n].first = i;
      open = 1;
    }
    b[n].last = i;
    if (strstr(s, "mma.sync")) b[n].cnt[C_MMA]++;
    if (strstr(s, "ex2.approx")) b[n].cnt[C_EX2]++;
    if (strstr(s, "ldmatrix")) b[n].cnt[C_LDSM]++;
    const char *br = strstr(s, "bra");
    int is_bra = br && (br == s || br[-1] == ' ' || br[-1] == '\t') && (br[3] == '.' || br[3] == ' ' || br[3] == '\t');
    if (is_bra || strncmp(s, "ret", 3) == 0 || strncmp(s, "exit", 4) == 0) {
      if (is_bra) {
        const char *t = strchr(br, '$');
        if (t) snprintf(b[n].target, sizeof b[n].target, "%.*s", (int)strcspn(t, ";"), t);
      }
      b[n].cond = s[0] == '@';
      b[n].ends = !b[n].cond;
      n++;
      open = 0;
    }
  }
  if (open) n++;
  *out = b;
  return n;
}

static int find_label(const block *b, int n, const char *label) {
  for (int i = 0; i < n; i++)
    if (b[i].label[0] && strcmp(b[i].label, label) == 0) return i;
  return -1;
}

/* Checks one configuration: 0 when the PTX matches the analytic counts. */
static int check(const attn_spec *s, int dump) {
  char label[400], err[512];
  attn_spec_format(s, label, sizeof label);
  attn_kb_thread k;
  if (attn_kb_thread_counts(s, &k) != 0 || s->dtype == ATTN_F32) {
    printf("FAIL %s: not a tensor-core flash configuration\n", label);
    return -1;
  }
  char *src = attn_spec_source(s, 0, err, sizeof err);
  if (!src) {
    printf("FAIL %s: %s\n", label, err);
    return -1;
  }
  char *ptx = NULL, *log = NULL;
  int rc = attn_nvrtc_ptx(src, "attn.cu", s->arch, &ptx, &log);
  free(src);
  if (rc != ATTN_OK) {
    printf("FAIL %s: %s\n%s\n", label, attn_strerror(rc), log ? log : "");
    free(log);
    return -1;
  }
  free(log);
  /* lines of the PTX */
  int cap = 1024, nl = 0;
  char **lines = malloc((size_t)cap * sizeof *lines);
  for (char *p = ptx, *save = NULL, *l = strtok_r(p, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    if (nl == cap) lines = realloc(lines, (size_t)(cap *= 2) * sizeof *lines);
    lines[nl++] = l;
  }
  block *b = NULL;
  int nb = blocks_of(lines, nl, &b), bad = 0;
  /* back edges: block j branches to block t <= j */
  int key_head = -1, key_latch = -1, first_mma = -1, last_mma = -1;
  for (int i = 0; i < nb; i++)
    if (b[i].cnt[C_MMA]) {
      if (first_mma < 0) first_mma = i;
      last_mma = i;
    }
  for (int j = 0; j < nb; j++) {
    int t = b[j].target[0] ? find_label(b, nb, b[j].target) : -1;
    if (t < 0 || t > j || first_mma < t || last_mma > j) continue;
    if (key_head < 0 || j - t < key_latch - key_head) key_head = t, key_latch = j;
  }
  if (first_mma < 0 || key_head < 0) {
    printf("FAIL %s: no loop around the mma.sync instructions in the PTX\n", label);
    bad = 1;
    goto out;
  }
  {
    /* collapse loops nested in the key loop into their first block: blocks [i, last[i]] */
    int nested = 0;
    int *node = malloc((size_t)nb * sizeof *node), *last = malloc((size_t)nb * sizeof *last);
    long (*w)[C_N] = calloc((size_t)nb, sizeof *w);
    for (int i = 0; i < nb; i++) node[i] = last[i] = i;
    for (int j = key_head; j < key_latch; j++) {
      int t = b[j].target[0] ? find_label(b, nb, b[j].target) : -1;
      if (t < key_head || t > j) continue;
      const int h = node[t];
      for (int i = h; i <= j; i++) node[i] = h;
      if (j > last[h]) last[h] = j;
    }
    /* Q from shared memory: S = Q K^T's d/16 k-steps run (d/16)/unroll times around a body of `unroll` steps; the
     * other nested loops copy partial key blocks (cp.async only) */
    const int trips = k.q_in_regs ? 1 : (s->d / 16 + k.qk_unroll - 1) / k.qk_unroll;
    for (int i = key_head; i <= key_latch; i++)
      for (int c = 0; c < C_N; c++) w[node[i]][c] += b[i].cnt[c];
    for (int i = key_head; i <= key_latch; i++)
      if (node[i] == i && (last[i] > i || (b[i].target[0] && find_label(b, nb, b[i].target) == i)))
        if (w[i][C_MMA] || w[i][C_EX2] || w[i][C_LDSM]) {
          nested++;
          for (int c = 0; c < C_N; c++) w[i][c] *= trips;
        }
    if (nested != (k.q_in_regs ? 0 : 1)) {
      printf("FAIL %s: %d loops with counted instructions nested in the key loop, the template has %d\n", label,
             nested, k.q_in_regs ? 0 : 1);
      bad = 1;
    }
    /* min and max over the paths head -> latch, in block order (the collapsed body is a DAG) */
    long lo[C_N], hi[C_N];
    long (*mn)[C_N] = malloc((size_t)nb * sizeof *mn), (*mx)[C_N] = malloc((size_t)nb * sizeof *mx);
    char *reach = calloc((size_t)nb, 1);
    reach[key_head] = 1;
    for (int c = 0; c < C_N; c++) mn[key_head][c] = mx[key_head][c] = w[key_head][c];
    for (int i = key_head; i <= key_latch; i++) {
      if (!reach[i] || node[i] != i) continue;
      for (int x = i; x <= last[i]; x++) { /* edges leaving the collapsed node */
        int succ[2], ns = 0;
        int t = b[x].target[0] ? find_label(b, nb, b[x].target) : -1;
        if (t >= 0 && x != key_latch) succ[ns++] = t;
        if (!b[x].ends && x + 1 <= key_latch) succ[ns++] = x + 1;
        for (int q = 0; q < ns; q++) {
          int v = succ[q];
          if (v < key_head || v > key_latch || (v >= i && v <= last[i])) continue; /* leaves the loop, or inside */
          v = node[v];
          if (v <= i) {
            printf("FAIL %s: a backward branch inside the key loop that is not a nested loop\n", label);
            bad = 1;
            continue;
          }
          for (int c = 0; c < C_N; c++) {
            long lo1 = mn[i][c] + w[v][c], hi1 = mx[i][c] + w[v][c];
            if (!reach[v] || lo1 < mn[v][c]) mn[v][c] = lo1;
            if (!reach[v] || hi1 > mx[v][c]) mx[v][c] = hi1;
          }
          reach[v] = 1;
        }
      }
    }
    const int latch = node[key_latch];
    for (int c = 0; c < C_N; c++) lo[c] = reach[latch] ? mn[latch][c] : -1, hi[c] = reach[latch] ? mx[latch][c] : -1;
    const long want[C_N] = {k.mma, k.ex2, k.ldmatrix};
    for (int c = 0; c < C_N; c++)
      if (lo[c] != want[c] || hi[c] != want[c]) bad = 1;
    printf("%s %s: per thread and key block (PTX paths min..max, model)", bad ? "FAIL" : "ok", label);
    for (int c = 0; c < C_N; c++) printf("%s %s %ld..%ld (%ld)", c ? "," : "", cnames[c], lo[c], hi[c], want[c]);
    printf("%s\n", k.q_in_regs ? "" : "; Q from shared memory");
    if (dump)
      for (int i = key_head; i <= key_latch; i++)
        printf("  block %d %-14s lines %d..%d -> %-14s node %d: mma %ld ex2 %ld ldmatrix %ld\n", i, b[i].label,
               b[i].first, b[i].last, b[i].target, node[i], b[i].cnt[C_MMA], b[i].cnt[C_EX2], b[i].cnt[C_LDSM]);
    free(node);
    free(last);
    free(w);
    free(mn);
    free(mx);
    free(reach);
  }
out:
  free(b);
  free(lines);
  free(ptx);
  return bad ? -1 : 0;
}

int main(int argc, char **argv) {
  int maj = 0, min = 0;
  char why[512];
  if (attn_nvrtc_version(&maj, &min, why, sizeof why) != ATTN_OK) {
    printf("SKIP: %s\n", why);
    return 77;
  }
  if (argc > 1) {
    attn_spec s;
    if (attn_spec_parse(argv[1], &s, why, sizeof why) != ATTN_OK) {
      fprintf(stderr, "model_ptx: %s\n", why);
      return 2;
    }
    return check(&s, argc > 2 && strcmp(argv[2], "dump") == 0) ? 1 : 0;
  }
  /* FlashAttention-2's own tiles (d=64 128x128, d=128 128x64, 4 warps), Q in registers and from shared memory,
   * causal (masked and unmasked copies of the softmax), 8 warps, one and three stages */
  static const struct { attn_dtype t; int d, br, bc, warps, stages, causal; const char *arch; } cfg[] = {
      {ATTN_BF16, 64, 128, 128, 4, 2, 0, "sm_80"}, {ATTN_BF16, 128, 128, 64, 4, 2, 0, "sm_90"},
      {ATTN_F16, 128, 64, 64, 4, 1, 1, "sm_80"},   {ATTN_F16, 64, 64, 32, 4, 3, 0, "sm_90"},
      {ATTN_BF16, 256, 128, 64, 8, 2, 1, "sm_90"},
  };
  for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; i++) {
    attn_spec s = attn_spec_default(ATTN_ALGO_FLASH, ATTN_TARGET_CUDA, cfg[i].t, cfg[i].d, cfg[i].causal);
    s.br = cfg[i].br, s.bc = cfg[i].bc, s.warps = cfg[i].warps, s.stages = cfg[i].stages;
    snprintf(s.arch, sizeof s.arch, "%s", cfg[i].arch);
    if (check(&s, 0)) failures++;
  }
  if (failures) {
    printf("model_ptx: %d configurations differ from the model's counts\n", failures);
    return 1;
  }
  printf("model_ptx: all configurations match\n");
  return 0;
}
