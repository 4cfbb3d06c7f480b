#!/bin/sh
# cache_trust.sh CASE ATTNTUNE TUNER_PLAN WORKDIR: what the runtime loads from its kernel cache (runtime/artifact.h).
# Each case damages or plants something where a kernel would be found, then checks that the plan still computes the
# right result and that nothing unchecked was loaded (a planted object's constructor would create $W/pwned).
set -u
case_=$1 T=$2 PLAN=$3 W=$4
rm -rf "$W"
mkdir -p "$W/cache"
chmod 0755 "$W/cache"
out=$W/out.txt
export ATTN_CACHE_DIR="$W/cache"
fail() { echo "FAIL ($case_): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
# a shared object that announces itself when loaded
cat >"$W/evil.c" <<EOC
#include <stdio.h>
__attribute__((constructor)) static void run(void) { FILE *f = fopen("$W/pwned", "w"); if (f) fclose(f); }
int attn_kernel_abi(void) { return -1; }
EOC
cc -shared -fPIC -o "$W/evil.so" "$W/evil.c" || fail "cannot build the planted object"
objects() { ls "$W/cache"/*.so 2>/dev/null; }
tune() { "$T" --gpu cpu --d 16 --n 64 --heads 2 --budget 1 --db "$W/t.db" >"$out" 2>&1 || fail "tune exit $?"; }
plan() { # the tuned plan: exit 0 and a correct result, nothing planted loaded
  "$PLAN" "$W/t.db" 16 64 2 >"$out" 2>&1
  rc=$?
  [ $rc -eq 0 ] || fail "$1: plan exit $rc"
  [ ! -e "$W/pwned" ] || fail "$1: a planted object was loaded"
}
case $case_ in
truncated)  # a truncated object in the cache is rebuilt, never mapped (it would fault)
  tune
  for so in $(objects); do truncate -s 8000 "$so"; done
  plan "truncated objects"
  # the plan's kernel was rebuilt (the others stay as they are until something loads them)
  rebuilt=0
  for so in $(objects); do [ "$(stat -c %s "$so")" -gt 8000 ] && rebuilt=$((rebuilt + 1)); done
  [ $rebuilt -ge 1 ] || fail "the plan's kernel was not rebuilt"
  # without a database the structural check alone catches it
  for so in $(objects); do truncate -s 8000 "$so"; done
  "$PLAN" "$W/none.db" 16 64 2 >"$out" 2>&1
  [ $? -eq 3 ] || fail "no database: the default plan did not run correctly"
  ;;
planted)  # an object planted under a kernel's name does not match the database's hash: never loaded
  tune
  for so in $(objects); do cp "$W/evil.so" "$so"; done
  plan "planted objects"
  replaced=0
  for so in $(objects); do cmp -s "$so" "$W/evil.so" || replaced=$((replaced + 1)); done
  [ $replaced -ge 1 ] || fail "the plan's kernel was not replaced"
  # a symbolic link in its place is not followed
  for so in $(objects); do rm -f "$so"; ln -s "$W/evil.so" "$so"; done
  plan "symbolic links"
  ;;
blob)  # a blob replaced in the database does not match its recorded hash: never loaded
  tune
  sqlite3 "$W/t.db" "UPDATE artifacts SET blob = readfile('$W/evil.so')" || fail "sqlite3"
  rm -f "$W/cache"/*.so
  plan "replaced blobs"
  sqlite3 "$W/t.db" "UPDATE artifacts SET blob = substr(blob, 1, 8000)" || fail "sqlite3"
  rm -f "$W/cache"/*.so
  plan "truncated blobs"
  [ "$(sqlite3 "$W/t.db" "SELECT COUNT(*) FROM artifacts WHERE length(blob) > 8000")" -ge 1 ] \
    || fail "the plan's damaged blob was not replaced"
  ;;
shared_dir)  # a cache directory others can write is refused, with a message, for a private one
  chmod 0777 "$W/cache"
  "$T" --gpu cpu --d 16 --n 64 --heads 2 --budget 1 --db "$W/t.db" >"$out" 2>&1 || fail "tune exit $?"
  grep -q "kernel cache $W/cache is writable by others (mode 0777): using .* instead" "$out" || fail "no message"
  [ -z "$(objects)" ] || fail "objects were written to the shared directory"
  cp "$W/evil.so" "$W/cache/planted.so"
  plan "a shared directory"
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_)"
