#!/bin/sh
# sanitize.sh [CTEST ARGS...]: the sanitizer stage of scripts/test.sh, runnable alone. Builds the project with
# AddressSanitizer and UBSan (-DATTN_SANITIZE=ON) into ${ATTN_SANITIZE_DIR:-build-sanitize} and runs the tests
# labelled `sanitize` (tests/sanitize.cmake) and `fuzz` (tests/fuzz.cmake). Fails on a failing test, and on any
# sanitizer report, also one from a process whose test expected it to fail. Expects setup.sh's packages.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTN_SANITIZE_DIR:-$root/build-sanitize}
mkdir -p "$build"
probe=$build/sanitize-probe
printf '#include <omp.h>\nint main(void) { return omp_get_max_threads() < 1; }\n' >"$probe.c"

# clang: the fuzz targets need libFuzzer. gcc (ASan and UBSan alike, no fuzz tests) when clang, its OpenMP or its
# sanitizer runtime is missing. CC/CXX only for CMake: the tests' kernels compile with the usual $CC.
cc=clang cxx=clang++ fuzz=ON
if ! command -v clang++ >/dev/null || ! clang -fopenmp -fsanitize=address,undefined -o "$probe" "$probe.c" 2>/dev/null; then
  echo "sanitize: clang with OpenMP and sanitizers not found (packages clang libomp-dev libclang-rt-dev): using gcc," \
       "without the fuzz tests" >&2
  cc=gcc cxx=g++ fuzz=OFF
  gcc -fopenmp -fsanitize=address,undefined -o "$probe" "$probe.c"
fi
# a tree configured with the other compiler is configured again from scratch (CMake keeps its first compiler)
if [ -f "$build/CMakeCache.txt" ] && ! grep -q "^CMAKE_C_COMPILER:[A-Z]*=.*/$cc\$" "$build/CMakeCache.txt"; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi

logs=$build/sanitizer-logs
rm -rf "$logs"
mkdir -p "$logs"
# LeakSanitizer stops the process with ptrace, which some containers forbid (and which fails under strace or gdb):
# leaks are checked where the probe shows that it works.
leaks=1
ASAN_OPTIONS=detect_leaks=1 "$probe" 2>/dev/null || {
  leaks=0
  echo "sanitize: LeakSanitizer does not work here (ptrace refused?): leaks are not checked" >&2
}
rm -f "$probe" "$probe.c"
# intercept_tls_get_addr=0: LSan's tracking of dlopen'ed libraries' TLS misreads glibc >= 2.25 at times
# (google/sanitizers#1322) and its tracer then dies at exit ("Tracer caught signal 11"; cpu_cache_trust_shared_dir).
# log_path: reports go to files, checked below, so that none is lost in a test's redirected or expected-failure output.
export ASAN_OPTIONS="detect_leaks=$leaks:intercept_tls_get_addr=0:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan"

# 12 s of fuzzing per target here (the suite's time budget); longer runs: tests/fuzz/README.md
CC=$cc CXX=$cxx cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DATTN_SANITIZE=ON -DATTN_FUZZ=$fuzz \
  -DATTN_FUZZ_SECONDS="${ATTN_FUZZ_SECONDS:-12}" >/dev/null
jobs=$(nproc 2>/dev/null || echo 2)
# everything: the tests' own programs are most of the project, and the fuzz targets are not named here
cmake --build "$build" -j"$jobs"
rc=0
(cd "$build" && ctest -L 'sanitize|fuzz' --output-on-failure -j"$jobs" "$@") || rc=$?

reports=$(grep -l -E 'SUMMARY: |ERROR: |runtime error: |fatal error' "$logs"/* 2>/dev/null || true)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "==== $f"
    cat "$f"
  done
  echo "sanitize: sanitizer reports above ($(echo "$reports" | wc -l) processes)" >&2
  [ $rc -ne 0 ] || rc=1
fi
exit $rc
