#!/bin/sh
# test.sh: set up and build, then run every test except the nightly ones (whole-space CUDA compiles).
# GPU tests report "skipped" on a machine without a device.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTN_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
jobs=$(nproc 2>/dev/null || echo 2)
cd "$build"
exec ctest -LE nightly --output-on-failure -j"$jobs" "$@"
