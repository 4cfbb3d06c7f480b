#!/bin/sh
# quickstart.sh: set up and build, tune the CPU flash kernel for a few sizes into a SQLite file, then run the
# example application, which loads the tuned kernel through libattn and checks its output against fp64.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${ATTN_BUILD_DIR:-$root/build}
"$root/scripts/setup.sh"
db=${ATTN_DB:-$build/quickstart.db}
export ATTN_CACHE_DIR=${ATTN_CACHE_DIR:-$build/kernel-cache}
"$build/tuner/attntune" tune --gpu cpu --d 64 --n 256..1024 --heads 4 --budget 8 --db "$db"
"$build/tuner/attntune" show --db "$db"
"$build/examples/quickstart" "$db"
