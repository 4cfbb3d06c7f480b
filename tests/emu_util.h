/* emu_util.h: what the PTX interpreter's kernel tests share (tests/cuda_emu.c, cuda_emu_serve.c, cuda_emu_bwd.c,
 * cuda_emu_sm90.c, cuda_gqa_decode.c, serve_gpu_meas.c): FAIL, NVRTC's PTX loaded by the interpreter, a file's text,
 * the ATTN_EMU_TEMPLATE substitution of a generated source's template (tests/ptx_mutation.sh's mutants), and the
 * forward's error limits against fp64 (the backward's: bwd_util.h). */
#ifndef EMU_UTIL_H
#define EMU_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dlfcn.h>
#include <stdint.h>
#include "fake_libcuda.h"
#include "internal.h"
#include "kernel_abi_cuda.h"
#include "ptx/ptx.h"

/* A line "FAIL ...", counted in the including test's own `failures`. */
#define FAIL(...)        \
  do {                   \
    printf("FAIL ");     \
    printf(__VA_ARGS__); \
    printf("\n");        \
    failures++;          \
  } while (0)

/* attn_nvrtc_ptx's answer (rc, ptx, log: both freed here) loaded by the interpreter: the module; else NULL, with a
 * line "SKIP: ..." and *no_nvrtc set where there is no NVRTC, or a line "FAIL label: ..." counted in *failures. */
__attribute__((unused)) static ptx_module *emu_load_ptx(int rc, char *ptx, char *log, const char *label,
                                                        int *no_nvrtc, int *failures) {
  char err[512];
  ptx_module *m = NULL;
  if (rc == ATTN_ENODEV) {
    *no_nvrtc = 1;
    printf("SKIP: %s\n", log ? log : "no NVRTC");
  } else if (rc != ATTN_OK) {
    printf("FAIL %s: NVRTC does not compile the kernel:\n%s\n", label, log ? log : "(no log)");
    ++*failures;
  } else if (!(m = ptx_parse(ptx, err, sizeof err))) {
    printf("FAIL %s: the PTX interpreter refuses NVRTC's PTX: %s\n", label, err);
    ++*failures;
  }
  free(ptx);
  free(log);
  return m;
}

/* The whole file at p, NUL-terminated and malloc'd; NULL when it cannot be read. */
__attribute__((unused)) static char *emu_read_text(const char *p) {
  FILE *f = fopen(p, "rb");
  if (!f) return NULL;
  if (fseek(f, 0, SEEK_END) != 0) {
    fclose(f);
    return NULL;
  }
  long n = ftell(f);
  if (n < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return NULL;
  }
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  if (b) b[n] = '\0';
  fclose(f);
  return b;
}

/* A raw template's lines #include "X" of a header the build embeds (lowrank_feat.h; the kernel_abi headers come
 * first in a generated source) as gen/embed.cmake inlines them: X's text between #line markers, since NVRTC has no
 * include path. t (freed here) as the template `name`; NULL where out of memory. */
__attribute__((unused)) static char *emu_inline_headers(char *t, const char *name) {
  const char *key = "#include \"";
  for (size_t off = 0; t;) {
    char *at = strstr(t + off, key);
    if (!at) break;
    char *q = at + strlen(key), *close = strchr(q, '"');
    const size_t hl = close ? (size_t)(close - q) : 0;
    char h[64] = "";
    if (hl > 0 && hl < sizeof h && (at == t || at[-1] == '\n')) memcpy(h, q, hl), h[hl] = '\0';
    const char *ht = h[0] && strncmp(h, "kernel_abi", 10) != 0 ? attn_template_text(h) : NULL;
    if (!ht) {
      off = (size_t)(at - t) + 1;
      continue;
    }
    int next = 2; /* the line after the #include */
    for (const char *c = t; c < at; c++) next += *c == '\n';
    const char *eol = strchr(close, '\n'), *rest = eol ? eol + 1 : close + strlen(close);
    const size_t hlen = strlen(ht), need = (size_t)(at - t) + hlen + strlen(rest) + 2 * strlen(name) + 64;
    char *n = malloc(need);
    if (n) {
      const int w = snprintf(n, need, "%.*s#line 1 \"templates/%s\"\n%s%s", (int)(at - t), t, h, ht,
                             hlen && ht[hlen - 1] == '\n' ? "" : "\n");
      snprintf(n + w, need - (size_t)w, "#line %d \"templates/%s\"\n%s", next, name, rest);
      off = (size_t)w;
    }
    free(t);
    t = n;
  }
  return t;
}

/* ATTN_EMU_TEMPLATE=FILE: FILE in place of the template in a generated source *src (the text after the line
 * `#line 1 "templates/...`, its #include of an embedded header inlined as the build does), so that a modified copy
 * of a template is tested without rebuilding the project. 0, or -1 with *src unchanged. */
__attribute__((unused)) static int emu_substitute(char **src, const char *file) {
  char *t = emu_read_text(file), *at = strstr(*src, "\n#line 1 \"templates/");
  char name[64] = "";
  if (at) sscanf(at, "\n#line 1 \"templates/%63[^\"]", name);
  if (t) t = emu_inline_headers(t, name);
  if (!t || !at) {
    free(t);
    return -1;
  }
  at = strchr(at + 1, '\n') + 1;
  const size_t head = (size_t)(at - *src), tl = strlen(t);
  char *n = malloc(head + tl + 1);
  if (!n) {
    free(t);
    return -1;
  }
  memcpy(n, *src, head);
  memcpy(n + head, t, tl + 1);
  free(t);
  free(*src);
  *src = n;
  return 0;
}

/* The kernel of spec s as users run it (no I/O counting) through NVRTC, loaded by the interpreter: as emu_load_ptx,
 * with a "FAIL label: ..." line too where s has no source; with $ATTN_EMU_TEMPLATE set, that file in place of the
 * template (emu_substitute: a mutation test's modified copy). */
__attribute__((unused)) static ptx_module *emu_spec_ptx(const attn_spec *s, const char *label, int *no_nvrtc,
                                                        int *failures) {
  char err[512];
  char *src = attn_spec_source(s, 0, err, sizeof err);
  if (!src) {
    printf("FAIL %s: %s\n", label, err);
    ++*failures;
    return NULL;
  }
  const char *alt = getenv("ATTN_EMU_TEMPLATE");
  if (alt && *alt && emu_substitute(&src, alt) != 0) {
    printf("FAIL %s: cannot read %s in place of the template\n", label, alt);
    ++*failures;
    free(src);
    return NULL;
  }
  char *ptx = NULL, *log = NULL;
  const int rc = attn_nvrtc_ptx(src, "attn_kernel.cu", s->arch, &ptx, &log);
  free(src);
  return emu_load_ptx(rc, ptx, log, label, no_nvrtc, failures);
}


/* emu_fake_open with the fake's settings and its record: $FAKE_LIBCUDA set to settings (NULL: the environment's kept,
 * as the test's ENVIRONMENT gave it: a device posed as an H100), and where rec is not NULL, the record's reader
 * (fake_cuda_record) in *rec. NULL, with a "FAIL ..." line, where libcuda is NULL or anything is missing. */
__attribute__((unused)) static attn_runtime *emu_fake_open_as(const char *libcuda, const char *settings,
                                                              fake_cuda_set_hook_fn *set_hook,
                                                              fake_cuda_record_fn *rec) {
  if (!libcuda || !*libcuda) {
    printf("FAIL no fake driver given (ATTN_LIBCUDA)\n");
    return NULL;
  }
  if (setenv("ATTN_LIBCUDA", libcuda, 1) || (settings && setenv("FAKE_LIBCUDA", settings, 1))) return NULL;
  attn_runtime *rt = NULL;
  if (attn_open(NULL, ATTN_TARGET_CUDA, &rt) != ATTN_OK) {
    printf("FAIL attn_open on the fake driver %s: %s\n", libcuda, attn_last_error(NULL));
    return NULL;
  }
  void *lib = dlopen(libcuda, RTLD_NOW | RTLD_NOLOAD);
  *set_hook = lib ? (fake_cuda_set_hook_fn)dlsym(lib, "fake_cuda_set_hook") : NULL;
  if (rec) *rec = lib ? (fake_cuda_record_fn)dlsym(lib, "fake_cuda_record") : NULL;
  if (!*set_hook || (rec && !*rec)) {
    const char *missing = !*set_hook ? "fake_cuda_set_hook" : "fake_cuda_record";
    printf("FAIL the fake driver %s has no %s\n", libcuda, missing);
    attn_close(rt);
    return NULL;
  }
  return rt;
}

/* A CUDA runtime on the fake driver at libcuda (tests/fake_libcuda.c) and its launch hook's setter, through which a
 * test runs each of the runtime's launches on the interpreter: NULL, with a "FAIL ..." line, where either is missing. */
__attribute__((unused)) static attn_runtime *emu_fake_open(const char *libcuda, fake_cuda_set_hook_fn *set_hook) {
  return emu_fake_open_as(libcuda, "", set_hook, NULL);
}
/* fp64 lse [batch][heads][n] of p on q [batch][heads][n][d] and k [batch][heads_kv][n_kv][d], with attn.h's mask
 * and score modifiers (attn_visible_keys, attn_score_mod); -inf for a row that sees no key. */
__attribute__((unused)) static void emu_ref_lse(const attn_problem *p, const float *q, const float *k, double *out) {
  const long n = p->n, nkv = p->n_kv, d = p->d, G = p->heads / p->heads_kv;
  for (long bh = 0; bh < (long)p->batch * p->heads; bh++) {
    const long b = bh / p->heads, h = bh % p->heads;
    const float *kh = k + (b * p->heads_kv + h / G) * nkv * d;
    for (long i = 0; i < n; i++) {
      const float *qi = q + (bh * n + i) * d;
      long lo, hi;
      attn_visible_keys(p, i, &lo, &hi);
      double mx = -INFINITY, sum = 0;
      for (int pass = 0; pass < 2; pass++)
        for (long j = lo; j < hi; j++) {
          double acc = 0;
          for (long c = 0; c < d; c++) acc += (double)qi[c] * kh[j * d + c];
          const double s = attn_score_mod(p, acc * p->scale, h, i, j);
          if (pass == 0) mx = s > mx ? s : mx;
          else sum += exp(s - mx);
        }
      out[bh * n + i] = hi > lo ? mx + log(sum) : -INFINITY;
    }
  }
}

__attribute__((unused)) static double emu_unit_roundoff(attn_dtype t) {
  return t == ATTN_F32 ? 0x1p-24 : t == ATTN_F16 ? 0x1p-11 : 0x1p-8;
}

/* The limits on a kernel's relative error against fp64 for inputs uniform in [-1, 1]: Frobenius over the output
 * (*fro) and per row (*row). Soft-capping adds tanh's relative error times the size of the capped logits (at most c,
 * and about |scale| sqrt(d) for these inputs): tanh.approx.f32's documented 2^-10.987 on the tensor cores, the f32
 * kernel's 3 ulp (fa_tanh). ALiBi's bias, up to the largest slope times the farthest key, is part of each logit, so
 * its fp32 rounding (u32 times the logit's size) grows with it: rows far from every key carry logits of ~86 at
 * n = 201 with slope 0.5. */
__attribute__((unused)) static void emu_limits(const attn_problem *p, double *fro, double *row) {
  const double u = emu_unit_roundoff(p->dtype), u32 = 0x1p-24;
  const double c = p->dtype == ATTN_F32 ? 4.0 : 2.0;
  const double logit = fabs((double)p->scale) * sqrt((double)p->d);
  const double cap = p->softcap > 0 ? (p->dtype == ATTN_F32 ? 3 * u32 : exp2(-10.987)) *
                                          (logit < p->softcap ? logit : (double)p->softcap)
                                    : 0.0;
  double bias = 0;
  if (p->alibi_slopes) { /* added after the cap (attn_score_mod), so not bounded by it */
    const long n_kv = p->n_kv > 0 ? p->n_kv : p->n, far = n_kv > p->n ? n_kv : p->n;
    for (int h = 0; h < p->heads; h++)
      if (fabs((double)p->alibi_slopes[h]) * (double)far > bias) bias = fabs((double)p->alibi_slopes[h]) * (double)far;
  }
  *fro = c * (u + u32 * (1.0 + logit + bias) + cap);
  *row = (p->dtype == ATTN_F32 ? 2 : 1) * *fro;
}

/* The launch hook of a split-KV plan on the fake driver (fake_cuda_set_hook): launches alternate between the parts
 * (attn_kernel: q, k, v and the ALiBi slopes in, the scratch out to the fake's device memory, which is host memory)
 * and attn_combine (the scratch in, o and lse out), each on a fresh machine; the grids of the last of each kept. */
typedef struct emu_split_hook {
  const ptx_module *m;
  const attn_spec *s;
  size_t qb, kb, vb, ob, lb; /* bytes of q, k, v, o, lse */
  int runs, fails;
  unsigned grid[2];          /* the last parts' and combine's grids */
} emu_split_hook;

__attribute__((unused)) static void emu_split_on_launch(const void *params, unsigned grid, unsigned block,
                                                       unsigned smem, void *user) {
  emu_split_hook *h = user;
  attn_cuda_kargs a;
  memcpy(&a, params, sizeof a);
  const int combine = h->runs % 2;
  char err[1024] = "";
  ptx_machine *x = ptx_machine_new(h->m, err, sizeof err);
  const size_t sb = (size_t)h->s->split * (size_t)(a.batch * a.heads * a.n) * (size_t)(attn_spec_dv(h->s) + 2) * 4;
  uint64_t d[7] = {0};
  const void *src[7] = {a.q, a.k, a.v, NULL, NULL, combine ? a.scratch : NULL, a.alibi};
  /* ALiBi is never packed: a.heads is the problem's, a slope each */
  const size_t bytes[7] = {combine ? 0 : h->qb, combine ? 0 : h->kb, combine ? 0 : h->vb, combine ? h->ob : 0,
                           combine && a.lse ? h->lb : 0, sb, !combine && a.alibi ? sizeof(float) * (size_t)a.heads : 0};
  static const char *names[7] = {"q", "k", "v", "o", "lse", "scratch", "alibi"};
  int ok = x != NULL && a.scratch != NULL;
  for (int i = 0; ok && i < 7; i++)
    if (bytes[i])
      ok = (d[i] = ptx_alloc(x, bytes[i], names[i])) != 0 && (!src[i] || ptx_copy_in(x, d[i], src[i], bytes[i]) == 0);
  unsigned char *o = a.o, *scratch = a.scratch;
  float *lse = a.lse;
  a.q = (const void *)(uintptr_t)d[0], a.k = (const void *)(uintptr_t)d[1], a.v = (const void *)(uintptr_t)d[2];
  a.o = (void *)(uintptr_t)d[3], a.lse = (float *)(uintptr_t)d[4], a.scratch = (void *)(uintptr_t)d[5];
  a.alibi = (const float *)(uintptr_t)d[6];
  a.consts = NULL, a.io = NULL;
  const ptx_launch_cfg kc = {.grid = grid, .block = block, .dyn_smem = smem};
  ok = ok && ptx_launch(x, combine ? "attn_combine" : "attn_kernel", &kc, &a, ATTN_CUDA_KARGS_DENSE_BYTES, err,
                        sizeof err) == 0;
  if (ok && combine)
    ok = ptx_copy_out(x, d[3], o, h->ob, NULL) == 0 && (!lse || ptx_copy_out(x, d[4], lse, h->lb, NULL) == 0);
  else if (ok)
    ok = ptx_copy_out(x, d[5], scratch, sb, NULL) == 0;
  if (!ok) printf("FAIL the runtime's %s launch on the interpreter: %s\n", combine ? "combine" : "parts",
                  x ? (a.scratch ? err : "no scratch (not a split plan)") : "no machine");
  h->fails += !ok;
  h->grid[combine] = grid;
  h->runs++;
  ptx_machine_free(x);
}

#endif
