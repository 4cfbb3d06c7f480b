/* ptx_parse.c: PTX text -> ptx_module. Tokens, then the module's directives, variables and functions, then each
 * instruction's opcode, modifiers and operands. Whatever the interpreter does not implement is refused here with
 * the line and the word, so that an instruction can never be skipped at run time. */
#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ptx_internal.h"

typedef enum { TK_END, TK_ID, TK_NUM, TK_PUNCT, TK_STR } tkind;
typedef struct {
  uint8_t kind;
  char c;        /* TK_PUNCT */
  int line;
  const char *s; /* TK_ID, TK_NUM, TK_STR: start in the text */
  int len;
} token;

typedef struct {
  const char *text;
  token *t;
  int nt, pos;
  ptx_module *m;
  char *err;
  size_t errlen;
  int failed;
  /* scopes of the function being parsed: register and symbol declarations, innermost last */
  struct decl {
    char name[24];
    int count;      /* %r<count>: count names %r0..; -1: a single name */
    int base;       /* first register index */
    int depth;
  } *decls;
  int ndecl, capdecl;
  struct symdecl {
    int sym, depth;
  } *fsyms;
  int nfsym, capfsym;
  int depth;
  int cur_func;
  /* labels of the open blocks: name -> instruction, and the branches to patch (target -1 until resolved; depth:
   * the innermost block whose labels the name may still denote) */
  struct label {
    char name[64];
    int insn, depth;
  } *labels;
  int nlabel, caplabel;
  struct fix {
    char name[64];
    int insn, opnd, line, depth, target;
  } *fixes;
  int nfix, capfix;
  struct callfix {
    char name[80];
    int insn, line;
  } *calls;
  int ncall, capcall;
  int capinsn, capsym, capfunc;
} parser;

static int fail(parser *p, int line, const char *fmt, ...) {
  if (p->failed) return -1;
  p->failed = 1;
  int n = snprintf(p->err, p->errlen, "ptx line %d: ", line);
  if (n < 0 || (size_t)n >= p->errlen) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- tokens ---- */

static int is_idch(int c) { return isalnum(c) || c == '_' || c == '$' || c == '%' || c == '.'; }

static int tokenize(parser *p) {
  const char *s = p->text;
  int line = 1, cap = 0;
  for (;;) {
    while (*s && (isspace((unsigned char)*s) || (s[0] == '/' && (s[1] == '/' || s[1] == '*')))) {
      if (*s == '\n') line++;
      if (s[0] == '/' && s[1] == '/') {
        while (*s && *s != '\n') s++;
      } else if (s[0] == '/' && s[1] == '*') {
        s += 2;
        while (*s && !(s[0] == '*' && s[1] == '/')) line += *s++ == '\n';
        if (*s) s += 2;
      } else {
        s++;
      }
    }
    token tk = {.line = line, .s = s};
    if (!*s) {
      tk.kind = TK_END;
    } else if (*s == '"') {
      tk.kind = TK_STR;
      const char *e = strchr(s + 1, '"');
      if (!e) return fail(p, line, "unterminated string");
      tk.s = s + 1;
      tk.len = (int)(e - s - 1);
      s = e + 1;
    } else if (isdigit((unsigned char)*s)) {
      tk.kind = TK_NUM;
      const char *e = s;
      /* 0fXXXXXXXX, 0dXXXXXXXXXXXXXXXX, 0x..., decimal with an optional fraction and exponent, U suffix */
      while (isalnum((unsigned char)*e) || *e == '.' ||
             ((*e == '+' || *e == '-') && (e[-1] == 'e' || e[-1] == 'E') && s[1] != 'x' && s[1] != 'f' && s[1] != 'd'))
        e++;
      tk.len = (int)(e - s);
      s = e;
    } else if (is_idch((unsigned char)*s)) {
      tk.kind = TK_ID;
      const char *e = s;
      for (;;) {
        if (is_idch((unsigned char)*e)) e++;
        else if (e[0] == ':' && e[1] == ':' && is_idch((unsigned char)e[2])) e += 2; /* .L2::128B */
        else break;
      }
      tk.len = (int)(e - s);
      s = e;
    } else if (strchr("{}()[],;:|@!+-=<>", *s)) {
      tk.kind = TK_PUNCT;
      tk.c = *s++;
    } else {
      return fail(p, line, "unexpected character '%c'", *s);
    }
    p->t = ptx_grow(p->t, &cap, p->nt + 1, sizeof *p->t);
    if (!p->t) return fail(p, line, "out of memory");
    p->t[p->nt++] = tk;
    if (tk.kind == TK_END) return 0;
  }
}

static token *peek(parser *p) { return &p->t[p->pos]; }
static token *next(parser *p) {
  token *t = &p->t[p->pos];
  if (t->kind != TK_END) p->pos++;
  return t;
}
static int is_punct(const token *t, char c) { return t->kind == TK_PUNCT && t->c == c; }
static int is_word(const token *t, const char *w) {
  return t->kind == TK_ID && (int)strlen(w) == t->len && !strncmp(t->s, w, (size_t)t->len);
}
static int expect(parser *p, char c) {
  token *t = next(p);
  if (!is_punct(t, c))
    return fail(p, t->line, "expected '%c', found '%.*s'", c, t->len ? t->len : 1, t->len ? t->s : &t->c);
  return 0;
}
static void tkcopy(const token *t, char *out, size_t len) { snprintf(out, len, "%.*s", t->len, t->s); }

/* integer literal (decimal, 0x hex, 0 octal, trailing U); -1 when it is not one */
static int parse_int(const token *t, int64_t *v) {
  char buf[64];
  tkcopy(t, buf, sizeof buf);
  size_t l = strlen(buf);
  if (l && (buf[l - 1] == 'U' || buf[l - 1] == 'u')) buf[--l] = '\0';
  if (!l) return -1;
  char *end;
  unsigned long long u = strtoull(buf, &end,
                                  buf[0] == '0' && (buf[1] == 'x' || buf[1] == 'X') ? 16
                                  : buf[0] == '0' && l > 1                          ? 8
                                                                                    : 10);
  if (*end) return -1;
  *v = (int64_t)u;
  return 0;
}

/* 0fXXXXXXXX (f32 bits), 0dXXXXXXXXXXXXXXXX (f64 bits) or a decimal float; *kind 1 f32, 2 f64 */
static int parse_float(const token *t, uint64_t *bits, uint8_t *kind) {
  char buf[64];
  tkcopy(t, buf, sizeof buf);
  char *end;
  if ((buf[1] == 'f' || buf[1] == 'F') && buf[0] == '0' && strlen(buf) == 10) {
    *bits = strtoull(buf + 2, &end, 16);
    *kind = 1;
    return *end ? -1 : 0;
  }
  if ((buf[1] == 'd' || buf[1] == 'D') && buf[0] == '0' && strlen(buf) == 18) {
    *bits = strtoull(buf + 2, &end, 16);
    *kind = 2;
    return *end ? -1 : 0;
  }
  if (strchr(buf, '.') || strchr(buf, 'e') || strchr(buf, 'E')) {
    double d = strtod(buf, &end);
    if (*end) return -1;
    memcpy(bits, &d, 8);
    *kind = 2;
    return 0;
  }
  return -1;
}

/* ---- types and modifiers ---- */

static const struct {
  const char *name;
  ptx_type t;
} TYPES[] = {{"pred", T_PRED}, {"b8", T_B8},     {"b16", T_B16},   {"b32", T_B32},       {"b64", T_B64},
             {"u8", T_U8},     {"u16", T_U16},   {"u32", T_U32},   {"u64", T_U64},       {"s8", T_S8},
             {"s16", T_S16},   {"s32", T_S32},   {"s64", T_S64},   {"f16", T_F16},       {"f16x2", T_F16X2},
             {"bf16", T_BF16}, {"bf16x2", T_BF16X2}, {"f32", T_F32}, {"f64", T_F64},     {"b128", T_B128}};

static ptx_type type_of(const char *w) {
  for (size_t i = 0; i < sizeof TYPES / sizeof TYPES[0]; i++)
    if (!strcmp(w, TYPES[i].name)) return TYPES[i].t;
  return T_NONE;
}

static const struct {
  const char *name;
  ptx_op op;
} OPS[] = {
    {"mov", OP_MOV},       {"ld", OP_LD},           {"ldu", OP_LD},          {"st", OP_ST},
    {"cvta", OP_CVTA},     {"cvt", OP_CVT},         {"add", OP_ADD},         {"sub", OP_SUB},
    {"mul", OP_MUL},       {"mad", OP_MAD},         {"fma", OP_FMA},         {"div", OP_DIV},
    {"rem", OP_REM},       {"neg", OP_NEG},         {"abs", OP_ABS},         {"min", OP_MIN},
    {"max", OP_MAX},       {"and", OP_AND},         {"or", OP_OR},           {"xor", OP_XOR},
    {"not", OP_NOT},       {"cnot", OP_CNOT},       {"shl", OP_SHL},         {"shr", OP_SHR},
    {"setp", OP_SETP},     {"selp", OP_SELP},       {"set", OP_SET},         {"bfi", OP_BFI},
    {"bfe", OP_BFE},       {"prmt", OP_PRMT},       {"popc", OP_POPC},       {"clz", OP_CLZ},
    {"brev", OP_BREV},     {"rcp", OP_RCP},         {"sqrt", OP_SQRT},       {"rsqrt", OP_RSQRT},
    {"ex2", OP_EX2},       {"lg2", OP_LG2},         {"sin", OP_SIN},         {"cos", OP_COS},
    {"testp", OP_TESTP},   {"copysign", OP_COPYSIGN}, {"addc", OP_ADDC},     {"subc", OP_SUBC},
    {"madc", OP_MADC},     {"bra", OP_BRA},         {"call", OP_CALL},       {"ret", OP_RET},
    {"exit", OP_EXIT},     {"shfl", OP_SHFL},       {"vote", OP_VOTE},       {"mma", OP_MMA},
    {"ldmatrix", OP_LDMATRIX}, {"atom", OP_ATOM},   {"red", OP_RED},         {"membar", OP_MEMBAR},
    {"fence", OP_FENCE},   {"lop3", OP_LOP3},       {"mul24", OP_MUL24},     {"mad24", OP_MAD24},
    {"fns", OP_FNS},       {"tanh", OP_TANH},       {"mbarrier", OP_MBAR},   {"setmaxnreg", OP_SETMAXNREG},
    {"elect", OP_ELECT},   {"stmatrix", OP_STMATRIX}};

/* Applies one modifier word to in; -1 when it means nothing to this opcode. */
static int modifier(ptx_insn *in, const char *w, int *ntypes) {
  const ptx_op op = (ptx_op)in->op;
  ptx_type t = type_of(w);
  if (t != T_NONE) {
    if (op == OP_MMA) { /* .f32.f16.f16.f32: D, A, B, C */
      if (*ntypes == 0) in->type = (uint8_t)t;
      else if (*ntypes == 1) in->mma_ab = t;
      else if (*ntypes == 2 && t != in->mma_ab) return -1;
      else if (*ntypes == 3) in->type2 = (uint8_t)t;
      else if (*ntypes > 3) return -1;
    } else if (*ntypes == 0) {
      in->type = (uint8_t)t;
    } else if (*ntypes == 1) {
      in->type2 = (uint8_t)t;
    } else {
      return -1;
    }
    (*ntypes)++;
    return 0;
  }
  static const struct {
    const char *w;
    uint8_t sp;
  } SPACES[] = {{"global", SP_GLOBAL}, {"shared", SP_SHARED}, {"local", SP_LOCAL}, {"param", SP_PARAM},
                {"const", SP_CONST}, {"shared::cta", SP_SHARED}, {"shared::cluster", SP_SHARED}};
  for (size_t i = 0; i < sizeof SPACES / sizeof SPACES[0]; i++)
    if (!strcmp(w, SPACES[i].w)) {
      if (op == OP_CPASYNC || op == OP_FENCE || op == OP_MEMBAR) return 0; /* cp.async's .shared.global */
      if (in->space && op != OP_CVTA) return -1;
      in->space = SPACES[i].sp;
      return op == OP_LD || op == OP_ST || op == OP_CVTA || op == OP_ATOM || op == OP_RED || op == OP_LDMATRIX ||
                     op == OP_STMATRIX || op == OP_MBAR
                 ? 0
                 : -1;
    }
  static const struct {
    const char *w;
    uint8_t r;
  } RND[] = {{"rn", R_RN}, {"rz", R_RZ}, {"rm", R_RM}, {"rp", R_RP}, {"rni", R_RNI}, {"rzi", R_RZI}, {"rmi", R_RMI},
             {"rpi", R_RPI}};
  for (size_t i = 0; i < sizeof RND / sizeof RND[0]; i++)
    if (!strcmp(w, RND[i].w)) {
      if (op != OP_CVT && op != OP_ADD && op != OP_SUB && op != OP_MUL && op != OP_FMA && op != OP_MAD &&
          op != OP_DIV && op != OP_RCP && op != OP_SQRT)
        return -1;
      in->rnd = RND[i].r;
      return 0;
    }
  static const struct {
    const char *w;
    uint8_t c;
  } CMP[] = {{"eq", C_EQ},   {"ne", C_NE},   {"lt", C_LT},   {"le", C_LE},   {"gt", C_GT},   {"ge", C_GE},
             {"lo", C_LO},   {"ls", C_LS},   {"hi", C_HI},   {"hs", C_HS},   {"equ", C_EQU}, {"neu", C_NEU},
             {"ltu", C_LTU}, {"leu", C_LEU}, {"gtu", C_GTU}, {"geu", C_GEU}, {"num", C_NUM}, {"nan", C_NAN}};
  if (op == OP_SETP || op == OP_SET) {
    for (size_t i = 0; i < sizeof CMP / sizeof CMP[0]; i++)
      if (!strcmp(w, CMP[i].w) && !in->cmp) {
        in->cmp = CMP[i].c;
        return 0;
      }
    if (in->cmp && !in->bop) {
      if (!strcmp(w, "and")) return in->bop = M_AND, 0;
      if (!strcmp(w, "or")) return in->bop = M_OR, 0;
      if (!strcmp(w, "xor")) return in->bop = M_XOR, 0;
    }
  }
  if (op == OP_MUL || op == OP_MAD) {
    if (!strcmp(w, "wide")) return in->flags |= F_WIDE, 0;
  }
  if (op == OP_MUL || op == OP_MAD || op == OP_MADC || op == OP_MUL24 || op == OP_MAD24) {
    if (!strcmp(w, "hi")) return in->flags |= F_HI, 0;
    if (!strcmp(w, "lo")) return in->flags |= F_LO, 0;
  }
  if (!strcmp(w, "cc") && (op == OP_ADD || op == OP_SUB || op == OP_MAD || op == OP_ADDC || op == OP_SUBC ||
                           op == OP_MADC))
    return in->flags |= F_CC, 0;
  if (!strcmp(w, "ftz")) return in->flags |= F_FTZ, 0;
  if (!strcmp(w, "to") && op == OP_CVTA && !in->space) return in->flags |= F_TO, 0;
  if (!strcmp(w, "sat") &&
      (op == OP_ADD || op == OP_SUB || op == OP_MUL || op == OP_FMA || op == OP_MAD || op == OP_CVT))
    return in->flags |= F_SAT, 0;
  if (!strcmp(w, "approx") && (op == OP_RCP || op == OP_SQRT || op == OP_RSQRT || op == OP_EX2 || op == OP_LG2 ||
                               op == OP_SIN || op == OP_COS || op == OP_TANH || op == OP_DIV))
    return in->flags |= F_APPROX, 0;
  if (!strcmp(w, "full") && op == OP_DIV) return in->flags |= F_FULL, 0;
  if (!strcmp(w, "uni") && (op == OP_BRA || op == OP_CALL)) return in->flags |= F_UNI, 0;
  if (!strcmp(w, "sync") && (op == OP_SHFL || op == OP_VOTE || op == OP_MMA || op == OP_LDMATRIX || op == OP_BAR ||
                             op == OP_BARRED || op == OP_BARWARP))
    return in->flags |= F_SYNC, 0;
  if (!strcmp(w, "aligned") && (op == OP_MMA || op == OP_LDMATRIX || op == OP_BAR || op == OP_BARRED))
    return in->flags |= F_ALIGNED, 0;
  if (!strcmp(w, "volatile") && (op == OP_LD || op == OP_ST)) return in->flags |= F_VOLATILE, 0;
  if (!strcmp(w, "nc") && op == OP_LD) return in->flags |= F_NC, 0;
  if (!strcmp(w, "NaN") && (op == OP_MIN || op == OP_MAX)) return in->flags |= F_NAN, 0;
  if (!strcmp(w, "relu") && op == OP_CVT) return in->flags |= F_RELU, 0;
  if (!strcmp(w, "shiftamt") && op == OP_BFE) return in->flags |= F_SHIFTAMT, 0;
  if ((op == OP_LD || op == OP_ST) &&
      (!strcmp(w, "ca") || !strcmp(w, "cg") || !strcmp(w, "cs") || !strcmp(w, "lu") || !strcmp(w, "cv") ||
       !strcmp(w, "wb") || !strcmp(w, "wt") || !strcmp(w, "L1::no_allocate") || !strcmp(w, "L1::evict_last") ||
       !strcmp(w, "L1::evict_first") || !strcmp(w, "L2::128B") || !strcmp(w, "L2::64B") || !strcmp(w, "L2::256B")))
    return 0; /* cache hints: no effect on the result */
  if ((op == OP_LD || op == OP_ST) && (!strcmp(w, "v2") || !strcmp(w, "v4"))) {
    in->vec = (uint8_t)(w[1] - '0');
    return 0;
  }
  if (op == OP_CPASYNC && (!strcmp(w, "cg") || !strcmp(w, "ca"))) return 0;
  if (op == OP_SHFL) {
    if (!strcmp(w, "bfly")) return in->mode = M_BFLY, 0;
    if (!strcmp(w, "up")) return in->mode = M_UP, 0;
    if (!strcmp(w, "down")) return in->mode = M_DOWN, 0;
    if (!strcmp(w, "idx")) return in->mode = M_IDX, 0;
  }
  if (op == OP_VOTE) {
    if (!strcmp(w, "any")) return in->mode = M_ANY, 0;
    if (!strcmp(w, "all")) return in->mode = M_ALL, 0;
    if (!strcmp(w, "uni")) return in->mode = M_UNIV, 0;
    if (!strcmp(w, "ballot")) return in->mode = M_BALLOT, 0;
  }
  if (op == OP_BARRED) {
    if (!strcmp(w, "or")) return in->bop = M_OR, 0;
    if (!strcmp(w, "and")) return in->bop = M_AND, 0;
    if (!strcmp(w, "popc")) return in->bop = M_POPC, 0;
  }
  if (op == OP_ATOM || op == OP_RED) {
    static const struct {
      const char *w;
      uint8_t m;
    } AT[] = {{"add", M_ADD}, {"min", M_MIN}, {"max", M_MAX}, {"inc", M_INC}, {"dec", M_DEC}, {"exch", M_EXCH},
              {"cas", M_CAS}, {"and", M_AND}, {"or", M_OR},   {"xor", M_XOR}};
    for (size_t i = 0; i < sizeof AT / sizeof AT[0]; i++)
      if (!strcmp(w, AT[i].w) && !in->mode) return in->mode = AT[i].m, 0;
    if (!strcmp(w, "relaxed") || !strcmp(w, "gpu") || !strcmp(w, "sys") || !strcmp(w, "cta")) return 0;
  }
  if (op == OP_PRMT) {
    static const char *const PM[] = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
    for (int i = 0; i < 6; i++)
      if (!strcmp(w, PM[i])) return in->mode = (uint8_t)(M_F4E + i), 0;
  }
  if ((op == OP_MEMBAR || op == OP_FENCE) &&
      (!strcmp(w, "cta") || !strcmp(w, "gl") || !strcmp(w, "sys") || !strcmp(w, "gpu") || !strcmp(w, "sc") ||
       !strcmp(w, "acq_rel")))
    return 0;
  if (op == OP_FENCE) { /* fence.proxy.async[.space], fence.mbarrier_init.release.cluster */
    if (!strcmp(w, "proxy") && !in->mode) return in->mode = 1, 0;
    if (!strcmp(w, "async") && in->mode == 1) return in->flags |= F_PROXYASYNC, 0;
    if (!strcmp(w, "mbarrier_init")) return in->flags |= F_MBARINIT, 0;
    if (!strcmp(w, "release") || !strcmp(w, "acquire") || !strcmp(w, "cluster")) return 0;
  }
  if (op == OP_MBAR) {
    static const char *const MB[] = {"init", "arrive", "expect_tx", "try_wait", "test_wait", "inval"};
    for (int i = 0; i < 6; i++)
      if (!strcmp(w, MB[i])) {
        if (!in->mode) return in->mode = (uint8_t)(MB_INIT + i), 0;
        if (in->mode == MB_ARRIVE && i == 2) return in->flags |= F_EXPECTTX, 0;
        return -1;
      }
    if (!strcmp(w, "parity") && (in->mode == MB_TRY_WAIT || in->mode == MB_TEST_WAIT)) return in->flags |= F_PARITY, 0;
    if (!strcmp(w, "release") || !strcmp(w, "acquire") || !strcmp(w, "relaxed") || !strcmp(w, "cta") ||
        !strcmp(w, "cluster"))
      return 0;
  }
  if (op == OP_STMATRIX) {
    if (!strcmp(w, "sync")) return in->flags |= F_SYNC, 0;
    if (!strcmp(w, "aligned")) return in->flags |= F_ALIGNED, 0;
    if (!strcmp(w, "m8n8")) return 0;
    if (!strcmp(w, "x1") || !strcmp(w, "x2") || !strcmp(w, "x4")) return in->num = (uint8_t)(w[1] - '0'), 0;
    if (!strcmp(w, "trans")) return in->flags |= F_TRANS, 0;
  }
  if (op == OP_SETMAXNREG) {
    if (!strcmp(w, "inc")) return in->flags |= F_INC, 0;
    if (!strcmp(w, "dec") || !strcmp(w, "sync") || !strcmp(w, "aligned")) return 0;
  }
  if (op == OP_ELECT && !strcmp(w, "sync")) return in->flags |= F_SYNC, 0;
  if (op == OP_MMA) {
    if (!strcmp(w, "m16n8k16")) return in->num = 16, 0;
    if (!strcmp(w, "m16n8k8")) return in->num = 8, 0;
    if (!strcmp(w, "row") && !(in->flags & F_ROW_COL)) return in->flags |= F_ROW_COL, 0;
    if (!strcmp(w, "col") && (in->flags & F_ROW_COL) && !in->mode) return in->mode = 1, 0;
  }
  if (op == OP_LDMATRIX) {
    if (!strcmp(w, "m8n8")) return 0;
    if (!strcmp(w, "x1") || !strcmp(w, "x2") || !strcmp(w, "x4")) return in->num = (uint8_t)(w[1] - '0'), 0;
    if (!strcmp(w, "trans")) return in->flags |= F_TRANS, 0;
  }
  return -1;
}

/* wgmma.fence / commit_group / wait_group (.sync.aligned), wgmma.mma_async.sync.aligned.m64nNk16.f32.AB.AB */
static int decode_wgmma(parser *p, const token *t, ptx_insn *in, const char *rest) {
  if (!strcmp(rest, "fence.sync.aligned")) return in->op = OP_WGFENCE, 0;
  if (!strcmp(rest, "commit_group.sync.aligned")) return in->op = OP_WGCOMMIT, 0;
  if (!strcmp(rest, "wait_group.sync.aligned")) return in->op = OP_WGWAIT, 0;
  int n = 0, used = 0;
  char d[8], a[8], b[8];
  if (sscanf(rest, "mma_async.sync.aligned.m64n%dk16.%7[^.].%7[^.].%7[^.]%n", &n, d, a, b, &used) != 4 ||
      rest[used] || n < 8 || n > 256 || n % 8 || strcmp(d, "f32") || strcmp(a, b) ||
      (strcmp(a, "f16") && strcmp(a, "bf16")))
    return fail(p, t->line, "unsupported wgmma form %.*s (m64nNk16, f32 accumulators, f16 or bf16 inputs)", t->len,
                t->s);
  in->op = OP_WGMMA;
  in->type = T_F32;
  in->mma_ab = strcmp(a, "f16") ? T_BF16 : T_F16;
  in->num = (uint8_t)(n / 8);
  in->flags |= F_SYNC | F_ALIGNED;
  return 0;
}

/* after "cp.async.bulk": .tensor.Nd.DST.SRC.tile[.mbarrier::complete_tx::bytes][.bulk_group][.L2::cache_hint]
 * [.multicast::cluster], .commit_group, .wait_group[.read] */
static int decode_bulk(parser *p, const token *t, ptx_insn *in, const char *r) {
  if (!strcmp(r, ".commit_group")) return in->op = OP_BULKCOMMIT, 0;
  if (!strcmp(r, ".wait_group") || !strcmp(r, ".wait_group.read")) return in->op = OP_BULKWAIT, 0;
  int dims = 0, used = 0;
  if (strncmp(r, ".tensor.", 8)) { /* a plain bulk copy: [dst], [src], size (num 0) */
    used = 0;
  } else if (sscanf(r, ".tensor.%dd%n", &dims, &used) != 1 || dims < 1 || dims > 5) {
    return fail(p, t->line, "unsupported bulk copy %.*s", t->len, t->s);
  }
  in->op = OP_TMA;
  in->num = (uint8_t)dims;
  char buf[160];
  snprintf(buf, sizeof buf, "%s", r + used);
  char *save = NULL;
  int first = 0, tile = 0, mbar = 0, group = 0;
  for (char *m = strtok_r(buf, ".", &save); m; m = strtok_r(NULL, ".", &save)) {
    if (!strcmp(m, "shared::cluster") || !strcmp(m, "shared::cta")) {
      if (!first) first = 1;
    } else if (!strcmp(m, "global")) {
      if (!first) first = 2;
    } else if (!strcmp(m, "tile")) {
      tile = 1;
    } else if (!strcmp(m, "mbarrier::complete_tx::bytes")) {
      mbar = 1;
    } else if (!strcmp(m, "bulk_group")) {
      group = 1;
    } else if (!strcmp(m, "L2::cache_hint")) {
      in->flags |= F_HI; /* one more operand: the cache policy */
    } else if (!strcmp(m, "multicast::cluster")) {
      in->flags |= F_LO; /* one more operand: the CTA mask */
    } else {
      return fail(p, t->line, "unknown modifier .%s of cp.async.bulk.tensor (in %.*s)", m, t->len, t->s);
    }
  }
  in->mode = (uint8_t)first;
  if (!dims) tile = 1; /* no tensor, no mode */
  if (!tile || (first == 1 && !mbar) || (first == 2 && !group))
    return fail(p, t->line, "unsupported cp.async.bulk.tensor form %.*s (tile mode; loads complete on an mbarrier, "
                "stores in a bulk group)", t->len, t->s);
  return 0;
}

/* the opcode word "mma.sync.aligned...": base name, then its modifiers */
static int decode_opcode(parser *p, const token *t, ptx_insn *in) {
  char w[160];
  tkcopy(t, w, sizeof w);
  char *dot = strchr(w, '.');
  if (dot) *dot = '\0';
  const char *rest = dot ? dot + 1 : "";
  in->op = OP_COUNT;
  /* multi-word opcodes first */
  if (!strcmp(w, "cp") && !strncmp(rest, "async.bulk", 10)) return decode_bulk(p, t, in, rest + 10);
  if (!strcmp(w, "wgmma")) return decode_wgmma(p, t, in, rest);
  if (!strcmp(w, "griddepcontrol") && (!strcmp(rest, "launch_dependents") || !strcmp(rest, "wait")))
    return in->op = OP_NOP, 0; /* launches of one kernel at a time: nothing to order */
  if (!strcmp(w, "prefetch") || !strcmp(w, "prefetchu")) return in->op = OP_NOP, 0; /* a cache hint */
  if (!strcmp(w, "barrier") && !strncmp(rest, "cluster.", 8)) {
    /* one-block clusters: arrive is nothing, wait is the block's barrier (every thread arrived before it) */
    if (!strcmp(rest, "cluster.arrive") || !strcmp(rest, "cluster.arrive.aligned") ||
        !strcmp(rest, "cluster.arrive.release") || !strcmp(rest, "cluster.arrive.release.aligned") ||
        !strcmp(rest, "cluster.arrive.relaxed") || !strcmp(rest, "cluster.arrive.relaxed.aligned"))
      return in->op = OP_NOP, 0;
    if (!strcmp(rest, "cluster.wait") || !strcmp(rest, "cluster.wait.aligned") ||
        !strcmp(rest, "cluster.wait.acquire") || !strcmp(rest, "cluster.wait.acquire.aligned")) {
      in->op = OP_BAR;
      in->o[0].kind = K_IMM; /* barrier 0 */
      in->nops = 1;
      return 0;
    }
    return fail(p, t->line, "unknown instruction %.*s", t->len, t->s);
  }
  if (!strcmp(w, "cp") && !strncmp(rest, "async", 5)) {
    const char *r = rest + 5;
    if (!strcmp(r, ".commit_group")) return in->op = OP_CPCOMMIT, 0;
    if (!strncmp(r, ".wait_group", 11) && !r[11]) return in->op = OP_CPWAIT, 0;
    if (!strcmp(r, ".wait_all")) return in->op = OP_CPWAITALL, 0;
    in->op = OP_CPASYNC;
    rest = *r == '.' ? r + 1 : r;
  } else if (!strcmp(w, "bar") || !strcmp(w, "barrier")) {
    if (!strncmp(rest, "warp.sync", 9) && !rest[9]) return in->op = OP_BARWARP, in->flags |= F_SYNC, 0;
    if (!strncmp(rest, "red.", 4)) {
      in->op = OP_BARRED;
      rest += 4;
    } else if (!strcmp(rest, "sync") || !strcmp(rest, "sync.aligned") || !strcmp(rest, "cta.sync") ||
               !strcmp(rest, "cta.sync.aligned")) {
      return in->op = OP_BAR, 0;
    } else if (!strcmp(rest, "arrive") || !strcmp(rest, "arrive.aligned") || !strcmp(rest, "cta.arrive") ||
               !strcmp(rest, "cta.arrive.aligned")) {
      return in->op = OP_BARARRIVE, 0;
    } else {
      return fail(p, t->line, "unknown instruction %.*s", t->len, t->s);
    }
  } else {
    for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
      if (!strcmp(w, OPS[i].name)) in->op = (uint16_t)OPS[i].op;
  }
  if (in->op == OP_COUNT) return fail(p, t->line, "unknown instruction %.*s", t->len, t->s);
  int ntypes = 0;
  char buf[160];
  snprintf(buf, sizeof buf, "%s", rest);
  char *save = NULL;
  for (char *m = strtok_r(buf, ".", &save); m; m = strtok_r(NULL, ".", &save)) {
    /* L2::128B contains no dot; the two-part L1::/L2:: hints are one word */
    if (modifier(in, m, &ntypes) != 0)
      return fail(p, t->line, "unknown modifier .%s of %s (in %.*s)", m, w, t->len, t->s);
  }
  if (in->op == OP_LD || in->op == OP_ST) {
    if (!in->space) in->space = SP_GENERIC;
  }
  if (in->op == OP_CVTA && !in->space) return fail(p, t->line, "cvta without a state space");
  if (in->op == OP_MMA && (!(in->flags & F_SYNC) || !(in->flags & F_ALIGNED) || !in->num || in->mode != 1 ||
                           ntypes != 4))
    return fail(p, t->line, "unsupported mma form %.*s", t->len, t->s);
  if (in->op == OP_LDMATRIX && (!in->num || in->type != T_B16 || in->space != SP_SHARED))
    return fail(p, t->line, "unsupported ldmatrix form %.*s", t->len, t->s);
  if (in->op == OP_STMATRIX && (!in->num || in->type != T_B16 || in->space != SP_SHARED ||
                                !(in->flags & F_SYNC) || !(in->flags & F_ALIGNED)))
    return fail(p, t->line, "unsupported stmatrix form %.*s", t->len, t->s);
  if (in->op == OP_MBAR && (!in->mode || (in->type != T_B64 && in->mode != MB_EXPECT_TX) ||
                            ((in->mode == MB_TRY_WAIT || in->mode == MB_TEST_WAIT) && in->type != T_B64)))
    return fail(p, t->line, "unsupported mbarrier form %.*s", t->len, t->s);
  if (in->op == OP_MBAR && !in->space) in->space = SP_GENERIC;
  if (in->op == OP_FENCE && in->mode == 1 && !(in->flags & F_PROXYASYNC))
    return fail(p, t->line, "unsupported fence.proxy form %.*s", t->len, t->s);
  if (in->op == OP_SETMAXNREG && in->type != T_U32)
    return fail(p, t->line, "unsupported setmaxnreg form %.*s", t->len, t->s);
  return 0;
}

/* ---- registers and symbols ---- */

static int reg_width(ptx_type t) { return t == T_PRED ? 1 : ptx_type_bits(t); }

static int add_regs(parser *p, int line, const char *name, int count, ptx_type t) {
  ptx_func *f = &p->m->func[p->cur_func];
  const int n = count < 0 ? 1 : count;
  const int w = reg_width(t);
  if (w <= 0 || w > 64) return fail(p, line, "unsupported register type for %s", name);
  uint8_t *rb = realloc(f->regbits, (size_t)(f->nregs + n));
  if (rb) f->regbits = rb;
  uint64_t *rm = realloc(f->regmask, (size_t)(f->nregs + n) * sizeof *rm);
  if (rm) f->regmask = rm;
  char(*rn)[24] = realloc(f->regname, (size_t)(f->nregs + n) * sizeof *rn);
  if (rn) f->regname = rn;
  if (!rb || !rm || !rn) return fail(p, line, "out of memory");
  for (int i = 0; i < n; i++) {
    f->regbits[f->nregs + i] = (uint8_t)w;
    f->regmask[f->nregs + i] = w >= 64 ? ~0ull : (1ull << w) - 1;
    if (count < 0) snprintf(f->regname[f->nregs + i], 24, "%.23s", name);
    else snprintf(f->regname[f->nregs + i], 24, "%.12s%d", name, i);
  }
  p->decls = ptx_grow(p->decls, &p->capdecl, p->ndecl + 1, sizeof *p->decls);
  if (!p->decls) return fail(p, line, "out of memory");
  struct decl *d = &p->decls[p->ndecl++];
  snprintf(d->name, sizeof d->name, "%.23s", name);
  d->count = count;
  d->base = f->nregs;
  d->depth = p->depth;
  f->nregs += n;
  return 0;
}

/* the register a name denotes, innermost declaration first (*depth: its scope's); -1 if none */
static int find_reg_at(parser *p, const char *name, int *depth) {
  const size_t l = strlen(name);
  size_t k = l;
  while (k > 0 && isdigit((unsigned char)name[k - 1])) k--;
  for (int i = p->ndecl - 1; i >= 0; i--) {
    const struct decl *d = &p->decls[i];
    *depth = d->depth;
    if (d->count < 0) {
      if (!strcmp(d->name, name)) return d->base;
    } else if (k < l && strlen(d->name) == k && !strncmp(d->name, name, k)) {
      const long idx = strtol(name + k, NULL, 10);
      if (idx >= 0 && idx < d->count) return d->base + (int)idx;
    }
  }
  return -1;
}

static int find_reg(parser *p, const char *name) {
  int depth;
  return find_reg_at(p, name, &depth);
}

static int add_symbol(parser *p, ptx_symbol *s) {
  p->m->sym = ptx_grow(p->m->sym, &p->capsym, p->m->nsym + 1, sizeof *p->m->sym);
  if (!p->m->sym) return -1;
  p->m->sym[p->m->nsym] = *s;
  return p->m->nsym++;
}

static int find_symbol(parser *p, const char *name) {
  for (int i = p->nfsym - 1; i >= 0; i--)
    if (!strcmp(p->m->sym[p->fsyms[i].sym].name, name)) return p->fsyms[i].sym;
  for (int i = 0; i < p->m->nsym; i++)
    if (p->m->sym[i].func < 0 && !strcmp(p->m->sym[i].name, name)) return i;
  return -1;
}

/* the scope depth of a symbol find_symbol returned: its declaration's in the function, 0 at module scope */
static int sym_depth(const parser *p, int sym) {
  for (int i = p->nfsym - 1; i >= 0; i--)
    if (p->fsyms[i].sym == sym) return p->fsyms[i].depth;
  return 0;
}

static int push_fsym(parser *p, int sym) {
  p->fsyms = ptx_grow(p->fsyms, &p->capfsym, p->nfsym + 1, sizeof *p->fsyms);
  if (!p->fsyms) return -1;
  p->fsyms[p->nfsym].sym = sym;
  p->fsyms[p->nfsym].depth = p->depth;
  p->nfsym++;
  return 0;
}

/* A variable declaration after its state space word: [.align N] [.v2|.v4] .type name [\[N\]] [= init] ;
 * func < 0: module scope. Returns the symbol index. */
static int variable(parser *p, uint8_t space, int func, int is_extern) {
  ptx_symbol s;
  memset(&s, 0, sizeof s);
  s.space = space;
  s.func = func;
  s.formal = -1;
  s.align = 0;
  int line = peek(p)->line, vec = 1;
  ptx_type t = T_NONE;
  for (;;) {
    token *tk = peek(p);
    if (is_word(tk, ".align")) {
      next(p);
      int64_t a;
      if (parse_int(next(p), &a) != 0 || a <= 0 || (a & (a - 1))) return fail(p, line, "bad .align");
      s.align = (uint32_t)a;
    } else if (is_word(tk, ".v2") || is_word(tk, ".v4")) {
      vec = tk->s[2] - '0';
      next(p);
    } else if (tk->kind == TK_ID && tk->s[0] == '.') {
      char w[32];
      tkcopy(tk, w, sizeof w);
      t = type_of(w + 1);
      if (t == T_NONE || t == T_PRED) return fail(p, line, "unknown variable attribute %s", w);
      next(p);
      break;
    } else {
      return fail(p, line, "expected a type in a variable declaration");
    }
  }
  token *nm = next(p);
  if (nm->kind != TK_ID) return fail(p, line, "expected a variable name");
  tkcopy(nm, s.name, sizeof s.name);
  const uint64_t el = (uint64_t)(ptx_type_bits(t) / 8) * (uint64_t)vec;
  s.size = el;
  if (!s.align) s.align = (uint32_t)el;
  if (is_punct(peek(p), '[')) {
    next(p);
    if (is_punct(peek(p), ']')) {
      next(p);
      s.size = 0;
      s.dynamic = 1;
      if (!(is_extern && space == SP_SHARED))
        return fail(p, line, "an array of unknown size that is not .extern .shared");
    } else {
      int64_t n;
      if (parse_int(next(p), &n) != 0 || n <= 0) return fail(p, line, "bad array size");
      s.size = el * (uint64_t)n;
      if (expect(p, ']')) return -1;
    }
  }
  if (is_punct(peek(p), '=')) {
    next(p);
    if (space != SP_GLOBAL && space != SP_CONST) return fail(p, line, "an initialiser on a %s variable", s.name);
    s.init = calloc(1, s.size ? s.size : 1);
    if (!s.init) return fail(p, line, "out of memory");
    const int brace = is_punct(peek(p), '{');
    if (brace) next(p);
    for (uint64_t off = 0;; off += el) {
      token *v = next(p);
      int negv = 0;
      if (is_punct(v, '-')) {
        negv = 1;
        v = next(p);
      }
      int64_t iv;
      uint64_t fb;
      uint8_t fk;
      if (off + el > s.size) return fail(p, line, "too many initialisers for %s", s.name);
      if (t == T_F32 || t == T_F64) {
        if (parse_float(v, &fb, &fk) != 0) {
          if (parse_int(v, &iv) != 0) return fail(p, line, "bad initialiser");
          double d = (double)iv;
          memcpy(&fb, &d, 8);
          fk = 2;
        }
        if (t == T_F32) {
          float f;
          if (fk == 2) {
            double d;
            memcpy(&d, &fb, 8);
            f = (float)(negv ? -d : d);
          } else {
            memcpy(&f, &fb, 4);
            if (negv) f = -f;
          }
          memcpy(s.init + off, &f, 4);
        } else {
          double d;
          if (fk == 1) {
            float f;
            uint32_t b32 = (uint32_t)fb;
            memcpy(&f, &b32, 4);
            d = f;
          } else {
            memcpy(&d, &fb, 8);
          }
          if (negv) d = -d;
          memcpy(s.init + off, &d, 8);
        }
      } else {
        if (parse_int(v, &iv) != 0) return fail(p, line, "bad initialiser '%.*s'", v->len, v->s);
        if (negv) iv = -iv;
        memcpy(s.init + off, &iv, (size_t)el); /* little-endian: the low bytes */
      }
      if (!brace) break;
      if (is_punct(peek(p), ',')) {
        next(p);
        continue;
      }
      if (expect(p, '}')) return -1;
      break;
    }
  }
  if (expect(p, ';')) return -1;
  int idx = add_symbol(p, &s);
  if (idx < 0) return fail(p, line, "out of memory");
  return idx;
}

/* ---- operands ---- */

static const struct {
  const char *name;
  int id, comps;
} SREGS[] = {{"%tid", S_TID, 3},          {"%ntid", S_NTID, 3},         {"%ctaid", S_CTAID, 3},
             {"%nctaid", S_NCTAID, 3},    {"%laneid", S_LANEID, 0},     {"%warpid", S_WARPID, 0},
             {"%nwarpid", S_NWARPID, 0},  {"%smid", S_SMID, 0},         {"%nsmid", S_NSMID, 0},
             {"%clock", S_CLOCK, 0},      {"%clock64", S_CLOCK64, 0},   {"%lanemask_eq", S_LANEMASK_EQ, 0},
             {"%lanemask_lt", S_LANEMASK_LT, 0}, {"%lanemask_le", S_LANEMASK_LE, 0},
             {"%lanemask_gt", S_LANEMASK_GT, 0}, {"%lanemask_ge", S_LANEMASK_GE, 0},
             {"%dynamic_smem_size", S_DYNSMEM, 0}, {"%total_smem_size", S_TOTALSMEM, 0}, {"%gridid", S_GRIDID, 0}};

static int reg_operand(parser *p, const token *t, ptx_operand *o) {
  char name[64];
  tkcopy(t, name, sizeof name);
  if (!strcmp(name, "_")) {
    o->kind = K_SINK;
    return 0;
  }
  if (name[0] == '%') {
    for (size_t i = 0; i < sizeof SREGS / sizeof SREGS[0]; i++) {
      const size_t l = strlen(SREGS[i].name);
      if (!strncmp(name, SREGS[i].name, l) && (name[l] == '\0' || (name[l] == '.' && SREGS[i].comps))) {
        if (find_reg(p, name) >= 0) break; /* a declared register of that name */
        o->kind = K_SREG;
        o->reg = SREGS[i].id;
        if (name[l] == '.') {
          const char c = name[l + 1];
          if ((c != 'x' && c != 'y' && c != 'z') || name[l + 2])
            return fail(p, t->line, "bad special register %s", name);
          o->comp = (uint8_t)(c - 'x');
        }
        return 0;
      }
    }
    const int r = find_reg(p, name);
    if (r < 0) return fail(p, t->line, "undeclared register %s", name);
    o->kind = K_REG;
    o->reg = r;
    return 0;
  }
  /* a register declared without '%' (inline asm's scoped `{ .reg .pred p; ... }`), unless a symbol of a deeper
   * scope shadows it */
  int rdepth = 0;
  const int r = find_reg_at(p, name, &rdepth);
  const int s = find_symbol(p, name);
  if (r >= 0 && (s < 0 || rdepth >= sym_depth(p, s))) {
    o->kind = K_REG;
    o->reg = r;
    return 0;
  }
  if (s >= 0) {
    o->kind = K_SYM;
    o->sym = s;
    return 0;
  }
  /* a label (branch target), resolved at the end of the function */
  o->kind = K_LABEL;
  o->sym = -1;
  return 1;
}

/* the registers of a vector after its '{', through its '}': up to 4 in o->vec, more in the module's vregs */
static int vector(parser *p, ptx_operand *o) {
  int32_t r32[256];
  int n = 0;
  for (;;) {
    token *a = next(p);
    ptx_operand r;
    memset(&r, 0, sizeof r);
    if (a->kind != TK_ID || reg_operand(p, a, &r) < 0 || (r.kind != K_REG && r.kind != K_SINK))
      return fail(p, a->line, "bad vector operand");
    if (n >= 255) return fail(p, a->line, "a vector of more than 255");
    r32[n++] = r.kind == K_SINK ? -1 : r.reg;
    token *c = next(p);
    if (is_punct(c, '}')) break;
    if (!is_punct(c, ',')) return fail(p, c->line, "bad vector operand");
  }
  o->n = (uint8_t)n;
  for (int i = 0; i < n && i < 4; i++) o->vec[i] = r32[i];
  if (n > 4) {
    int32_t *g = ptx_grow(p->m->vregs, &p->m->capvregs, p->m->nvregs + n, sizeof *g);
    if (!g) return fail(p, peek(p)->line, "out of memory");
    p->m->vregs = g;
    o->vx = p->m->nvregs;
    memcpy(g + p->m->nvregs, r32, (size_t)n * sizeof *g);
    p->m->nvregs += n;
  }
  return 0;
}

/* one operand; *label set when it names a label still to resolve */
static int operand(parser *p, ptx_operand *o, char *label, size_t llen) {
  memset(o, 0, sizeof *o);
  o->reg = -1;
  o->sym = -1;
  token *t = next(p);
  if (is_punct(t, '!')) {
    o->neg = 1;
    t = next(p);
  }
  if (is_punct(t, '[')) { /* [reg], [reg+imm], [sym], [sym+imm], [imm] */
    o->kind = K_ADDR;
    for (int first = 1;; first = 0) {
      token *a = next(p);
      int negv = 0;
      if (!first) {
        if (is_punct(a, ']')) break;
        if (!is_punct(a, '+') && !is_punct(a, '-')) return fail(p, a->line, "bad address expression");
        negv = is_punct(a, '-');
        a = next(p);
      }
      if (is_punct(a, '-')) {
        negv = !negv;
        a = next(p);
      }
      int64_t v;
      if (a->kind == TK_NUM && parse_int(a, &v) == 0) {
        o->imm += negv ? -v : v;
      } else if (a->kind == TK_ID && !negv) {
        ptx_operand r;
        memset(&r, 0, sizeof r);
        if (reg_operand(p, a, &r) < 0) return -1;
        if (r.kind == K_REG && o->reg < 0 && o->sym < 0) o->reg = r.reg;
        else if (r.kind == K_SYM && o->sym < 0 && o->reg < 0) o->sym = r.sym;
        else return fail(p, a->line, "bad address operand %.*s", a->len, a->s);
      } else {
        return fail(p, a->line, "bad address operand");
      }
      if (is_punct(peek(p), ',')) { /* [tensor-map, {coordinates}] */
        next(p);
        if (!is_punct(next(p), '{') || vector(p, o)) return fail(p, t->line, "bad [address, {coordinates}]");
        if (!is_punct(next(p), ']')) return fail(p, t->line, "bad [address, {coordinates}]");
        break;
      }
    }
    return 0;
  }
  if (is_punct(t, '{')) { /* {a, b, c, d} */
    o->kind = K_VEC;
    return vector(p, o);
  }
  int negv = 0;
  if (is_punct(t, '-')) {
    negv = 1;
    t = next(p);
  }
  if (t->kind == TK_NUM) {
    o->kind = K_IMM;
    int64_t v;
    uint64_t fb;
    if (parse_float(t, &fb, &o->fimm) == 0) {
      if (negv) fb ^= o->fimm == 1 ? 0x80000000ull : 0x8000000000000000ull;
      o->imm = (int64_t)fb;
    } else if (parse_int(t, &v) == 0) {
      o->imm = negv ? -v : v;
    } else {
      return fail(p, t->line, "bad number %.*s", t->len, t->s);
    }
    return 0;
  }
  if (t->kind == TK_ID && !negv) {
    const int r = reg_operand(p, t, o);
    if (r < 0) return -1;
    if (r == 1) tkcopy(t, label, llen);
    return 0;
  }
  return fail(p, t->line, "bad operand '%.*s'", t->len ? t->len : 1, t->len ? t->s : &t->c);
}

/* ---- instructions ---- */

static ptx_insn *new_insn(parser *p) {
  p->m->insn = ptx_grow(p->m->insn, &p->capinsn, p->m->ninsn + 1, sizeof *p->m->insn);
  if (!p->m->insn) return NULL;
  ptx_insn *in = &p->m->insn[p->m->ninsn];
  memset(in, 0, sizeof *in);
  in->guard = -1;
  in->func = p->cur_func;
  return in;
}

/* the instruction text of its tokens, for messages: a space between tokens but after [ { | @ ! and before , ] } | */
static void insn_text(parser *p, int from, int to, char *out, size_t len) {
  size_t n = 0;
  out[0] = '\0';
  for (int i = from; i < to && n + 1 < len; i++) {
    const token *t = &p->t[i], *prev = i > from ? &p->t[i - 1] : NULL;
    const int glue = !prev || (prev->kind == TK_PUNCT && strchr("[{|@!", prev->c)) ||
                     (t->kind == TK_PUNCT && strchr(",]}|", t->c));
    const int w = t->kind == TK_PUNCT ? snprintf(out + n, len - n, "%s%c", glue ? "" : " ", t->c)
                                      : snprintf(out + n, len - n, "%s%.*s", glue ? "" : " ", t->len, t->s);
    if (w < 0) break;
    n += (size_t)w;
    if (n >= len) n = len - 1;
  }
}

static int instruction(parser *p) {
  const int from = p->pos;
  token *t = peek(p);
  const int line = t->line;
  ptx_insn *in = new_insn(p);
  if (!in) return fail(p, line, "out of memory");
  const int idx = p->m->ninsn;
  in->line = line;
  if (is_punct(t, '@')) {
    next(p);
    token *g = next(p);
    if (is_punct(g, '!')) {
      in->guard_neg = 1;
      g = next(p);
    }
    char name[32];
    tkcopy(g, name, sizeof name);
    in->guard = find_reg(p, name);
    if (in->guard < 0 || p->m->func[p->cur_func].regbits[in->guard] != 1)
      return fail(p, line, "bad guard predicate %s", name);
  }
  token *opt = next(p);
  if (opt->kind != TK_ID) return fail(p, line, "expected an instruction");
  if (decode_opcode(p, opt, in)) return -1;
  if (in->op == OP_CALL) { /* call[.uni] [(ret),] func [, (args)] */
    in->nops = 0;
    if (is_punct(peek(p), '(')) {
      next(p);
      if (operand(p, &in->o[0], NULL, 0)) return -1;
      if (in->o[0].kind != K_SYM || expect(p, ')') || expect(p, ',')) return fail(p, line, "bad call return");
    } else {
      in->o[0].kind = K_NONE;
    }
    token *fn = next(p);
    p->calls = ptx_grow(p->calls, &p->capcall, p->ncall + 1, sizeof *p->calls);
    if (!p->calls || fn->kind != TK_ID) return fail(p, line, "bad call");
    tkcopy(fn, p->calls[p->ncall].name, sizeof p->calls[p->ncall].name);
    p->calls[p->ncall].insn = idx;
    p->calls[p->ncall].line = line;
    p->ncall++;
    in->nops = 2;
    if (is_punct(peek(p), ',')) {
      next(p);
      if (expect(p, '(')) return -1;
      while (!is_punct(peek(p), ')')) {
        if (in->nops >= PTX_MAXOPS) return fail(p, line, "a call with more than %d arguments", PTX_MAXOPS - 2);
        if (operand(p, &in->o[in->nops], NULL, 0)) return -1;
        if (in->o[in->nops].kind != K_SYM) return fail(p, line, "call arguments must be .param variables");
        in->nops++;
        if (is_punct(peek(p), ',')) next(p);
      }
      next(p);
    }
    if (expect(p, ';')) return -1;
    insn_text(p, from, p->pos - 1, in->text, sizeof in->text);
    p->m->ninsn++;
    return 0;
  }
  while (!is_punct(peek(p), ';')) {
    if (peek(p)->kind == TK_END) return fail(p, line, "unterminated instruction");
    if (in->nops >= PTX_MAXOPS) return fail(p, line, "too many operands");
    char label[64] = "";
    if (operand(p, &in->o[in->nops], label, sizeof label)) return -1;
    if (label[0]) {
      p->fixes = ptx_grow(p->fixes, &p->capfix, p->nfix + 1, sizeof *p->fixes);
      if (!p->fixes) return fail(p, line, "out of memory");
      snprintf(p->fixes[p->nfix].name, sizeof p->fixes[p->nfix].name, "%s", label);
      p->fixes[p->nfix].insn = idx;
      p->fixes[p->nfix].opnd = in->nops;
      p->fixes[p->nfix].line = line;
      p->fixes[p->nfix].depth = p->depth;
      p->fixes[p->nfix].target = -1;
      p->nfix++;
    }
    in->nops++;
    if (is_punct(peek(p), '|')) { /* shfl's d|p, setp's p|q: the second destination takes the next slot */
      next(p);
      if (in->nops >= PTX_MAXOPS || operand(p, &in->o[in->nops], NULL, 0)) return -1;
      in->nops++;
      in->flags |= F_PAIR;
    }
    if (is_punct(peek(p), ',')) {
      next(p);
    } else if (!is_punct(peek(p), ';')) {
      return fail(p, line, "expected ',' or ';' after an operand");
    }
  }
  next(p);
  insn_text(p, from, p->pos - 1, in->text, sizeof in->text);
  p->m->ninsn++;
  return 0;
}

/* ---- functions ---- */

/* A block's end. A label is visible in its own block only (inline asm pasted twice declares its labels twice):
 * the branches written in the block to its labels are resolved, the others left to the enclosing block. */
static void pop_scope(parser *p) {
  for (int i = 0; i < p->nfix; i++) {
    struct fix *x = &p->fixes[i];
    if (x->target >= 0 || x->depth < p->depth) continue;
    for (int j = p->nlabel - 1; j >= 0 && p->labels[j].depth >= p->depth; j--)
      if (!strcmp(p->labels[j].name, x->name)) {
        x->target = p->labels[j].insn;
        break;
      }
    x->depth = p->depth - 1;
  }
  while (p->nlabel > 0 && p->labels[p->nlabel - 1].depth >= p->depth) p->nlabel--;
  while (p->ndecl > 0 && p->decls[p->ndecl - 1].depth >= p->depth) p->ndecl--;
  while (p->nfsym > 0 && p->fsyms[p->nfsym - 1].depth >= p->depth) p->nfsym--;
  p->depth--;
}

/* a parameter list ( .param .type name [, ...] ); formal >= 0 numbers them; -2 for the return value */
static int param_list(parser *p, int fidx, int is_ret) {
  if (expect(p, '(')) return -1;
  ptx_func *f = &p->m->func[fidx];
  while (!is_punct(peek(p), ')')) {
    token *t = next(p);
    if (!is_word(t, ".param") && !is_word(t, ".reg")) return fail(p, t->line, "expected .param in a parameter list");
    if (is_word(t, ".reg")) return fail(p, t->line, ".reg parameters are not supported");
    ptx_symbol s;
    memset(&s, 0, sizeof s);
    s.space = SP_PARAM;
    s.func = fidx;
    ptx_type ty = T_NONE;
    uint32_t align = 0;
    for (;;) {
      token *a = next(p);
      if (is_word(a, ".align")) {
        int64_t v;
        if (parse_int(next(p), &v) || v <= 0) return fail(p, a->line, "bad .align");
        align = (uint32_t)v;
        continue;
      }
      if (is_word(a, ".ptr") || is_word(a, ".global") || is_word(a, ".shared") || is_word(a, ".const") ||
          is_word(a, ".local"))
        continue; /* pointer attributes of kernel parameters: no effect on the bytes */
      char w[32];
      tkcopy(a, w, sizeof w);
      ty = w[0] == '.' ? type_of(w + 1) : T_NONE;
      if (ty == T_NONE || ty == T_PRED) return fail(p, a->line, "bad parameter type %s", w);
      break;
    }
    token *nm = next(p);
    if (nm->kind != TK_ID) return fail(p, nm->line, "expected a parameter name");
    tkcopy(nm, s.name, sizeof s.name);
    s.size = (uint64_t)ptx_type_bits(ty) / 8;
    if (is_punct(peek(p), '[')) {
      next(p);
      int64_t n;
      if (parse_int(next(p), &n) || n <= 0 || expect(p, ']')) return fail(p, nm->line, "bad parameter array");
      s.size *= (uint64_t)n;
    }
    s.align = align ? align : (uint32_t)(ptx_type_bits(ty) / 8);
    f->param_size = (f->param_size + s.align - 1) / s.align * s.align;
    s.addr = f->param_size;
    f->param_size += s.size;
    s.formal = is_ret ? -2 : f->nformal;
    const int si = add_symbol(p, &s);
    f = &p->m->func[fidx];
    if (si < 0) return fail(p, nm->line, "out of memory");
    if (is_ret) {
      f->retsym = si;
    } else {
      int *nf = realloc(f->formal, (size_t)(f->nformal + 1) * sizeof *nf);
      if (!nf) return fail(p, nm->line, "out of memory");
      f->formal = nf;
      f->formal[f->nformal++] = si;
    }
    if (is_punct(peek(p), ',')) next(p);
  }
  next(p);
  return 0;
}

static int find_func(parser *p, const char *name) {
  for (int i = 0; i < p->m->nfunc; i++)
    if (!strcmp(p->m->func[i].name, name)) return i;
  return -1;
}

static int function(parser *p, int entry) {
  const int line = peek(p)->line;
  int retfirst = 0;
  /* .func (.param ... retval) name (params) */
  if (!entry && is_punct(peek(p), '(')) retfirst = 1;
  p->m->func = ptx_grow(p->m->func, &p->capfunc, p->m->nfunc + 1, sizeof *p->m->func);
  if (!p->m->func) return fail(p, line, "out of memory");
  int fidx = p->m->nfunc;
  ptx_func *f = &p->m->func[fidx];
  memset(f, 0, sizeof *f);
  f->entry = entry;
  f->retsym = -1;
  p->m->nfunc++;
  if (retfirst && param_list(p, fidx, 1)) return -1;
  token *nm = next(p);
  if (nm->kind != TK_ID) return fail(p, line, "expected a function name");
  char name[80];
  tkcopy(nm, name, sizeof name);
  const int prev = find_func(p, name);
  if (prev >= 0 && prev != fidx) { /* a body for an earlier prototype: parse into a fresh slot, drop the old */
    if (p->m->func[prev].defined) return fail(p, line, "function %s defined twice", name);
    snprintf(p->m->func[prev].name, sizeof p->m->func[prev].name, "(prototype of %.60s)", name);
  }
  f = &p->m->func[fidx];
  snprintf(f->name, sizeof f->name, "%s", name);
  if (is_punct(peek(p), '(') && param_list(p, fidx, 0)) return -1;
  f = &p->m->func[fidx];
  f->formal_size = f->param_size;
  for (;;) { /* performance directives */
    token *d = peek(p);
    if (is_word(d, ".maxntid") || is_word(d, ".reqntid")) {
      next(p);
      int64_t v, prod = 1;
      for (;;) {
        if (parse_int(next(p), &v)) return fail(p, d->line, "bad %.*s", d->len, d->s);
        prod *= v;
        if (!is_punct(peek(p), ',')) break;
        next(p);
      }
      p->m->func[fidx].maxntid = (int)prod;
    } else if (is_word(d, ".minnctapersm") || is_word(d, ".maxnreg") || is_word(d, ".maxclusterrank")) {
      next(p);
      int64_t v;
      if (parse_int(next(p), &v)) return fail(p, d->line, "bad %.*s", d->len, d->s);
    } else if (is_word(d, ".noreturn")) {
      next(p);
    } else {
      break;
    }
  }
  if (is_punct(peek(p), ';')) { /* a prototype */
    next(p);
    return 0;
  }
  if (expect(p, '{')) return -1;
  f = &p->m->func[fidx];
  f->defined = 1;
  f->first = p->m->ninsn;
  p->cur_func = fidx;
  p->depth = 1;
  p->ndecl = p->nfsym = p->nlabel = p->nfix = 0;
  for (int i = 0; i < p->m->nsym; i++) /* the parameters are in scope */
    if (p->m->sym[i].func == fidx && push_fsym(p, i)) return fail(p, line, "out of memory");
  while (p->depth > 0) {
    token *t = peek(p);
    if (p->failed) return -1;
    if (t->kind == TK_END) return fail(p, t->line, "unterminated function %s", name);
    if (is_punct(t, '{')) {
      next(p);
      p->depth++;
      continue;
    }
    if (is_punct(t, '}')) {
      next(p);
      pop_scope(p);
      continue;
    }
    if (is_word(t, ".reg")) {
      next(p);
      token *ty = next(p);
      char w[32];
      tkcopy(ty, w, sizeof w);
      if (!strcmp(w, ".v2") || !strcmp(w, ".v4")) return fail(p, t->line, "vector registers are not supported");
      const ptx_type rt = w[0] == '.' ? type_of(w + 1) : T_NONE;
      if (rt == T_NONE) return fail(p, t->line, "bad register type %s", w);
      for (;;) {
        token *rn = next(p);
        char rname[32];
        tkcopy(rn, rname, sizeof rname);
        if (rn->kind != TK_ID) return fail(p, rn->line, "bad register declaration");
        int count = -1;
        if (is_punct(peek(p), '<')) {
          next(p);
          int64_t c;
          if (parse_int(next(p), &c) || c <= 0 || expect(p, '>')) return fail(p, rn->line, "bad register count");
          count = (int)c;
        }
        if (add_regs(p, rn->line, rname, count, rt)) return -1;
        if (is_punct(peek(p), ',')) {
          next(p);
          continue;
        }
        if (expect(p, ';')) return -1;
        break;
      }
      continue;
    }
    if (is_word(t, ".local") || is_word(t, ".param") || is_word(t, ".shared")) {
      next(p);
      const uint8_t sp = is_word(t, ".local") ? SP_LOCAL : is_word(t, ".param") ? SP_PARAM : SP_SHARED;
      const int si = variable(p, sp, sp == SP_SHARED ? -1 : fidx, 0);
      if (si < 0) return -1;
      ptx_symbol *s = &p->m->sym[si];
      f = &p->m->func[fidx];
      if (sp == SP_LOCAL) {
        f->local_size = (f->local_size + s->align - 1) / s->align * s->align;
        s->addr = f->local_size;
        f->local_size += s->size;
      } else if (sp == SP_PARAM) {
        f->param_size = (f->param_size + s->align - 1) / s->align * s->align;
        s->addr = f->param_size;
        f->param_size += s->size;
      }
      if (sp != SP_SHARED && push_fsym(p, si)) return fail(p, t->line, "out of memory");
      continue;
    }
    if (is_word(t, ".pragma")) {
      next(p);
      while (!is_punct(peek(p), ';') && peek(p)->kind != TK_END) next(p);
      next(p);
      continue;
    }
    if (t->kind == TK_ID && t->s[0] == '.')
      return fail(p, t->line, "unknown directive %.*s in a function", t->len, t->s);
    if (t->kind == TK_ID && is_punct(&p->t[p->pos + 1], ':')) {
      p->labels = ptx_grow(p->labels, &p->caplabel, p->nlabel + 1, sizeof *p->labels);
      if (!p->labels) return fail(p, t->line, "out of memory");
      tkcopy(t, p->labels[p->nlabel].name, sizeof p->labels[p->nlabel].name);
      for (int j = p->nlabel - 1; j >= 0 && p->labels[j].depth == p->depth; j--)
        if (!strcmp(p->labels[j].name, p->labels[p->nlabel].name))
          return fail(p, t->line, "label %s declared twice in one block", p->labels[j].name);
      p->labels[p->nlabel].insn = p->m->ninsn;
      p->labels[p->nlabel].depth = p->depth;
      p->nlabel++;
      next(p);
      next(p);
      continue;
    }
    if (instruction(p)) return -1;
  }
  f = &p->m->func[fidx];
  f->count = p->m->ninsn - f->first;
  if (f->count == 0 || (p->m->insn[p->m->ninsn - 1].op != OP_RET && p->m->insn[p->m->ninsn - 1].op != OP_EXIT &&
                        p->m->insn[p->m->ninsn - 1].op != OP_BRA))
    return fail(p, line, "function %s does not end in ret, exit or bra", name);
  for (int i = 0; i < p->nfix; i++) { /* the function's closing brace resolved what its labels could */
    const int found = p->fixes[i].target;
    if (found < 0) return fail(p, p->fixes[i].line, "unknown label or symbol %s", p->fixes[i].name);
    ptx_insn *in = &p->m->insn[p->fixes[i].insn];
    if (in->op != OP_BRA) return fail(p, p->fixes[i].line, "unknown symbol %s", p->fixes[i].name);
    in->o[p->fixes[i].opnd].sym = found;
  }
  return 0;
}

/* ---- the module ---- */

/* Checks each instruction's operand count and kinds once, so that execution can trust them. */
static int check_insn(parser *p, ptx_insn *in) {
  const int n = in->nops;
  int want = -1;
  switch ((ptx_op)in->op) {
  case OP_RET: case OP_EXIT: case OP_CPCOMMIT: case OP_CPWAITALL: case OP_MEMBAR: case OP_FENCE: case OP_WGFENCE:
  case OP_WGCOMMIT: case OP_BULKCOMMIT: want = 0; break;
  case OP_WGWAIT: case OP_BULKWAIT:
    if (n != 1 || in->o[0].kind != K_IMM) return fail(p, in->line, "%s: an immediate operand expected", in->text);
    break;
  case OP_SETMAXNREG:
    if (n != 1 || in->o[0].kind != K_IMM) return fail(p, in->line, "%s: an immediate operand expected", in->text);
    if (in->o[0].imm % 8 || in->o[0].imm < 24 || in->o[0].imm > 256)
      return fail(p, in->line, "%s: a register count of %lld (a multiple of 8 from 24 to 256)", in->text,
                  (long long)in->o[0].imm);
    break;
  case OP_NOP: break;
  case OP_ELECT:
    if (n != 3 || !(in->flags & F_PAIR)) return fail(p, in->line, "%s: elect.sync d|p, membermask", in->text);
    break;
  case OP_STMATRIX:
    if (n != 2 || in->o[0].kind != K_ADDR || in->o[0].n || in->o[1].kind != K_VEC || in->o[1].n != in->num)
      return fail(p, in->line, "%s: stmatrix [address], {%d registers}", in->text, in->num);
    break;
  case OP_WGMMA: {
    const int regA = n == 7;
    if ((n != 7 && n != 8) || in->o[0].kind != K_VEC || in->o[0].n != in->num * 4 ||
        (regA ? in->o[1].kind != K_VEC || in->o[1].n != 4 : in->o[1].kind != K_REG) || in->o[2].kind != K_REG ||
        (in->o[3].kind != K_REG && in->o[3].kind != K_IMM))
      return fail(p, in->line, "%s: wgmma {%d accumulators}, a-desc or {4 registers}, b-desc, scale-d, imm-scale-a, "
                  "imm-scale-b, [imm-trans-a,] imm-trans-b", in->text, in->num * 4);
    for (int i = 4; i < n; i++)
      if (in->o[i].kind != K_IMM) return fail(p, in->line, "%s: operand %d must be an immediate", in->text, i + 1);
    for (int i = 0; i < in->o[0].n; i++)
      if (ptx_vreg(p->m, &in->o[0], i) < 0) return fail(p, in->line, "%s: an accumulator is the sink _", in->text);
    break;
  }
  case OP_MBAR: {
    const int addr = in->mode == MB_INIT || in->mode == MB_EXPECT_TX || in->mode == MB_INVAL ? 0 : 1;
    const int lo = in->mode == MB_INVAL ? 1 : in->mode == MB_INIT || in->mode == MB_EXPECT_TX ? 2 : 2;
    const int hi = in->mode == MB_INVAL ? 1 : in->mode == MB_INIT || in->mode == MB_EXPECT_TX ? 2
                   : in->mode == MB_ARRIVE ? 3 : in->mode == MB_TRY_WAIT ? 4 : 3;
    if (n < lo || n > hi || in->o[addr].kind != K_ADDR || in->o[addr].n ||
        ((in->mode == MB_TRY_WAIT || in->mode == MB_TEST_WAIT) && n < 3) ||
        ((in->flags & F_EXPECTTX) && n != 3))
      return fail(p, in->line, "%s: operands", in->text);
    break;
  }
  case OP_TMA: {
    const int ld = in->mode == 1, extra = !!(in->flags & F_HI) + !!(in->flags & F_LO);
    if (!in->num) { /* cp.async.bulk [dst], [src], size[, [mbar]] */
      if (n != (ld ? 4 : 3) + extra || in->o[0].kind != K_ADDR || in->o[1].kind != K_ADDR ||
          (in->o[2].kind != K_REG && in->o[2].kind != K_IMM) || (ld && in->o[3].kind != K_ADDR))
        return fail(p, in->line, "%s: [dst], [src], size, [mbarrier] (loads) or [dst], [src], size (stores)",
                    in->text);
      break;
    }
    const ptx_operand *map = &in->o[ld ? 1 : 0];
    if (n != (ld ? 3 : 2) + extra || map->kind != K_ADDR || map->n != in->num || in->o[ld ? 0 : 1].kind != K_ADDR ||
        (ld && in->o[2].kind != K_ADDR))
      return fail(p, in->line, "%s: [dst], [tensor-map, {%d coordinates}], [mbarrier] (loads) or [tensor-map, "
                  "{coordinates}], [src] (stores)", in->text, in->num);
    for (int i = 0; i < map->n; i++)
      if (ptx_vreg(p->m, map, i) < 0) return fail(p, in->line, "%s: a coordinate is the sink _", in->text);
    break;
  }
  case OP_BRA: case OP_CPWAIT: case OP_BARWARP: want = 1; break;
  case OP_BAR: if (n < 1 || n > 2) return fail(p, in->line, "bar.sync takes 1 or 2 operands"); break;
  case OP_BARARRIVE: want = 2; break;
  case OP_CVT:
    want = in->type == T_F16X2 || in->type == T_BF16X2 ? 3 : 2;
    break;
  case OP_MOV: case OP_LD: case OP_ST: case OP_CVTA: case OP_NEG: case OP_ABS: case OP_NOT:
  case OP_CNOT: case OP_POPC: case OP_CLZ: case OP_BREV: case OP_RCP: case OP_SQRT: case OP_RSQRT: case OP_EX2:
  case OP_LG2: case OP_SIN: case OP_COS: case OP_TANH: case OP_TESTP: case OP_LDMATRIX: want = 2; break;
  case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_REM: case OP_MIN: case OP_MAX: case OP_AND:
  case OP_OR: case OP_XOR: case OP_SHL: case OP_SHR: case OP_COPYSIGN: case OP_ADDC: case OP_SUBC: case OP_MUL24:
  case OP_FNS:
    want = 3;
    break;
  case OP_MAD: case OP_FMA: case OP_SELP: case OP_BFE: case OP_PRMT: case OP_MADC: case OP_MAD24: want = 4; break;
  case OP_BFI: want = 5; break;
  case OP_LOP3: want = 5; break;
  case OP_MMA: want = 4; break;
  case OP_SETP:
    if (n != 3 && n != 4 && n != 5) return fail(p, in->line, "setp takes 3 to 5 operands");
    break;
  case OP_SET: want = in->bop ? 4 : 3; break;
  case OP_SHFL: if (n != 5 && n != 6) return fail(p, in->line, "shfl.sync takes d[|p], a, b, c, mask"); break;
  case OP_VOTE: want = 3; break;
  case OP_BARRED: want = 3; break;
  case OP_CPASYNC: if (n != 3 && n != 4) return fail(p, in->line, "cp.async takes 3 or 4 operands"); break;
  case OP_ATOM: if (n != 3 && n != 4) return fail(p, in->line, "atom takes 3 or 4 operands"); break;
  case OP_RED: want = 2; break;
  case OP_CALL: break;
  case OP_COUNT: return fail(p, in->line, "unknown instruction");
  }
  if (want >= 0 && n != want)
    return fail(p, in->line, "%s: %d operands, %d expected", in->text, n, want);
  if (in->op != OP_TMA)
    for (int i = 0; i < n; i++)
      if (in->o[i].kind == K_ADDR && in->o[i].n) return fail(p, in->line, "%s: coordinates in an address", in->text);
  if ((in->op == OP_LD || in->op == OP_LDMATRIX) && in->o[1].kind != K_ADDR)
    return fail(p, in->line, "%s: the source must be an address", in->text);
  if ((in->op == OP_ST) && in->o[0].kind != K_ADDR)
    return fail(p, in->line, "%s: the target must be an address", in->text);
  if (in->vec && ((in->op == OP_LD && (in->o[0].kind != K_VEC || in->o[0].n != in->vec)) ||
                  (in->op == OP_ST && (in->o[1].kind != K_VEC || in->o[1].n != in->vec))))
    return fail(p, in->line, "%s: vector width and operand differ", in->text);
  if (in->op == OP_MMA) {
    const int k = in->num, ab16 = in->mma_ab == T_F16 || in->mma_ab == T_BF16;
    if (!ab16 || in->type != T_F32 || in->type2 != T_F32)
      return fail(p, in->line, "%s: unsupported mma types", in->text);
    const int na = k == 16 ? 4 : 2, nb = k == 16 ? 2 : 1;
    if (in->o[0].kind != K_VEC || in->o[0].n != 4 || in->o[1].kind != K_VEC || in->o[1].n != na ||
        in->o[2].kind != K_VEC || in->o[2].n != nb || in->o[3].kind != K_VEC || in->o[3].n != 4)
      return fail(p, in->line, "%s: operand shapes", in->text);
  }
  if (in->op == OP_LDMATRIX && (in->o[0].kind != K_VEC || in->o[0].n != in->num))
    return fail(p, in->line, "%s: %d destination registers expected", in->text, in->num);
  if (in->op == OP_CPASYNC && (in->o[0].kind != K_ADDR || in->o[1].kind != K_ADDR || in->o[2].kind != K_IMM))
    return fail(p, in->line, "%s: cp.async [dst], [src], size[, src-size]", in->text);
  if (in->op == OP_BRA && in->o[0].kind != K_LABEL) return fail(p, in->line, "%s: branch to a label", in->text);
  if ((in->op == OP_LD || in->op == OP_ST || in->op == OP_ATOM || in->op == OP_RED) && in->type == T_NONE)
    return fail(p, in->line, "%s: no type", in->text);
  return 0;
}

/* The FAST_* form of an instruction, or FAST_NONE. */
static uint8_t fast_form(const ptx_insn *in) {
  if (in->flags & (F_SAT | F_CC | F_PAIR | F_APPROX | F_WIDE | F_HI)) return FAST_NONE;
  const ptx_type t = (ptx_type)in->type;
  const int f32 = t == T_F32, integer = !ptx_type_is_float(t) && t != T_PRED && ptx_type_bits(t) >= 8 &&
                                        ptx_type_bits(t) <= 64;
  if (in->o[0].kind != K_REG) return FAST_NONE;
  for (int i = 1; i < in->nops; i++) {
    const ptx_operand *o = &in->o[i];
    if (o->kind == K_REG && !o->neg) continue;
    if (o->kind == K_IMM && (f32 ? o->fimm == 1 : o->fimm == 0)) continue;
    return FAST_NONE;
  }
  if (f32 && (in->rnd == R_NONE || in->rnd == R_RN)) {
    if (in->op == OP_FMA && in->nops == 4) return FAST_F32_FMA;
    if (in->op == OP_ADD && in->nops == 3) return FAST_F32_ADD;
    if (in->op == OP_SUB && in->nops == 3) return FAST_F32_SUB;
    if (in->op == OP_MUL && in->nops == 3) return FAST_F32_MUL;
  }
  if (integer && in->nops == 3 && !(in->flags & F_FTZ)) {
    if (in->op == OP_ADD) return FAST_INT_ADD;
    if (in->op == OP_SUB) return FAST_INT_SUB;
    if (in->op == OP_SHL) return FAST_INT_SHL;
    if (in->op == OP_AND) return FAST_INT_AND;
    if (in->op == OP_OR) return FAST_INT_OR;
    if (in->op == OP_XOR) return FAST_INT_XOR;
  }
  if (in->op == OP_MOV && in->nops == 2 && in->o[1].kind == K_REG && !in->o[1].neg) return FAST_MOV;
  return FAST_NONE;
}

ptx_module *ptx_parse(const char *text, char *err, size_t errlen) {
  parser p;
  memset(&p, 0, sizeof p);
  p.text = text;
  p.err = err;
  p.errlen = errlen;
  if (errlen) err[0] = '\0';
  p.m = calloc(1, sizeof *p.m);
  if (!p.m) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  p.m->dyn_align = 16;
  if (tokenize(&p)) goto done;
  int is_extern = 0;
  while (!p.failed && peek(&p)->kind != TK_END) {
    token *t = next(&p);
    if (is_word(t, ".version") || is_word(t, ".address_size")) {
      token *v = next(&p);
      if (is_word(t, ".address_size") && !(v->len == 2 && !strncmp(v->s, "64", 2))) {
        fail(&p, t->line, "only 64-bit addresses are supported");
      }
      continue;
    }
    if (is_word(t, ".target")) {
      for (;;) {
        token *v = next(&p);
        if (v->kind == TK_ID && v->len > 3 && !strncmp(v->s, "sm_", 3)) p.m->target_sm = atoi(v->s + 3);
        if (!is_punct(peek(&p), ',')) break;
        next(&p);
      }
      continue;
    }
    if (is_word(t, ".visible") || is_word(t, ".weak") || is_word(t, ".common")) continue;
    if (is_word(t, ".extern")) {
      is_extern = 1;
      continue;
    }
    if (is_word(t, ".global") || is_word(t, ".shared") || is_word(t, ".const")) {
      const uint8_t sp = is_word(t, ".global") ? SP_GLOBAL : is_word(t, ".shared") ? SP_SHARED : SP_CONST;
      if (variable(&p, sp, -1, is_extern) < 0) goto done;
      is_extern = 0;
      continue;
    }
    if (is_word(t, ".entry") || is_word(t, ".func")) {
      if (function(&p, is_word(t, ".entry"))) goto done;
      is_extern = 0;
      continue;
    }
    fail(&p, t->line, "unknown directive %.*s", t->len ? t->len : 1, t->len ? t->s : &t->c);
  }
  if (p.failed) goto done;
  for (int i = 0; i < p.ncall; i++) {
    const int f = find_func(&p, p.calls[i].name);
    if (f < 0 || !p.m->func[f].defined) {
      fail(&p, p.calls[i].line, "call to %s, which the module does not define", p.calls[i].name);
      goto done;
    }
    p.m->insn[p.calls[i].insn].o[1].kind = K_LABEL;
    p.m->insn[p.calls[i].insn].o[1].sym = f;
  }
  /* shared variables: static ones first, the dynamic array after them */
  for (int i = 0; i < p.m->nsym; i++) {
    ptx_symbol *s = &p.m->sym[i];
    if (s->space != SP_SHARED || s->dynamic) continue;
    p.m->static_shared = (p.m->static_shared + s->align - 1) / s->align * s->align;
    s->addr = p.m->static_shared;
    p.m->static_shared += s->size;
  }
  for (int i = 0; i < p.m->nsym; i++) {
    ptx_symbol *s = &p.m->sym[i];
    if (s->space == SP_SHARED && s->dynamic) {
      if (s->align > p.m->dyn_align) p.m->dyn_align = s->align;
    }
  }
  /* the dynamic array at its declared alignment (the swizzled layouts of TMA and wgmma need 1024) */
  p.m->dyn_base = (p.m->static_shared + p.m->dyn_align - 1) / p.m->dyn_align * p.m->dyn_align;
  for (int i = 0; i < p.m->nsym; i++)
    if (p.m->sym[i].space == SP_SHARED && p.m->sym[i].dynamic) p.m->sym[i].addr = p.m->dyn_base;
  for (int i = 0; i < p.m->ninsn; i++) {
    ptx_insn *in = &p.m->insn[i];
    if (check_insn(&p, in)) goto done;
    in->fast = fast_form(in);
  }
done: /* p.failed says which */
  free(p.t);
  free(p.decls);
  free(p.fsyms);
  free(p.labels);
  free(p.fixes);
  free(p.calls);
  if (p.failed) {
    ptx_module_free(p.m);
    return NULL;
  }
  return p.m;
}

void ptx_module_free(ptx_module *m) {
  if (!m) return;
  for (int i = 0; i < m->nsym; i++) free(m->sym[i].init);
  for (int i = 0; i < m->nfunc; i++) {
    free(m->func[i].regbits);
    free(m->func[i].regmask);
    free(m->func[i].regname);
    free(m->func[i].formal);
  }
  free(m->insn);
  free(m->vregs);
  free(m->sym);
  free(m->func);
  free(m);
}
