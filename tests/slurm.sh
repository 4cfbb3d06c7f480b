#!/bin/sh
# slurm.sh ATTNTUNE WORKDIR: scripts/slurm/ on a real Slurm. Starts a single-node cluster on this machine (munged,
# slurmctld and slurmd from Debian's munge and slurm-wlm, with a minimal slurm.conf in a temporary directory), submits
# tune-array.sh as a 2-task array tuning two CPU problems and merge.sh as a job that depends on it, waits for them,
# and checks that the merged database holds every problem's rows, each problem tuned in exactly one part. Every
# daemon is stopped and the temporary directory removed on the way out, whatever happened. Needs root (the daemons
# run as root) and the packages (scripts/setup.sh installs them); without them it exits 77 (skipped).
set -u
T=$1 W=$2
root=$(cd "$(dirname "$0")/.." && pwd)
skip() { echo "SKIP (slurm): $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "the single-node cluster runs its daemons as root"
for c in munged mungekey slurmctld slurmd sbatch squeue scontrol scancel; do
  command -v "$c" >/dev/null 2>&1 || skip "$c is missing (apt-get install slurm-wlm munge; scripts/setup.sh does)"
done
rm -rf "$W"
mkdir -p "$W"
out=$W/out.txt
: >"$out"
D=$(mktemp -d /tmp/attntune-slurm.XXXXXX) || { echo "FAIL (slurm): mktemp" >&2; exit 1; }
chmod 0711 "$D" # munged's socket must be reachable through it
export SLURM_CONF="$D/slurm.conf"
pids= jobs=

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
stop() { # PID: SIGTERM, up to 10 s, then SIGKILL
  alive "$1" || return 0
  kill "$1" 2>/dev/null
  i=0
  while alive "$1" && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  alive "$1" && kill -KILL "$1" 2>/dev/null
  return 0
}
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$jobs" ]; then
    scancel $jobs >/dev/null 2>&1
    i=0 # the jobs' processes end before the daemon that would end them
    while [ -n "$(squeue -h 2>/dev/null)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  fi
  scontrol shutdown >/dev/null 2>&1
  for p in $pids; do stop "$p"; done
  rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
fail() {
  echo "FAIL (slurm): $*" >&2
  for f in "$out" "$W"/*.out "$D"/*.log; do [ -f "$f" ] && { echo "--- $f:" >&2; tail -n 30 "$f" >&2; }; done
  exit 1
}
pid_of() { # FILE: the daemon's pid once it has written it (up to 10 s)
  i=0
  while [ ! -s "$1" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  [ -s "$1" ] && cat "$1"
}

# munge: a fresh key, a daemon on a socket of its own
mungekey --create --keyfile="$D/munge.key" >>"$out" 2>&1 || fail "mungekey"
munged --force --key-file="$D/munge.key" --socket="$D/munge.sock" --pid-file="$D/munged.pid" \
  --log-file="$D/munged.log" --seed-file="$D/munged.seed" >>"$out" 2>&1 || fail "munged did not start"
p=$(pid_of "$D/munged.pid") || fail "munged wrote no pid"
pids="$p"

# slurm: one node (this machine as localhost), one partition, no cgroups, no accounting, ports of this run's own
port=$((20000 + ($$ % 5000) * 2))
mkdir -p "$D/state" "$D/spool"
cat >"$SLURM_CONF" <<CONF
ClusterName=attntune-test
SlurmctldHost=localhost
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$D/munge.sock
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc)
PartitionName=attntune Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
slurmctld -f "$SLURM_CONF" >>"$out" 2>&1 || fail "slurmctld did not start"
p=$(pid_of "$D/slurmctld.pid") || fail "slurmctld wrote no pid"
pids="$p $pids"
slurmd -f "$SLURM_CONF" -N localhost >>"$out" 2>&1 || fail "slurmd did not start"
p=$(pid_of "$D/slurmd.pid") || fail "slurmd wrote no pid"
pids="$p $pids"
i=0
until sinfo -h -o %T 2>/dev/null | grep -q idle; do
  i=$((i + 1))
  [ $i -lt 100 ] || fail "the node is not idle after 10 s: $(sinfo -h 2>&1)"
  sleep 0.1
done

# the array (one CPU per task, so both run at once on two cores) and the merge after it
export ATTN_BIN="$T" ATTN_SHARD_DIR="$W/shards"
unset ATTN_DB ATTN_THREADS
jid=$(sbatch --parsable --array=1-2 -c 1 --chdir="$W" -o "$W/tune-%A_%a.out" "$root/scripts/slurm/tune-array.sh" \
  --gpu cpu --d 32 --n 64,128 --budget 2 --time-cap 0.1 2>>"$out") || fail "sbatch of the array"
jobs=$jid
mid=$(sbatch --parsable --dependency=afterok:"$jid" --chdir="$W" -o "$W/merge-%j.out" \
  "$root/scripts/slurm/merge.sh" "$W/merged.db" 2>>"$out") || fail "sbatch of the merge"
jobs="$jid $mid"
i=0 state=
while :; do
  state=$(scontrol show job -o "$mid" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*Reason=\([^ ]*\).*/\1 \2/p')
  case $state in
  COMPLETED*) break ;;
  FAILED* | CANCELLED* | TIMEOUT* | NODE_FAIL* | OUT_OF_MEMORY*) fail "the merge job ended $state" ;;
  *DependencyNeverSatisfied*) fail "a tuning task failed: the merge cannot run" ;;
  esac
  i=$((i + 1))
  [ $i -lt 240 ] || fail "the jobs did not end within 120 s (merge job: $state)"
  sleep 0.5
done

# every problem once: one part each, both in the merged database with their chosen rows
for k in 1 2; do
  [ -f "$W/shards/part-$k-of-2.db" ] || fail "no part $k"
  [ "$(sqlite3 "$W/shards/part-$k-of-2.db" "SELECT COUNT(DISTINCT n) FROM measurements")" -eq 1 ] ||
    fail "part $k does not hold exactly one problem"
done
[ "$(sqlite3 "$W/shards/part-1-of-2.db" "SELECT DISTINCT n FROM measurements")" != \
  "$(sqlite3 "$W/shards/part-2-of-2.db" "SELECT DISTINCT n FROM measurements")" ] || fail "both parts tuned one problem"
[ -f "$W/merged.db" ] || fail "merge.sh wrote no database"
[ "$(sqlite3 "$W/merged.db" "SELECT n || ':' || COUNT(*) FROM measurements WHERE chosen = 1 AND status = 'ok' GROUP BY n ORDER BY n" | tr '\n' ' ')" = "64:1 128:1 " ] ||
  fail "the merged database lacks a problem's chosen row"
r1=$(sqlite3 "$W/shards/part-1-of-2.db" "SELECT COUNT(*) FROM measurements")
r2=$(sqlite3 "$W/shards/part-2-of-2.db" "SELECT COUNT(*) FROM measurements")
[ "$(sqlite3 "$W/merged.db" "SELECT COUNT(*) FROM measurements")" -eq $((r1 + r2)) ] || fail "merged rows are not the parts' rows"
grep -q "merged .*part-2-of-2.db into .*merged.db" "$W"/merge-*.out || fail "merge.sh's output"
"$T" show --db "$W/merged.db" >"$out" 2>&1 || fail "show exit $?"
[ "$(grep -c "^cpu:.* 32  *\(64\|128\) " "$out")" -eq 2 ] || fail "show lacks a problem"
echo "PASS (slurm)"
