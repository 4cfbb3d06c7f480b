#!/bin/sh
# ptx_mutation.sh CUDA_EMU TEMPLATE SED_SCRIPT EXPECT ARGS...: the interpreter tests must catch a broken kernel.
# Applies SED_SCRIPT to a copy of TEMPLATE (it must change the file), runs CUDA_EMU ARGS on the copy
# (ATTN_EMU_TEMPLATE) and passes only when that run fails with a line matching EXPECT (the numerical or semantic
# failure the mutation must cause), and with nothing that says the kernel did not compile or load: a mutation
# caught only by the compiler would prove nothing about the interpreter.
set -u
emu=$1 template=$2 script=$3 expect=$4
shift 4
dir=$(mktemp -d "${TMPDIR:-/tmp}/attn-mutation-XXXXXX") || exit 1
trap 'rm -rf "$dir"' EXIT
sed -e "$script" "$template" > "$dir/mutant" || exit 1
if cmp -s "$template" "$dir/mutant"; then
  echo "FAIL: the mutation '$script' changes nothing in $template"
  exit 1
fi
ATTN_EMU_TEMPLATE="$dir/mutant" "$emu" "$@" > "$dir/log" 2>&1
rc=$?
grep -E '^(FAIL|ok)' "$dir/log" | head -n 5
if [ $rc -eq 77 ]; then
  echo "SKIP: $(grep SKIP "$dir/log" | head -n 1)"
  exit 77
fi
if grep -Eq 'does not compile|refuses|cannot read|bad field' "$dir/log"; then
  echo "FAIL: the mutant did not reach the interpreter (see above)"
  exit 1
fi
if [ $rc -ne 1 ] || ! grep -Eq "$expect" "$dir/log"; then
  echo "FAIL: the mutant passed, or failed otherwise than with /$expect/ (exit $rc)"
  tail -n 3 "$dir/log"
  exit 1
fi
echo "caught: $(grep -E "$expect" "$dir/log" | head -n 1 | cut -c1-300)"
exit 0
