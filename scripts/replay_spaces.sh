#!/bin/sh
# replay_spaces.sh [cpu|model|all] [ATTNTUNE]: regenerates the whole search spaces shipped in tests/data/spaces/ for
# `attntune replay` (tests/replay.sh, docs/strategies.md), as `attntune export` JSON (a database would carry the
# compiled kernels too; `attntune import FILE.json --db FULL.db` makes one again).
#   cpu:   cpu.json, measured on this CPU by --strategy exhaustive with short time caps, at the lowest priority
#          (47 minutes on 2 cores that other jobs kept busy, most of it compiling); cpu-machine.txt beside it: the
#          commands, lscpu and the load before and after (the figures are only as quiet as the machine was)
#   model: model-a100.json, model-h100.json: the performance model's spaces (a fraction of a second each)
# ATTNTUNE defaults to build/tuner/attntune. Run from anywhere; writes into the repository's tests/data/spaces.
set -eu
what=${1:-all}
root=$(cd "$(dirname "$0")/.." && pwd)
T=${2:-$root/build/tuner/attntune}
out=$root/tests/data/spaces
[ -x "$T" ] || { echo "replay_spaces.sh: $T is not an executable (build first, or give ATTNTUNE)" >&2; exit 2; }
case $what in cpu | model | all) ;; *) echo "usage: replay_spaces.sh [cpu|model|all] [ATTNTUNE]" >&2; exit 2 ;; esac
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# DB FILE: the database exported, a row a line (export's indented JSON is half again as large; the values are the
# same: Python writes the shortest text that reads back as the same double). A row's pass and variant are left out
# where they are the forward's and dense attention's, which is what import reads for a row without them.
export_to() {
  "$T" export "$tmp/export.json" --db "$1" >/dev/null
  python3 - "$tmp/export.json" "$2" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
for m in doc["measurements"]:
    if m.get("pass") == "fwd":
        del m["pass"]
    if m.get("variant") == "":
        del m["variant"]
one = lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)
with open(sys.argv[2], "w") as f:
    f.write("{\n")
    for i, (key, val) in enumerate(doc.items()):
        if isinstance(val, list):
            f.write("%s:[\n%s\n]" % (one(key), ",\n".join(one(v) for v in val)))
        else:
            f.write("%s:%s" % (one(key), one(val)))
        f.write(",\n" if i + 1 < len(doc) else "\n")
    f.write("}\n")
EOF
  echo "$2: $(wc -c <"$2") bytes"
}

# The model's spaces: flash and smallcache, bf16, the problems docs/strategies.md compares.
model() { # GPU FILE
  "$T" --gpu "$1" --model --d 64,128 --n 1024,4096 --causal 0,1 --dtype bf16 --algo flash,smallcache \
    --strategy exhaustive --db "$tmp/$1.db" >/dev/null
  export_to "$tmp/$1.db" "$2"
}

# Measured CPU spaces: f32 at d = 64 and 128, n = 512 and 2048, with and without the causal mask, and bf16 at d = 64,
# n = 1024 (48 flash configurations a problem on a 1 MiB L2; each kernel is compiled once for all n). --reps 3
# --time-cap 0.1: each configuration timed for about a tenth of a second, the finalists for up to 0.4 s.
CPU1="--gpu cpu --d 64,128 --n 512,2048 --causal 0,1 --dtype f32"
CPU2="--gpu cpu --d 64 --n 1024 --causal 0,1 --dtype bf16"
CPUOPT="--strategy exhaustive --budget 1000 --reps 3 --time-cap 0.1 --jobs 2"
cpu() {
  {
    echo "# tests/data/spaces/cpu.json: measured by scripts/replay_spaces.sh cpu, at nice -n 19, on $(date -u +%F)"
    echo "# commands:"
    echo "#   attntune $CPU1 $CPUOPT"
    echo "#   attntune $CPU2 $CPUOPT"
    echo "# load before: $(cat /proc/loadavg)"
  } >"$tmp/machine.txt"
  # word splitting of the option lists is intended
  # shellcheck disable=SC2086
  nice -n 19 "$T" $CPU1 $CPUOPT --db "$tmp/cpu.db" >"$tmp/cpu1.log"
  # shellcheck disable=SC2086
  nice -n 19 "$T" $CPU2 $CPUOPT --db "$tmp/cpu.db" >"$tmp/cpu2.log"
  {
    echo "# load after: $(cat /proc/loadavg)"
    echo "# (the load counts runnable processes: the tuner's own thread is one of them)"
    echo "# lscpu:"
    lscpu | grep -v '^Vulnerability' | sed 's/^/#   /'
  } >>"$tmp/machine.txt"
  export_to "$tmp/cpu.db" "$out/cpu.json"
  mv "$tmp/machine.txt" "$out/cpu-machine.txt"
}

case $what in
cpu) cpu ;;
model) model A100 "$out/model-a100.json" && model H100 "$out/model-h100.json" ;;
all) model A100 "$out/model-a100.json" && model H100 "$out/model-h100.json" && cpu ;;
esac
ls -l "$out"
