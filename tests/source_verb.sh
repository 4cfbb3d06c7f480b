#!/bin/sh
# source_verb.sh CASE ATTNTUNE WORKDIR [SOURCE_VERB_PLAN]: `attntune source SPEC` (tests/source_verb.cmake).
#   cpu    what it prints is, byte for byte, what the runtime hands the C compiler for that spec's plan (a stand-in
#          compiler keeps its input and fails): forward, counting build, flash and lowrank backward
#   cuda   the CUDA source carries the spec's #defines; --arch, --counting, --pass bwd's dq=atomic
#   ptx    NVRTC's PTX: attn_kernel's entry and the arch's .target (exit 77 without NVRTC)
#   usage  exit 2 with the reason for a bad spec, a refused one, bad options; no NVRTC: exit 1, one line; the help,
#          the verb list and the manual page
set -u
case_=$1 T=$2 W=$3 PLAN=${4:-}
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
# the spec's fields past those given are 0; unroll=4 and d_v != d are not what the defaults would give
FWD="flash cpu f32 d=24 br=16 bc=32 causal=1 unroll=4 warps=0 stages=0 arch=- tile=0 feature=taylor degree=2 rank=0 seed=0"
CUDA="flash cuda f16 d=80 dv=48 br=64 bc=32 causal=1 warps=4 stages=1 arch=sm_80"

# expect CODE PATTERN ARGS...: `attntune source ARGS` exits CODE, nothing on stdout, one stderr line matching PATTERN
expect() {
  code=$1 pat=$2
  shift 2
  "$T" source "$@" >"$W/so.txt" 2>"$out"
  rc=$?
  [ "$rc" -eq "$code" ] || fail "source $*: exit $rc, want $code"
  [ ! -s "$W/so.txt" ] || fail "source $*: wrote to stdout"
  [ "$(wc -l <"$out")" -eq 1 ] && grep -Eq -- "$pat" "$out" || fail "source $*: not one line matching '$pat'"
}

case $case_ in
cpu)
  printf '#!/bin/sh\nfor a; do case $a in *.c) cp "$a" "$CAPTURE" ;; esac; done\nexit 1\n' >"$W/cc"
  chmod +x "$W/cc"
  mkdir -m 700 "$W/cache"
  # compiled: the source the runtime gives the compiler for SPEC's plan (COUNT_IO, PASS) into $W/got.c
  compiled() {
    rm -f "$W/got.c"
    CC=$W/cc CAPTURE=$W/got.c ATTN_CACHE_DIR=$W/cache "$PLAN" "$W/none.db" "$1" "$2" "$3" >"$out" 2>&1
    rc=$?
    [ "$rc" -eq 3 ] && [ -s "$W/got.c" ] || fail "the plan of '$1' ($3) did not reach the compiler (exit $rc)"
  }
  # same SPEC COUNT_IO PASS ARGS...: `attntune source SPEC ARGS` is what the runtime compiles
  same() {
    spec=$1 count=$2 pass=$3
    shift 3
    "$T" source "$spec" "$@" >"$W/printed.c" 2>"$out" || fail "source '$spec' $*: exit $?"
    compiled "$spec" "$count" "$pass"
    args="$*"
    cmp "$W/printed.c" "$W/got.c" >"$out" 2>&1 || fail "source '$spec'${args:+ $args} is not what the runtime compiles"
  }
  same "$FWD" 0 fwd
  cp "$W/got.c" "$W/plain.c"
  # the comparison tells kernels apart: the spec with another unroll prints another source
  # shellcheck disable=SC2046 # the spec's words, unquoted: several arguments make one spec
  "$T" source $(echo "$FWD" | sed 's/unroll=4/unroll=0/') >"$W/other.c" 2>"$out" || fail "unroll=0: exit $?"
  ! cmp -s "$W/other.c" "$W/got.c" || fail "unroll=0 printed unroll=4's source"
  grep -q "^#define ATTN_UNROLL 4$" "$W/got.c" || fail "the compiled source lacks unroll=4"
  same "$FWD" 1 fwd --counting
  grep -q "ATTN_COUNT_IO" "$W/got.c" || fail "the counting source lacks ATTN_COUNT_IO"
  ! cmp -s "$W/got.c" "$W/plain.c" || fail "the counting build is the plain one"
  same "flash cpu f32 d=24 dv=40 br=16 bc=48 causal=1" 0 bwd --pass bwd
  grep -q 'templates/flash_bwd.c' "$W/got.c" || fail "the backward's source is not flash_bwd.c's"
  same "lowrank cpu f32 d=8 br=16 bc=16 feature=random rank=32 seed=7" 1 bwd --pass bwd --counting
  grep -q 'templates/lowrank_bwd.c' "$W/got.c" || fail "lowrank's backward source is not lowrank_bwd.c's"
  ;;
cuda)
  "$T" source "$CUDA" >"$W/s.cu" 2>"$out" || fail "exit $?"
  head -1 "$W/s.cu" | grep -q "templates/flash.cu: flash cuda f16 d=80 br=64 bc=32 causal=1 .*arch=sm_80 .* dv=48" ||
    fail "the first line does not name flash.cu and the spec"
  for def in "D 80" "DV 48" "BR 64" "BC 32" "CAUSAL 1" "WARPS 4" "STAGES 1" "DTYPE 1" "ARCH 80"; do
    grep -q "^#define ATTN_$def\$" "$W/s.cu" || { cp "$W/s.cu" "$out"; fail "no #define ATTN_$def"; }
  done
  ! grep -q "^#define ATTN_COUNT_IO" "$W/s.cu" || fail "the plain source counts"
  "$T" source "$CUDA" --counting >"$W/c.cu" 2>"$out" || fail "--counting exit $?"
  grep -q "^#define ATTN_COUNT_IO" "$W/c.cu" || fail "--counting's source does not count"
  "$T" source "$CUDA" --arch sm_90 >"$W/a.cu" 2>"$out" || fail "--arch exit $?"
  grep -q "^#define ATTN_ARCH 90$" "$W/a.cu" && head -1 "$W/a.cu" | grep -q "arch=sm_90 " || fail "--arch sm_90"
  "$T" source "flash cuda bf16 d=64 br=64 bc=64 warps=4 stages=2 arch=sm_90 dq=atomic" --pass bwd >"$W/b.cu" \
    2>"$out" || fail "--pass bwd exit $?"
  grep -q "templates/flash_bwd.cu" "$W/b.cu" && grep -q "^#define ATTN_DQ_ATOMIC 1$" "$W/b.cu" &&
    grep -q "^#define ATTN_DTYPE 2$" "$W/b.cu" || fail "--pass bwd's source"
  ;;
ptx)
  "$T" source "$CUDA" --ptx >"$W/s.ptx" 2>"$out"
  rc=$?
  # NVRTC absent or without what the compile needs: a skip; a failed compile is a failure
  if [ $rc -eq 1 ] && grep -Eq "NVRTC is not available|NVRTC library found lacks" "$out"; then
    cat "$out"
    echo "SKIP: no usable NVRTC"
    exit 77
  fi
  [ $rc -eq 0 ] || fail "--ptx exit $rc"
  grep -q "^\.target sm_80\$" "$W/s.ptx" && grep -q "\.entry attn_kernel(" "$W/s.ptx" || fail "not sm_80 PTX"
  "$T" source "$CUDA" --ptx --arch sm_90a >"$W/a.ptx" 2>"$out" || fail "--arch sm_90a exit $?"
  grep -q "^\.target sm_90a\$" "$W/a.ptx" && grep -q "\.entry attn_kernel(" "$W/a.ptx" || fail "not sm_90a PTX"
  ;;
usage)
  expect 2 "unknown target 'gpu'" "flash gpu f32 d=64"
  expect 2 "unknown key 'bogus'" "flash cpu f32 d=64 br=64 bc=128 bogus=1"
  expect 2 "d=0 is not supported on cpu" "flash cpu f32 d=0 br=64 bc=128"
  expect 2 "cuda block sizes must be multiples of 16" "flash cuda f16 d=64 br=40 bc=64 warps=4 stages=1 arch=sm_80"
  expect 2 "unknown option '--bogus'" "$FWD" --bogus
  expect 2 "no SPEC given" --counting
  expect 2 "--pass 'both': fwd or bwd" "$FWD" --pass both
  expect 2 "--arch 'sm_75'" "$CUDA" --arch sm_75
  expect 2 "--arch needs a value" "$CUDA" --arch
  expect 2 "--arch applies to cuda specs" "$FWD" --arch sm_80
  expect 2 "--ptx: NVRTC compiles cuda specs" "$FWD" --ptx
  expect 2 "the CPU backward is a flash or lowrank cpu kernel" "smallcache cpu f32 d=64 br=64 bc=64" --pass bwd
  expect 2 "the backward takes neither" "$FWD" --pass bwd
  expect 2 "the CUDA backward has no counting build" "$CUDA" --pass bwd --counting
  export ATTN_NVRTC="$W/no-libnvrtc.so"
  expect 1 "^attntune source --ptx: NVRTC is not available \(.*no-libnvrtc" "$CUDA" --ptx
  unset ATTN_NVRTC
  "$T" help source >"$out" 2>&1 || fail "help source exit $?"
  grep -q "^usage: attntune source SPEC" "$out" && grep -q "runtime compiles" "$out" || fail "help source"
  "$T" source --help >"$W/h.txt" 2>&1 && cmp -s "$out" "$W/h.txt" || fail "source --help is not help source"
  "$T" --help >"$out" 2>&1 && grep -q "^  source  " "$out" || fail "--help does not list source"
  man1=$(dirname "$T")/attntune.1
  [ -s "$man1" ] || fail "no $man1"
  grep -q "^\.B source\$" "$man1" && grep -q "^\.SS source\$" "$man1" || fail "the manual lacks source"
  sed -e 's/^\\&//' -e 's/\\-/-/g' -e 's/\\e/\\/g' "$man1" >"$W/man.txt"
  while IFS= read -r line; do
    grep -F -x -q -- "$line" "$W/man.txt" || fail "the manual lacks '$line' of source's help"
  done <"$W/h.txt"
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_)"
