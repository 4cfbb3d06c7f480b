/* gpus.c: the GPU spec table, parsed with Jansson from the JSON embedded at build time (tuner/gpus.json). */
#include "gpus.h"
#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern const char attn_gpus_json[];

#define MAX_GPUS 64
#define MAX_ALIASES 8

static attn_gpu table[MAX_GPUS];
static char aliases[MAX_GPUS][MAX_ALIASES][48];
static int table_count;
static char table_err[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void copy(char *dst, size_t len, const char *src) { snprintf(dst, len, "%s", src ? src : ""); }

static void load_table(void) {
  json_error_t je;
  json_t *root = json_loads(attn_gpus_json, 0, &je);
  json_t *arr = root ? json_object_get(root, "gpus") : NULL;
  if (!json_is_array(arr)) {
    snprintf(table_err, sizeof table_err, "GPU table: %s", root ? "no \"gpus\" array" : je.text);
    json_decref(root);
    return;
  }
  size_t i;
  json_t *g;
  json_array_foreach(arr, i, g) {
    if (table_count >= MAX_GPUS) break;
    attn_gpu *t = &table[table_count];
    const char *name = NULL, *full = NULL, *arch = NULL;
    json_t *al = NULL;
    if (json_unpack_ex(g, &je, 0, "{s:s, s?s, s:s, s:i, s:F, s:F, s:i, s:F, s:F, s:F, s:F, s:F, s?o}", "name",
                       &name, "full_name", &full, "arch", &arch, "sms", &t->sms, "smem_per_sm_kb",
                       &t->smem_per_sm_kb, "smem_per_block_kb", &t->smem_per_block_kb, "regs_per_sm",
                       &t->regs_per_sm, "l2_mb", &t->l2_mb, "bandwidth_tbs", &t->bandwidth_tbs, "fp16_tflops",
                       &t->fp16_tflops, "bf16_tflops", &t->bf16_tflops, "fp32_tflops", &t->fp32_tflops, "aliases",
                       &al) != 0) {
      snprintf(table_err, sizeof table_err, "GPU table entry %zu: %s", i, je.text);
      table_count = 0;
      break;
    }
    /* the per-clock figures are optional: derived from the peaks where an entry lacks them */
    t->clock_mhz = t->mma_flops_clk_sm = t->fp32_flops_clk_sm = t->sfu_clk_sm = t->smem_bytes_clk_sm = 0;
    t->max_threads_sm = 0;
    if (json_unpack_ex(g, &je, 0, "{s?F, s?F, s?F, s?F, s?F, s?i}", "clock_mhz", &t->clock_mhz, "mma_flops_clk_sm",
                       &t->mma_flops_clk_sm, "fp32_flops_clk_sm", &t->fp32_flops_clk_sm, "sfu_clk_sm",
                       &t->sfu_clk_sm, "smem_bytes_clk_sm", &t->smem_bytes_clk_sm, "max_threads_sm",
                       &t->max_threads_sm) != 0) {
      snprintf(table_err, sizeof table_err, "GPU table entry %zu: %s", i, je.text);
      table_count = 0;
      break;
    }
    if (t->clock_mhz <= 0) t->clock_mhz = 1400;
    const double per_clk = t->sms * t->clock_mhz * 1e6;
    if (t->mma_flops_clk_sm <= 0) t->mma_flops_clk_sm = t->fp16_tflops * 1e12 / per_clk;
    if (t->fp32_flops_clk_sm <= 0) t->fp32_flops_clk_sm = t->fp32_tflops * 1e12 / per_clk;
    if (t->sfu_clk_sm <= 0) t->sfu_clk_sm = 16;
    if (t->smem_bytes_clk_sm <= 0) t->smem_bytes_clk_sm = 128;
    if (t->max_threads_sm <= 0) t->max_threads_sm = 2048;
    copy(t->name, sizeof t->name, name);
    copy(t->full_name, sizeof t->full_name, full ? full : name);
    copy(t->arch, sizeof t->arch, arch);
    size_t j;
    json_t *a;
    if (json_is_array(al)) json_array_foreach(al, j, a) {
        if (j < MAX_ALIASES && json_is_string(a)) copy(aliases[table_count][j], 48, json_string_value(a));
      }
    table_count++;
  }
  json_decref(root);
}

const attn_gpu *attn_gpus(int *count, char *err, size_t errlen) {
  pthread_once(&table_once, load_table);
  if (count) *count = table_count;
  if (!table_count) {
    if (err && errlen) snprintf(err, errlen, "%s", table_err[0] ? table_err : "GPU table is empty");
    return NULL;
  }
  return table;
}

/* Lower case without spaces, '-' or '_': "RTX 4090" and "rtx-4090" compare equal. */
static void squash(const char *s, char *out, size_t len) {
  size_t o = 0;
  for (; *s && o + 1 < len; s++)
    if (*s != ' ' && *s != '-' && *s != '_') out[o++] = (char)tolower((unsigned char)*s);
  out[o] = '\0';
}

const attn_gpu *attn_gpu_match(const char *name, char *note, size_t notelen, char *err, size_t errlen) {
  int n;
  if (note && notelen) note[0] = '\0';
  const attn_gpu *t = attn_gpus(&n, err, errlen);
  if (!t) return NULL;
  char want[64], have[64];
  squash(name ? name : "", want, sizeof want);
  const attn_gpu *hit = NULL;
  int exact = 0;
  for (int i = 0; i < n && want[0] && !hit; i++) {
    squash(t[i].name, have, sizeof have);
    if (strcmp(want, have) == 0) {
      hit = &t[i];
      exact = 1;
      break;
    }
    squash(t[i].full_name, have, sizeof have);
    if (strcmp(want, have) == 0) hit = &t[i];
    for (int j = 0; j < MAX_ALIASES && aliases[i][j][0] && !hit; j++) {
      squash(aliases[i][j], have, sizeof have);
      if (strcmp(want, have) == 0) hit = &t[i];
    }
  }
  if (hit) {
    /* a variant's name (H100-SXM) is one GPU of the table: say which, since its figures are the table's */
    if (!exact && note && notelen)
      snprintf(note, notelen, "'%s' is not a table name: taken as %s (%s; attntune gpus lists the table)", name,
               hit->name, hit->full_name);
    return hit;
  }
  if (err && errlen) {
    int w = snprintf(err, errlen, "unknown GPU '%s': known: ", name ? name : "");
    for (int i = 0; i < n && w >= 0 && (size_t)w < errlen; i++)
      w += snprintf(err + w, errlen - (size_t)w, "%s%s", i ? ", " : "", t[i].name);
    if (w >= 0 && (size_t)w < errlen) snprintf(err + w, errlen - (size_t)w, ", or cpu");
  }
  return NULL;
}

const attn_gpu *attn_gpu_find(const char *name, char *err, size_t errlen) {
  return attn_gpu_match(name, NULL, 0, err, errlen);
}

double attn_gpu_peak(const attn_gpu *g, attn_dtype t) {
  double tf = t == ATTN_F16 ? g->fp16_tflops : t == ATTN_BF16 ? g->bf16_tflops : g->fp32_tflops;
  return tf * 1e12;
}
