#!/bin/sh
# setup.sh: installs what is missing (Debian packages, when run as root), then configures and builds into
# ${ATTN_BUILD_DIR:-build}. Sourced by quickstart.sh and test.sh; runnable on its own.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTN_BUILD_DIR:-$root/build}
packages="gcc make cmake pkg-config libsqlite3-dev libjansson-dev liblua5.4-dev libopenblas-dev libssl-dev sqlite3 python3"
# the Python package's test (tests/python_pkg.sh): a venv that sees the system's NumPy
packages="$packages python3-venv python3-numpy"
# the `slurm` test (tests/slurm.sh): a single-node Slurm cluster it starts and stops itself
packages="$packages slurm-wlm munge"
# test.sh's sanitizer stage (scripts/sanitize.sh): clang with its OpenMP and its sanitizer and libFuzzer runtimes
if [ "${ATTN_SETUP_SANITIZE:-0}" = 1 ]; then
  packages="$packages clang libomp-dev libclang-rt-dev"
fi
missing=""
for p in $packages; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
  else
    echo "setup: missing packages:$missing" >&2
    echo "setup: run as root, or install them: sudo apt-get install$missing" >&2
    exit 1
  fi
fi
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" -j"$jobs"
