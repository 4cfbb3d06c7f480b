#!/bin/sh
#SBATCH --job-name=attntune-tune
#SBATCH --output=attntune-tune-%A_%a.out
# tune-array.sh TUNE-ARGS...: one part of `attntune tune --shard K/N` per task of a Slurm job array. Task K of an
# N-task array (any contiguous range: --array=1-4 or 0-3) tunes part K of N of the problems TUNE-ARGS name, into a
# database of its own; merge.sh, started after the array, merges the parts into one (docs/tuning.md, "Tuning on a
# cluster"). Every task gets the same TUNE-ARGS, so that they compute the same partition.
#
#   jid=$(sbatch --parsable --array=1-8 --cpus-per-task=16 scripts/slurm/tune-array.sh --gpu cpu --d 64..128 --n 256..4096)
#   sbatch --dependency=afterok:$jid scripts/slurm/merge.sh tuned.db
#
# GPU nodes: ask Slurm for the device and name it, e.g.
#   sbatch --array=1-4 --gres=gpu:1 scripts/slurm/tune-array.sh --gpu H100 --d 64..256 --n 1024..16384
# (a GPU that is not on the node is ranked by the performance model instead: --gpu A100 on CPU nodes needs no GPU).
# A different partition, time limit or account: the usual sbatch options (-p, -t, -A).
#
# Environment (sbatch passes the submitting shell's environment on):
#   ATTN_BIN        the attntune binary, on a file system the nodes share (default: attntune on PATH)
#   ATTN_SHARD_DIR  where the parts' databases go, shared by the nodes (default ./attntune-shards); part K of N is
#                   part-K-of-N.db there. A resubmitted task resumes from its part (a tune rerun skips what is stored).
#   ATTN_SCRATCH    node-local directory to tune in (SQLite's WAL wants a local file system): the part is copied
#                   there first and back when the task ends. Default: tune in ATTN_SHARD_DIR itself.
#   ATTN_THREADS    CPU threads (default: the task's --cpus-per-task, else all the node's cores)
# The exit status is attntune's: 0 when the part was tuned, so that merge.sh's afterok waits for every part.
set -u
id=${SLURM_ARRAY_TASK_ID:?tune-array.sh: not a task of a job array (sbatch --array=1-N tune-array.sh ...)}
min=${SLURM_ARRAY_TASK_MIN:?} max=${SLURM_ARRAY_TASK_MAX:?}
count=${SLURM_ARRAY_TASK_COUNT:-$((max - min + 1))}
if [ "$count" -ne $((max - min + 1)) ]; then
  echo "tune-array.sh: the array must be one contiguous range (--array=1-N), not $min..$max with $count tasks" >&2
  exit 2
fi
k=$((id - min + 1)) n=$count
bin=${ATTN_BIN:-attntune}
dir=${ATTN_SHARD_DIR:-attntune-shards}
mkdir -p "$dir" || exit 1
part=$dir/part-$k-of-$n.db
if [ -z "${ATTN_THREADS:-}" ] && [ -n "${SLURM_CPUS_PER_TASK:-}" ]; then
  ATTN_THREADS=$SLURM_CPUS_PER_TASK
  export ATTN_THREADS
fi
echo "tune-array.sh: part $k of $n on $(hostname) into $part"
if [ -n "${ATTN_SCRATCH:-}" ]; then
  work=$ATTN_SCRATCH/attntune-${SLURM_ARRAY_JOB_ID:-job}-$k
  mkdir -p "$work" || exit 1
  if [ -f "$part" ]; then cp "$part" "$work/part.db" || exit 1; fi
  "$bin" tune "$@" --shard "$k/$n" --db "$work/part.db"
  rc=$?
  # copy and rename: the shared name never holds half a file
  if [ -f "$work/part.db" ]; then
    cp "$work/part.db" "$part.tmp" && mv "$part.tmp" "$part" || rc=1
  fi
  rm -rf "$work"
  exit $rc
fi
exec "$bin" tune "$@" --shard "$k/$n" --db "$part"
