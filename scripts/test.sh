#!/bin/sh
# test.sh [CTEST ARGS...]: set up and build, run the sanitizer stage (scripts/sanitize.sh: a subset under ASan and
# UBSan, and the fuzz tests), then every test except the nightly ones (whole-space CUDA compiles), with the arguments.
# GPU tests report "skipped" on a machine without a device. ATTN_SKIP_SANITIZE=1 leaves the sanitizer stage out.
# The main suite runs last, so that its summary ends the output; the exit status is non-zero if either stage failed.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTN_BUILD_DIR:-$root/build}
sanitize=1
[ "${ATTN_SKIP_SANITIZE:-0}" = 1 ] && sanitize=0
ATTN_SETUP_SANITIZE=$sanitize "$root/scripts/setup.sh"
jobs=$(nproc 2>/dev/null || echo 2)
san_rc=0
if [ $sanitize = 1 ]; then
  "$root/scripts/sanitize.sh" || san_rc=$?
  [ $san_rc -eq 0 ] || echo "test: the sanitizer stage FAILED (exit $san_rc, output above); the main suite runs now," \
                            "and this script exits non-zero whatever it gives" >&2
  # Its tests compiled kernels the main suite plans again (the same sources, compiler and flags, so the same cache
  # keys): they seed the main build's shared kernel cache (tests/CMakeLists.txt), where the runtime checks each one
  # before loading it as it does every cached kernel. Only from a directory the runtime would trust (this user's,
  # writable by nobody else), only regular files of this user's that nobody else can write, only finished objects
  # (HASH.so, never a compile's HASH-XXXXXX temporaries); each copied beside its name and renamed.
  from=${ATTN_SANITIZE_DIR:-$root/build-sanitize}/test-cache to=$build/test-cache
  if [ -d "$from" ] && [ -O "$from" ] && [ -z "$(find "$from" -maxdepth 0 -perm /022)" ] && mkdir -p "$to"; then
    for n in $(find "$from" -maxdepth 1 -type f -name '*.so' -user "$(id -u)" ! -perm /022 -printf '%f\n'); do
      case $n in *-*) continue ;; esac
      [ -e "$to/$n" ] || { cp -p "$from/$n" "$to/.seed-$$" && mv -f "$to/.seed-$$" "$to/$n"; } || rm -f "$to/.seed-$$"
    done
  fi
fi
cd "$build"
rc=0
ctest -LE nightly --output-on-failure -j"$jobs" "$@" || rc=$?
[ $rc -ne 0 ] || rc=$san_rc
exit $rc
