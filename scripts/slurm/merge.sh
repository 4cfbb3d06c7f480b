#!/bin/sh
#SBATCH --job-name=attntune-merge
#SBATCH --output=attntune-merge-%j.out
#SBATCH --ntasks=1
# merge.sh [TARGET.db]: merges the parts tune-array.sh wrote (ATTN_SHARD_DIR/part-K-of-N.db, K = 1..N) into TARGET
# (default attntune.db; created when missing, else the parts' rows join it, the better row of a key staying). Run it
# after the array, when every part has succeeded:
#
#   jid=$(sbatch --parsable --array=1-8 scripts/slurm/tune-array.sh --gpu cpu --d 64..128 --n 256..4096)
#   sbatch --dependency=afterok:$jid scripts/slurm/merge.sh tuned.db
#
# or by hand on any machine with the parts. It refuses to merge when a part is missing or the parts come from
# arrays of different sizes: the merged database would silently lack problems.
# Environment: ATTN_BIN (the attntune binary, default attntune on PATH), ATTN_SHARD_DIR (default ./attntune-shards).
set -u
target=${1:-attntune.db}
bin=${ATTN_BIN:-attntune}
dir=${ATTN_SHARD_DIR:-attntune-shards}
n=
for f in "$dir"/part-*-of-*.db; do
  [ -f "$f" ] || continue
  m=${f##*-of-}
  m=${m%.db}
  if [ -n "$n" ] && [ "$m" != "$n" ]; then
    echo "merge.sh: $dir holds parts of $n and of $m: remove the older array's parts" >&2
    exit 1
  fi
  n=$m
done
if [ -z "$n" ]; then
  echo "merge.sh: no parts (part-K-of-N.db) in $dir" >&2
  exit 1
fi
set --
k=1
while [ "$k" -le "$n" ]; do
  p=$dir/part-$k-of-$n.db
  if [ ! -f "$p" ]; then
    echo "merge.sh: $p is missing: part $k of $n did not run or failed" >&2
    exit 1
  fi
  set -- "$@" "$p"
  k=$((k + 1))
done
exec "$bin" merge "$target" "$@"
