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
fi
cd "$build"
rc=0
ctest -LE nightly --output-on-failure -j"$jobs" "$@" || rc=$?
[ $rc -ne 0 ] || rc=$san_rc
exit $rc
