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
killed)  # a compile killed midway leaves temporaries; the next process removes them, never a live compile's
  # a compiler that waits for $W/go-N before compiling, so the test decides when each compile may end
  cat >"$W/slowcc" <<'EOC'
#!/bin/sh
echo $$ >"$SLOW_W/cc-$SLOW_N.pid"
while [ ! -e "$SLOW_W/go-$SLOW_N" ]; do sleep 0.05; done
exec cc "$@"
EOC
  chmod +x "$W/slowcc"
  export SLOW_W="$W"
  started() { i=0; while [ ! -s "$W/cc-$1.pid" ]; do i=$((i + 1)); [ $i -lt 1200 ] || fail "compile $1 never started"; sleep 0.05; done; }
  temps() { ls "$W/cache" | grep -E '^[0-9a-f]{16}-[A-Za-z0-9]{6}\.(c|so)$' | sort; }
  SLOW_N=1 CC="$W/slowcc" "$PLAN" "$W/none.db" 16 64 2 >"$W/out1.txt" 2>&1 &
  victim=$!
  started 1
  killed_temps=$(temps)
  [ "$(echo "$killed_temps" | grep -c .)" -eq 2 ] || fail "expected a .c and a .so temporary, found: $killed_temps"
  kill -9 $victim
  wait $victim 2>/dev/null
  kill "$(cat "$W/cc-1.pid")" 2>/dev/null
  # a live compile of another kernel (d=32), started after the kill
  SLOW_N=2 CC="$W/slowcc" "$PLAN" "$W/none.db" 32 64 2 >"$W/out2.txt" 2>&1 &
  live=$!
  started 2
  live_temps=$(temps | grep -v -F -x "$killed_temps")
  [ "$(echo "$live_temps" | grep -c .)" -eq 2 ] || fail "expected the live compile's two temporaries: $live_temps"
  # everything old enough to be swept, and what the sweep must leave: other names, a fresh orphan
  touch -d '2 hours ago' "$W/cache"/*
  h=0123456789abcdef
  for f in "$h-Orph4n.so" "$h.so.Ab12Cd" "$h-sm_80.cubin.Zz9Yy8" notes.txt; do : >"$W/cache/$f"; touch -d '2 hours ago' "$W/cache/$f"; done
  : >"$W/cache/$h-Fresh1.so"
  "$PLAN" "$W/none.db" 16 64 2 >"$out" 2>&1
  [ $? -eq 3 ] || fail "the next process did not run the plan"
  left=$(ls "$W/cache")
  for f in $killed_temps "$h-Orph4n.so" "$h.so.Ab12Cd" "$h-sm_80.cubin.Zz9Yy8"; do
    echo "$left" | grep -q -F -x "$f" && fail "$f was left in the cache"
  done
  for f in $live_temps notes.txt "$h-Fresh1.so"; do
    echo "$left" | grep -q -F -x "$f" || fail "$f was removed (it belongs to a live compile or to nobody we know)"
  done
  # the live compile finishes normally and leaves nothing behind
  rm "$W/cache/$h-Fresh1.so"
  : >"$W/go-2"
  wait $live
  rc=$?
  [ $rc -eq 3 ] || { cat "$W/out2.txt" >&2; fail "the live compile's process exited $rc"; }
  [ -z "$(temps)" ] || fail "temporaries left after a normal compile: $(temps)"
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_)"
