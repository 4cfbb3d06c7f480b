/* ptx_unit: the PTX interpreter's own checks, on small hand-written kernels: what it refuses to load, and what it
 * stops a launch for (out-of-bounds, misaligned, uninitialised and racing accesses, divergent collectives and
 * barriers, named barriers never completed, cp.async data read before its wait), each next to the corrected kernel
 * that must run; registers and labels declared in blocks (scoped), and ldmatrix's wavefronts (bank conflicts). The
 * sm_90a instructions have their own test, ptx_hopper.c. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "check.h"
#include "internal.h"
#include "ptx/ptx_internal.h"

static const char HEAD[] = ".version 8.0\n.target sm_80\n.address_size 64\n";

/* loads HEAD + body; 1 when it loads, else err holds the reason */
static ptx_module *load(const char *body, char *err, size_t len) {
  static char text[8192];
  snprintf(text, sizeof text, "%s%s", HEAD, body);
  return ptx_parse(text, err, len);
}

/* blocks of a run's grid; the buffer after the run */
static unsigned grid = 1;
static unsigned char after[1024];

/* runs entry k(.param .u64 p) with p = a 1 KiB allocation (its first 512 bytes defined), `grid` blocks of `threads`,
 * 256 bytes of dynamic shared memory; 0 or -1 with err */
static int run(const char *body, unsigned threads, char *err, size_t len) {
  ptx_module *m = load(body, err, len);
  if (!m) return -2;
  ptx_machine *x = ptx_machine_new(m, err, len);
  int rc = -2;
  if (x) {
    const uint64_t buf = ptx_alloc(x, 1024, "buf");
    unsigned char init[512];
    for (int i = 0; i < 512; i++) init[i] = (unsigned char)i;
    if (buf && ptx_copy_in(x, buf, init, sizeof init) == 0) {
      const ptx_launch_cfg c = {.grid = grid, .block = threads, .dyn_smem = 256, .order = 0};
      rc = ptx_launch(x, "k", &c, &buf, sizeof buf, err, len);
      if (rc == 0 && ptx_copy_out(x, buf, after, sizeof after, NULL)) rc = -2;
    }
  }
  ptx_machine_free(x);
  ptx_module_free(m);
  return rc;
}

#define ENTRY ".extern .shared .align 16 .b8 sm[];\n.visible .entry k(.param .u64 p)\n{\n" \
              ".reg .b32 %r<8>;\n.reg .b64 %rd<8>;\n.reg .pred %p<4>;\n.reg .f32 %f<4>;\n" \
              "ld.param.u64 %rd1, [p];\ncvta.to.global.u64 %rd2, %rd1;\nmov.u32 %r1, %tid.x;\n"

/* body = a b c (the kernels hold PTX's %-names: no printf formats) */
static void join(char *body, size_t len, const char *a, const char *b, const char *c) {
  snprintf(body, len, "%s%s%s", a, b, c);
}

static void expect_fail(const char *what, const char *body, unsigned threads, const char *needle) {
  char err[1024];
  const int rc = run(body, threads, err, sizeof err);
  CHECK(rc == -1 && strstr(err, needle), "%s: rc %d, \"%s\" (want \"%s\")", what, rc, rc ? err : "", needle);
}
static void expect_ok(const char *what, const char *body, unsigned threads) {
  char err[1024];
  const int rc = run(body, threads, err, sizeof err);
  CHECK(rc == 0, "%s: %s", what, err);
}

/* op (an approximate f32 instruction: "ex2.approx.ftz.f32", "tanh.approx.f32") of 0.5 stored by one thread, with
 * the approximations exact or at their worst */
static float approx_half(const char *op, int worst) {
  char err[512], body[1024];
  join(body, sizeof body, ENTRY "mov.f32 %f1, 0f3F000000;\n", op,
       " %f2, %f1;\nst.global.f32 [%rd2+512], %f2;\nret;\n}\n");
  ptx_module *m = load(body, err, sizeof err);
  ptx_machine *x = m ? ptx_machine_new(m, err, sizeof err) : NULL;
  float out = -1.0f;
  if (x) {
    ptx_machine_set_approx(x, worst);
    const uint64_t buf = ptx_alloc(x, 1024, "buf");
    const ptx_launch_cfg c = {.grid = 1, .block = 1, .dyn_smem = 0, .order = 0};
    if (!buf || ptx_launch(x, "k", &c, &buf, sizeof buf, err, sizeof err) ||
        ptx_copy_out(x, buf + 512, &out, sizeof out, NULL))
      out = -1.0f;
  }
  ptx_machine_free(x);
  ptx_module_free(m);
  return out;
}

/* The wavefronts of one ldmatrix (op: its shape, num and .trans words) whose lane l gives the row address
 * sm + l * stride (lanes from `limit` on give one outside shared memory: their addresses must go unused), after the
 * warp fills 8 KiB of shared memory; *ideal: the fewest. -1 when the launch fails. */
static long ldsm_waves(const char *op, unsigned stride, unsigned limit, uint64_t *ideal) {
  char err[512], tail[1024], body[2048];
  const char *dst = op[1] == '1' ? "{%r2}" : op[1] == '2' ? "{%r2, %r5}" : "{%r2, %r5, %r4, %r7}";
  snprintf(tail, sizeof tail,
           "mul.lo.u32 %%r6, %%r1, %u;\nadd.u32 %%r6, %%r6, %%r3;\nsetp.lt.u32 %%p2, %%r1, %u;\n"
           "selp.b32 %%r6, %%r6, 1048576, %%p2;\nldmatrix.sync.aligned.m8n8.%s.shared.b16 %s, [%%r6];\nret;\n}\n",
           stride, limit, op, dst);
  join(body, sizeof body,
       ENTRY "mov.u32 %r3, sm;\nshl.b32 %r4, %r1, 8;\nadd.u32 %r4, %r4, %r3;\nmov.u32 %r5, 0;\n$LZ:\n"
             "st.shared.v4.u32 [%r4], {%r5, %r5, %r5, %r5};\nadd.u32 %r4, %r4, 16;\nadd.u32 %r5, %r5, 1;\n"
             "setp.lt.u32 %p1, %r5, 16;\n@%p1 bra $LZ;\nbar.sync 0;\n",
       tail, "");
  ptx_module *m = load(body, err, sizeof err);
  ptx_machine *x = m ? ptx_machine_new(m, err, sizeof err) : NULL;
  long wf = -1;
  if (x) {
    const uint64_t buf = ptx_alloc(x, 1024, "buf");
    const ptx_launch_cfg c = {.grid = 1, .block = 32, .dyn_smem = 8192, .order = 0};
    ptx_stats st;
    if (buf && ptx_launch(x, "k", &c, &buf, sizeof buf, err, sizeof err) == 0) {
      ptx_stats_get(x, &st);
      wf = (long)st.ldsm_wavefronts;
      *ideal = st.ldsm_ideal;
    }
  }
  if (wf < 0) printf("ldmatrix %s stride %u: %s\n", op, stride, err);
  ptx_machine_free(x);
  ptx_module_free(m);
  return wf;
}

int main(void) {
  char err[512];
  /* refused at load, naming the word */
  ptx_module *m = load(ENTRY "frobnicate.b32 %r2, %r1;\nret;\n}\n", err, sizeof err);
  CHECK(!m && strstr(err, "frobnicate"), "unknown opcode: %s", err);
  m = load(ENTRY "add.weird.s32 %r2, %r1, 1;\nret;\n}\n", err, sizeof err);
  CHECK(!m && strstr(err, ".weird"), "unknown modifier: %s", err);
  m = load(ENTRY "add.s32 %r2, %q1, 1;\nret;\n}\n", err, sizeof err);
  CHECK(!m && strstr(err, "%q1"), "undeclared register: %s", err);
  m = load(ENTRY "bra $L_nowhere;\nret;\n}\n", err, sizeof err);
  CHECK(!m && strstr(err, "$L_nowhere"), "unknown label: %s", err);

  /* registers declared in a block without '%' (CUTLASS-style inline asm): scoped to the block, so the same name in two
   * blocks is two registers and an inner name hides an outer one until the block ends; labels likewise */
  static const char sc[] = ENTRY ".reg .b32 t;\nmov.u32 t, 7;\n"
                                 "{\n.reg .pred p;\n.reg .b32 t;\nsetp.eq.u32 p, %r1, 0;\nmov.u32 t, 100;\n@p bra L;\n"
                                 "mov.u32 t, 200;\nL:\nst.global.u32 [%rd2+512], t;\n}\n"
                                 "{\n.reg .pred p;\nsetp.ne.u32 p, %r1, 0;\n@p bra L;\nadd.u32 t, t, 1;\nL:\n}\n"
                                 "st.global.u32 [%rd2+516], t;\nret;\n}\n";
  expect_ok("scoped bare-name registers", sc, 1);
  uint32_t sv[2];
  memcpy(sv, after + 512, sizeof sv);
  CHECK(sv[0] == 100 && sv[1] == 8, "scoped bare-name registers: stored %u and %u, want 100 and 8", sv[0], sv[1]);
  expect_fail("a block's register used in the next block",
              ENTRY "{\n.reg .b32 tmp;\nmov.u32 tmp, 1;\n}\n{\n.reg .b32 tmp;\nst.global.u32 [%rd2+512], tmp;\n}\n"
                    "ret;\n}\n",
              1, "undefined value");
  m = load(ENTRY "{\n.reg .b32 tmp;\n}\nmov.u32 tmp, 1;\nret;\n}\n", err, sizeof err);
  CHECK(!m && strstr(err, "tmp"), "a register used after its block: %s", err);
  m = load(ENTRY "{\nL:\nbra L;\nL:\n}\nret;\n}\n", err, sizeof err);
  CHECK(!m && strstr(err, "declared twice"), "a label declared twice in one block: %s", err);
  ptx_module_free(m);

  /* ldmatrix's wavefronts: lanes 8i..8i+7 give the 16-byte rows of matrix i (.x1: lanes 0-7 only, .x2: 0-15), and
   * each matrix is one phase of the 32 banks: as many wavefronts as the most distinct rows one group of 4 banks
   * (address / 16 mod 8) serves, one when the rows hit 8 different groups or the same row */
  static const struct {
    const char *op;
    unsigned stride, limit;
    long waves;
    uint64_t ideal;
  } lc[] = {{"x4", 144, 32, 4, 4},      /* rows padded by 16 bytes: no conflict */
            {"x4.trans", 144, 32, 4, 4}, /* .trans reads the same rows */
            {"x4", 128, 32, 32, 4},     /* every row in banks 0-3: 8 each */
            {"x4.trans", 128, 32, 32, 4},
            {"x2", 64, 16, 8, 2},       /* two groups of banks, 4 rows each */
            {"x1", 128, 8, 8, 1},       /* lanes 8-31 give no address */
            {"x4", 0, 32, 4, 4},        /* one row for all: a broadcast */
            {"x4", 16, 32, 4, 4}};      /* contiguous rows */
  for (size_t i = 0; i < sizeof lc / sizeof lc[0]; i++) {
    uint64_t ideal = 0;
    const long wf = ldsm_waves(lc[i].op, lc[i].stride, lc[i].limit, &ideal);
    CHECK(wf == lc[i].waves && ideal == lc[i].ideal, "ldmatrix .%s, rows %u bytes apart: %ld wavefronts (fewest %llu), "
          "want %ld (%llu)", lc[i].op, lc[i].stride, wf, (unsigned long long)ideal, lc[i].waves,
          (unsigned long long)lc[i].ideal);
  }

  /* global memory: in bounds and aligned, defined bytes only */
  expect_ok("global read", ENTRY "ld.global.u32 %r2, [%rd2+508];\nst.global.u32 [%rd2+512], %r2;\nret;\n}\n", 1);
  expect_fail("global read past the end", ENTRY "ld.global.u32 %r2, [%rd2+1024];\nret;\n}\n", 1,
              "outside every allocation");
  expect_fail("misaligned read", ENTRY "ld.global.u32 %r2, [%rd2+2];\nret;\n}\n", 1, "misaligned");
  expect_fail("undefined global byte", ENTRY "ld.global.u32 %r2, [%rd2+512];\nret;\n}\n", 1, "nothing has written");
  expect_fail("undefined register stored", ENTRY "st.global.u32 [%rd2+512], %r5;\nret;\n}\n", 1,
              "undefined value");

  /* shared memory: a write by one warp read by another needs a barrier between */
  static const char race0[] = ENTRY "mov.u32 %r3, sm;\nsetp.ne.s32 %p1, %r1, 0;\n@%p1 bra $L1;\n"
                                    "st.shared.u32 [%r3], %r1;\n$L1:\n";
  static const char race1[] = "setp.ne.s32 %p2, %r1, 32;\n@%p2 bra $L2;\nld.shared.u32 %r4, [%r3];\n$L2:\nret;\n}\n";
  char body[4096];
  join(body, sizeof body, race0, "", race1);
  expect_fail("shared race", body, 64, "race");
  join(body, sizeof body, race0, "bar.sync 0;\n", race1);
  expect_ok("shared with a barrier", body, 64);
  expect_fail("uninitialised shared", ENTRY "mov.u32 %r3, sm;\nld.shared.u32 %r4, [%r3+16];\nret;\n}\n", 32,
              "nothing has written");
  expect_fail("shared past the end", ENTRY "mov.u32 %r3, sm;\nld.shared.u32 %r4, [%r3+256];\nret;\n}\n", 32,
              "outside the block");

  /* global memory across the blocks of a grid: nothing orders them, so a byte one block writes is off limits to the
   * others in that launch (atomics excepted); blocks resident at once run in turns between their barriers */
  grid = 4;
  static const char g0[] = ENTRY "mov.u32 %r2, %ctaid.x;\n";
  static const char g1[] = "\nret;\n}\n";
  join(body, sizeof body, g0, "st.global.u32 [%rd2+512], %r1;", g1);
  expect_fail("blocks writing the same bytes", body, 32, "race across blocks");
  join(body, sizeof body, g0,
       "mul.wide.u32 %rd3, %r2, 4;\nadd.s64 %rd4, %rd2, %rd3;\nst.global.u32 [%rd4+512], %r1;", g1);
  expect_ok("blocks writing their own bytes", body, 32);
  join(body, sizeof body, g0, "setp.ne.s32 %p1, %r2, 2;\n@%p1 bra $L1;\nst.global.u32 [%rd2], %r1;\n$L1:\n"
                              "ld.global.u32 %r3, [%rd2];", g1);
  expect_fail("a block reading another's write", body, 1, "race across blocks");
  join(body, sizeof body, g0, "atom.global.add.u32 %r3, [%rd2], 1;", g1);
  expect_ok("atomics from every block", body, 32);
  join(body, sizeof body, g0, "atom.global.add.u32 %r3, [%rd2], 1;\nld.global.u32 %r4, [%rd2];", g1);
  expect_fail("a plain read of another block's atomic", body, 1, "race across blocks");
  /* each block's clock (the machine's instruction count) before and after a barrier: with blocks resident together
   * and switched at barriers, block 1 starts before block 0 ends */
  join(body, sizeof body, g0, "mul.wide.u32 %rd3, %r2, 8;\nadd.s64 %rd4, %rd2, %rd3;\nmov.u32 %r3, %clock;\n"
                              "st.global.u32 [%rd4+512], %r3;\nbar.sync 0;\nmov.u32 %r4, %clock;\n"
                              "st.global.u32 [%rd4+516], %r4;", g1);
  expect_ok("blocks with a barrier", body, 1);
  uint32_t clk[4];
  memcpy(clk, after + 512, sizeof clk);
  CHECK(clk[2] < clk[1], "blocks do not interleave: block 1 started at %u, block 0 ended at %u", clk[2], clk[1]);
  grid = 1;

  /* cp.async: its bytes are off limits until the wait_group that completes it */
  static const char cp0[] = ENTRY "mov.u32 %r3, sm;\ncp.async.cg.shared.global [%r3], [%rd2], 16;\n"
                                  "cp.async.commit_group;\n";
  static const char cp1[] = "ld.shared.u32 %r4, [%r3];\nret;\n}\n";
  join(body, sizeof body, cp0, "", cp1);
  expect_fail("cp.async read before its wait", body, 1, "in flight");
  join(body, sizeof body, cp0, "cp.async.wait_group 0;\n", cp1);
  expect_ok("cp.async after its wait", body, 1);
  expect_fail("cp.async never waited for",
              ENTRY "mov.u32 %r3, sm;\ncp.async.cg.shared.global [%r3], [%rd2], 16;\ncp.async.commit_group;\nret;\n}\n",
              1, "never waited");

  /* collectives and barriers */
  static const char sh0[] = ENTRY "setp.lt.u32 %p1, %r1, ";
  static const char sh1[] = ";\n@%p1 bra $L1;\nshfl.sync.bfly.b32 %r2, %r1, 1, 31, -1;\n$L1:\nret;\n}\n";
  join(body, sizeof body, sh0, "0", sh1);
  expect_ok("shfl.sync, the whole warp", body, 32);
  join(body, sizeof body, sh0, "3", sh1);
  expect_fail("shfl.sync in divergent code", body, 32, "divergence");
  expect_fail("divergent barriers",
              ENTRY "setp.lt.u32 %p1, %r1, 32;\n@%p1 bra $L1;\nbar.sync 0;\nbra.uni $L2;\n$L1:\nbar.sync 0;\n"
                    "$L2:\nret;\n}\n",
              64, "barrier divergence");
  /* named barriers: warp 0 writes and arrives at barrier 1 for 64 threads, warp 1 waits there and reads; warp 2
   * takes no part. A count nobody makes is a deadlock; two counts for one barrier an error */
  static const char nb0[] = ENTRY "mov.u32 %r3, sm;\nshr.u32 %r2, %r1, 5;\nsetp.eq.u32 %p1, %r2, 0;\n"
                                  "setp.eq.u32 %p2, %r2, 1;\n@!%p1 bra $L1;\nshl.b32 %r5, %r1, 2;\n"
                                  "add.u32 %r6, %r3, %r5;\nst.shared.u32 [%r6], %r1;\n";
  static const char nb1[] = "ret;\n$L1:\n@!%p2 bra $L2;\n";
  static const char nb2[] = "ld.shared.u32 %r4, [%r3+12];\nst.global.u32 [%rd2+512], %r4;\n$L2:\nret;\n}\n";
  char nbody[4096];
  snprintf(nbody, sizeof nbody, "%sbar.arrive 1, 64;\n%sbar.sync 1, 64;\n%s", nb0, nb1, nb2);
  expect_ok("a named barrier", nbody, 96);
  uint32_t got;
  memcpy(&got, after + 512, 4);
  CHECK(got == 3, "a named barrier: read %u, 3 written", got);
  snprintf(nbody, sizeof nbody, "%sbar.arrive 1, 64;\n%sbarrier.sync 1, 96;\n%s", nb0, nb1, nb2);
  expect_fail("a named barrier's count never made", nbody, 96, "deadlock: waits at barrier 1");
  snprintf(nbody, sizeof nbody, "%sbar.sync 1, 64;\n%sbar.sync 1, 96;\n%s", nb0, nb1, nb2);
  expect_fail("two counts for one named barrier", nbody, 96, "threads wait at barrier 1");
  snprintf(nbody, sizeof nbody, "%s%s%s", nb0, nb1, nb2);
  expect_fail("no barrier between", nbody, 96, "race");

  /* approximations: correctly rounded by default, off by their bound (2 ulp for ex2) in the worst-case mode */
  const float exact = approx_half("ex2.approx.ftz.f32", 0), worst = approx_half("ex2.approx.ftz.f32", 1);
  CHECK(exact == (float)1.4142135623730951, "ex2.approx(0.5) = %.9g", (double)exact);
  const double rel = fabs((double)worst / exact - 1);
  CHECK(worst > 0 && rel > 0x1p-23 && rel < 0x1p-21, "ex2.approx(0.5) at its worst = %.9g (%.3g off)", (double)worst,
        rel);
  /* tanh.approx.f32 (NVRTC's tanhf under --use_fast_math): its documented 2^-10.987 relative at its worst */
  const float th = approx_half("tanh.approx.f32", 0), thw = approx_half("tanh.approx.f32", 1);
  CHECK(th == (float)tanh(0.5), "tanh.approx(0.5) = %.9g", (double)th);
  const double threl = fabs((double)thw / th - 1);
  CHECK(threl > 0x1p-11 && threl < 0x1p-10, "tanh.approx(0.5) at its worst = %.9g (%.3g off)", (double)thw, threl);
  /* cvt.rn between f32 and f16/bf16 (what the templates' packs and loads use) against the runtime's own conversions,
   * on every exponent, subnormals, infinities and NaN */
  long bad16 = 0, badb = 0, badback = 0;
  unsigned long long st = 0x9e3779b97f4a7c15ull;
  for (long i = 0; i < 1L << 20; i++) {
    st ^= st << 13, st ^= st >> 7, st ^= st << 17;
    const uint32_t u = (uint32_t)st;
    float f;
    memcpy(&f, &u, 4);
    const uint16_t h = ptx_f32_to_f16(f, R_RN), b = ptx_f32_to_bf16(f, R_RN);
    if (isnan(f) ? (h & 0x7fff) <= 0x7c00 : h != attn_f32_to_f16(f)) bad16++;
    if (isnan(f) ? (b & 0x7fff) <= 0x7f80 : b != attn_f32_to_bf16(f)) badb++;
    const uint16_t x = (uint16_t)u;
    const float g = ptx_f16_to_f32(x), gb = ptx_bf16_to_f32(x);
    if (!(g == attn_f16_to_f32(x) || (isnan(g) && isnan(attn_f16_to_f32(x)))) ||
        !(gb == attn_bf16_to_f32(x) || (isnan(gb) && isnan(attn_bf16_to_f32(x)))))
      badback++;
  }
  CHECK(bad16 == 0 && badb == 0 && badback == 0, "conversions differ from the runtime's: f16 %ld, bf16 %ld, back %ld",
        bad16, badb, badback);
  printf("ptx_unit: %d checks, %d failures\n", checks, failures);
  return failures ? 1 : 0;
}
