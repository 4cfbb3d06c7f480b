/* cmd_source.c: `attntune source SPEC`: the source text a spec generates, the very text the runtime compiles (and
 * whose hash keys the compiled-kernel cache), its counting build's or its backward's, or the PTX NVRTC emits for it
 * through the runtime's own compile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cmds.h"
#include "internal.h"
#include "spec_bwd.h"
#include "spec_bwd_cuda.h"

static const char source_usage[] =
    "usage: attntune source SPEC [--counting] [--pass fwd|bwd] [--ptx] [--arch ARCH]\n"
    "  SPEC: a kernel's canonical text, one argument or several words, as the database keeps it (show --json's and\n"
    "        export's \"spec\"), e.g. 'flash cpu f32 d=64 br=64 bc=128 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0\n"
    "        feature=taylor degree=2 rank=0 seed=0'\n"
    "  prints the generated C or CUDA source on stdout: exactly the text the runtime compiles, whose hash (with the\n"
    "  compiler and its flags, and the CPU model or the CUDA arch) names the compiled kernel in the cache directory\n"
    "  (ATTN_CACHE_DIR) and the database's artifacts\n"
    "  --counting    the I/O counting build's source (what the tuner and attntune io count with)\n"
    "  --pass bwd    the backward's kernel: templates/flash_bwd.c or lowrank_bwd.c (cpu), flash_bwd.cu (cuda flash);\n"
    "                the spec checked by the backward's rules (default: fwd)\n"
    "  --ptx         cuda specs: the PTX NVRTC generates for the spec's arch, on the way to the cubin, in the\n"
    "                runtime's own compile with its options (needs NVRTC: ATTN_NVRTC, else libnvrtc.so.13, .12, .11.2)\n"
    "  --arch ARCH   cuda specs: sm_80, sm_90 or sm_90a (any sm_NN from sm_80) instead of the spec's arch, as the\n"
    "                runtime builds the spec for the device present\n"
    "  exit status: 0 ok, 2 a bad option or a spec that does not parse or that the checks refuse (the reason on one\n"
    "  line), 1 anything else (NVRTC missing or failing)\n";

static int usage(const char *fmt, const char *arg) {
  fprintf(stderr, "attntune source: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  return 2;
}

/* An --arch value: sm_NN or sm_NNa with NN >= 80 (every template needs cp.async and mma.sync). */
static int arch_ok(const char *a) {
  if (strncmp(a, "sm_", 3) != 0 || strlen(a) >= sizeof(((attn_spec *)0)->arch)) return 0; /* sizeof: not evaluated */
  char *end;
  const long v = strtol(a + 3, &end, 10);
  return end > a + 3 && a[3] >= '0' && a[3] <= '9' && v >= 80 && v <= 200 && (!*end || strcmp(end, "a") == 0);
}

/* The first line of s (NVRTC's "not available" reasons are one; a compile log is not). */
static void first_line(const char *s, char *out, size_t len) {
  snprintf(out, len, "%.*s", (int)strcspn(s ? s : "", "\n"), s ? s : "");
}

/* The PTX of src for arch from the runtime's cubin compile (attn_nvrtc_compile's options: what ptxas turns into the
 * cubin that runs), or from the PTX-only compile with the same options where this NVRTC does not keep the PTX of a
 * cubin compile. 0, or the exit code with the reason said. */
static int print_ptx(const char *src, const attn_spec *s) {
  char *ptx = NULL, *log = NULL, line[512];
  int rc = attn_nvrtc_cubin_ptx(src, "attn.cu", s->arch, &ptx, &log);
  if (rc == ATTN_EUNSUPPORTED) {
    free(ptx);
    free(log);
    rc = attn_nvrtc_ptx(src, "attn.cu", s->arch, &ptx, &log);
  }
  int code = 0;
  if (rc == ATTN_OK && ptx) {
    fputs(ptx, stdout);
  } else if (rc == ATTN_ENODEV) {
    first_line(log, line, sizeof line);
    fprintf(stderr, "attntune source --ptx: %s\n", line[0] ? line : "NVRTC is not available");
    code = 1;
  } else {
    char sum[400];
    attn_spec_summary(s, sum, sizeof sum);
    fprintf(stderr, "attntune source --ptx: NVRTC could not compile %s for %s%s%s", sum, s->arch,
            log && log[0] ? ":\n" : "", log ? log : "");
    fputc('\n', stderr);
    code = 1;
  }
  free(ptx);
  free(log);
  return code;
}

int attn_cmd_source(int argc, char **argv) {
  int counting = 0, bwd = 0, ptx = 0;
  const char *arch = NULL;
  char text[512] = "";
  size_t tl = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(source_usage, stdout);
      return 0;
    } else if (strcmp(a, "--counting") == 0) {
      counting = 1;
    } else if (strcmp(a, "--ptx") == 0) {
      ptx = 1;
    } else if (strcmp(a, "--pass") == 0 || strcmp(a, "--arch") == 0) {
      if (i + 1 >= argc) return usage("%s needs a value", a);
      const char *v = argv[++i];
      if (a[2] == 'a') {
        if (!arch_ok(v)) return usage("--arch '%s': sm_80, sm_90 or sm_90a (sm_NN from sm_80, 'a' for Hopper's)", v);
        arch = v;
      } else if (strcmp(v, "fwd") == 0 || strcmp(v, "bwd") == 0) {
        bwd = v[0] == 'b';
      } else {
        return usage("--pass '%s': fwd or bwd", v);
      }
    } else if (a[0] == '-') {
      return usage("unknown option '%s' (attntune help source)", a);
    } else {
      /* the spec's words, one argument or several */
      const size_t al = strlen(a);
      if (tl + al + 2 > sizeof text) return usage("%s", "the spec text is too long");
      if (tl) text[tl++] = ' ';
      memcpy(text + tl, a, al + 1);
      tl += al;
    }
  }
  if (!tl) return usage("%s", "no SPEC given (usage: attntune source SPEC [--counting] [--pass fwd|bwd] [--ptx])");

  char err[512];
  attn_spec s;
  /* the backward's tiles are its own checks', not the forward's (attn_spec_parse_fields) */
  if (attn_spec_parse_fields(text, &s, err, sizeof err) != ATTN_OK) return usage("%s", err);
  const int cuda = s.target == ATTN_TARGET_CUDA;
  if (arch && !cuda) return usage("--arch %s: the spec is for the cpu; --arch applies to cuda specs", arch);
  if (ptx && !cuda) return usage("%s", "--ptx: NVRTC compiles cuda specs; this spec is for the cpu");
  if (arch) snprintf(s.arch, sizeof s.arch, "%s", arch);
  /* what the runtime checks before it generates the kernel: the backward's rules for the backward (the CUDA one
   * against the largest shared memory any GPU opts in to; the runtime then checks the device's) */
  int rc = !bwd ? attn_spec_check(&s, err, sizeof err)
           : cuda ? attn_spec_check_backward_cuda(&s, 227LL * 1024, err, sizeof err)
                  : attn_spec_check_backward(&s, err, sizeof err);
  if (rc != ATTN_OK) return usage("%s", err);
  if (bwd && cuda && counting) return usage("%s", "--counting: the CUDA backward has no counting build");

  char *src = !bwd ? attn_spec_source(&s, counting, err, sizeof err)
              : cuda ? attn_spec_source_backward_cuda(&s, err, sizeof err)
                     : attn_spec_source_backward(&s, counting, err, sizeof err);
  if (!src) {
    fprintf(stderr, "attntune source: %s\n", err);
    return 1;
  }
  int code = 0;
  if (ptx) code = print_ptx(src, &s);
  else fputs(src, stdout);
  free(src);
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "attntune source: cannot write the output\n");
    return 1;
  }
  return code;
}
