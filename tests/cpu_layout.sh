#!/bin/sh
# cpu_layout.sh ATTNTUNE WORKDIR SOURCE_VERB_PLAN (tests/cpu_layout.cmake): a dense CPU flash spec's source, as the
# compiler sees it (preprocessed with the runtime's -march=native), holds none of templates/flash.c's paged code, which
# the same spec with layout=2 holds; a dense plan compiles exactly that source (a stand-in compiler keeps its input);
# CPU flash's other layouts and smallcache's are refused (exit 2, one line).
set -u
case_=layout T=$1 W=$2 PLAN=$3
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
DENSE="flash cpu f32 d=64 br=64 bc=128 causal=0 unroll=0 warps=0 stages=0 arch=- tile=0 feature=taylor degree=2 rank=0 seed=0"
PAGED_CODE='fl_run_group|fl_block_heads|fl_prefetch_pages_of|fl_prefetch_rows|fl_next_run|fl_prefetch_run'
cc=${CC:-cc}

"$T" source "$DENSE" >"$W/dense.c" 2>"$out" || fail "source dense: exit $?"
"$T" source "$DENSE layout=2" >"$W/paged.c" 2>"$out" || fail "source layout=2: exit $?"
grep -q '^#define ATTN_LAYOUT 2$' "$W/paged.c" || fail "layout=2's source lacks ATTN_LAYOUT 2"
! grep -q '^#define ATTN_LAYOUT ' "$W/dense.c" || fail "the dense source defines ATTN_LAYOUT"
for k in dense paged; do
  # shellcheck disable=SC2086 # $cc may be "ccache gcc"
  $cc -E -P -march=native -o "$W/$k.i" "$W/$k.c" >"$out" 2>&1 || fail "preprocessing the $k source: exit $?"
done
n=$(grep -cE "$PAGED_CODE" "$W/dense.i")
[ "$n" -eq 0 ] || { grep -E "$PAGED_CODE" "$W/dense.i" >"$out"; fail "the dense kernel has $n lines of paged code"; }
for f in fl_run_group fl_block_heads2 fl_block_heads4 fl_prefetch_pages_of fl_next_run; do
  grep -q "$f" "$W/paged.i" || fail "the paged kernel lacks $f"
done

# what a dense plan compiles: the dense source, byte for byte
printf '#!/bin/sh\nfor a; do case $a in *.c) cp "$a" "$CAPTURE" ;; esac; done\nexit 1\n' >"$W/cc"
chmod +x "$W/cc"
mkdir -m 700 "$W/cache"
CC=$W/cc CAPTURE=$W/got.c ATTN_CACHE_DIR=$W/cache "$PLAN" "$W/none.db" "$DENSE" 0 fwd >"$out" 2>&1
rc=$?
[ "$rc" -eq 3 ] && [ -s "$W/got.c" ] || fail "the dense plan did not reach the compiler (exit $rc)"
cmp "$W/got.c" "$W/dense.c" >"$out" 2>&1 || fail "a dense plan compiles another source than the dense spec's"

# the layouts CPU flash has not, and smallcache's
for spec in "$DENSE layout=1" "$DENSE layout=3" "smallcache cpu f32 d=64 br=16 bc=32 causal=0 layout=2"; do
  "$T" source "$spec" >"$W/so.txt" 2>"$out"
  rc=$?
  [ "$rc" -eq 2 ] && [ ! -s "$W/so.txt" ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q 'layout=' "$out" ||
    fail "source '$spec': exit $rc, want 2 and one line naming the layout"
done
echo "ok: the dense kernel has no paged code; a dense plan compiles it"
