#!/bin/sh
# tuner_cli.sh CASE ATTNTUNE WORKDIR [TUNER_PLAN]: end-to-end checks of `attntune tune` (one CTest entry per case).
set -u
case_=$1 T=$2 W=$3 PLAN=${4:-}
LUA=$(dirname "$0")/lua
# shellcheck source-path=SCRIPTDIR source=sh_util.sh
. "$(dirname "$0")/sh_util.sh"
rows() { sqlite3 "$1" "SELECT COUNT(*) FROM measurements" 2>/dev/null || echo -1; }

case $case_ in
cpu)  # measured rows, show prints them, the runtime uses them
  "$T" --gpu cpu --d 64 --n 128,256 --budget 4 --time-cap 0.25 --db "$W/x.db" >"$out" 2>&1 || fail "tune exit $?"
  grep -q "best n=128 d=64 f32 causal=0: flash" "$out" || fail "no best line for n=128"
  grep -q "best n=256 d=64 f32 causal=0: flash" "$out" || fail "no best line for n=256"
  # 4 per problem, and the untuned default when the strategy did not pick it: measured for the finalist round
  n=$(rows "$W/x.db")
  [ "$n" -ge 8 ] && [ "$n" -le 10 ] || fail "expected 8 to 10 rows, got $n"
  [ "$(sqlite3 "$W/x.db" "SELECT COUNT(*) FROM measurements WHERE is_default = 1")" -eq 2 ] || fail "default rows"
  [ "$(sqlite3 "$W/x.db" "SELECT COUNT(*) FROM measurements WHERE chosen = 1 GROUP BY n" | tr '\n' ' ')" = "1 1 " ] \
    || fail "not one chosen row per problem"
  [ "$(sqlite3 "$W/x.db" "SELECT COUNT(*) FROM measurements WHERE chosen = 1 AND final = 1 AND reps >= 5")" -eq 2 ] \
    || fail "chosen rows lack the finalist round's statistics"
  grep -q "finalists (" "$out" || fail "no finalist round"
  grep -q "^confirmation: timing the chosen and default configurations of 2 problems again" "$out" \
    || fail "no confirmation pass"
  "$T" show --db "$W/x.db" >"$out" 2>&1 || fail "show exit $?"
  grep -q "cpu:" "$out" && grep -q "128" "$out" && grep -q "256" "$out" || fail "show lacks the rows"
  "$PLAN" "$W/x.db" 64 128 2 >"$out" 2>&1 || fail "plan is not tuned"
  grep -q "(tuned)" "$out" || fail "describe lacks (tuned)"
  ;;
dv)  # d_v != d: rows keyed by d_v and served to d_v problems only; show, export and import carry d_v
  "$T" --gpu cpu --d 64 --dv 128 --n 128 --budget 2 --reps 1 --time-cap 0.05 --db "$W/v.db" >"$out" 2>&1 ||
    fail "tune exit $?"
  grep -q "best n=128 d=64 d_v=128 f32 causal=0: flash d=64 d_v=128 " "$out" || fail "no best line with d_v"
  n=$(rows "$W/v.db")
  [ "$n" -ge 2 ] || fail "only $n rows"
  [ "$(sqlite3 "$W/v.db" "SELECT COUNT(*) FROM measurements WHERE d_v = 128 AND status = 'ok'")" -eq "$n" ] ||
    fail "rows without d_v 128, or not ok"
  [ "$(sqlite3 "$W/v.db" "SELECT COUNT(*) FROM kernels WHERE spec NOT LIKE '% dv=128%'")" -eq 0 ] || fail "kernel keys"
  "$PLAN" "$W/v.db" 64/128 128 2 >"$out" 2>&1 || fail "the d_v = 128 plan is not the tuned one (exit $?)"
  "$PLAN" "$W/v.db" 64 128 2 >"$out" 2>&1
  [ $? -eq 3 ] || fail "a d_v = d problem was served a d_v = 128 row, or failed"
  "$T" --gpu cpu --d 64 --dv 128 --n 128 --budget 2 --reps 1 --time-cap 0.05 --db "$W/v.db" >"$out" 2>&1 ||
    fail "rerun exit $?"
  grep -q "(0 stored now" "$out" || fail "a rerun measured again"
  "$T" show --db "$W/v.db" >"$out" 2>&1 || fail "show exit $?"
  grep -q "d_v=128" "$out" || fail "show lacks d_v"
  "$T" show --json --db "$W/v.db" >"$out" 2>&1 || fail "show --json exit $?"
  grep -q '"d_v": 128' "$out" || fail "show --json lacks d_v"
  "$T" export "$W/v.json" --db "$W/v.db" >"$out" 2>&1 || fail "export exit $?"
  grep -q '"d_v": 128' "$W/v.json" || fail "export lacks d_v"
  "$T" import "$W/v.json" --db "$W/w.db" >"$out" 2>&1 || fail "import exit $?"
  [ "$(sqlite3 "$W/w.db" "SELECT COUNT(*) FROM measurements WHERE d_v = 128")" -eq "$n" ] || fail "import lost d_v"
  # a row whose d_v contradicts its kernel's is refused, and nothing is imported
  sed 's/"d_v": 128/"d_v": 96/' "$W/v.json" >"$W/bad.json"
  "$T" import "$W/bad.json" --db "$W/x.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q '"d_v" 96 contradicts' "$out" || fail "a contradicting d_v was imported"
  # the I/O closed form with d for Q K^T and d_v for P V, equal to the count
  "$T" io --algo flash --n 100 --d 64 --dv 128 --M 20000 >"$out" 2>&1 || fail "io exit $?"
  grep -q "d=64 d_v=128" "$out" && grep -q "(equal)" "$out" || fail "io with d_v"
  ;;
cpu_half)  # f16 and bf16 on the CPU, with odd head dimensions: rows ok (within 1e-2), and the runtime uses them
  "$T" --gpu cpu --d 7 --dv 12 --dtype f16,bf16 --n 64 --budget 1 --reps 1 --time-cap 0.05 --db "$W/h.db" >"$out" 2>&1 ||
    fail "tune exit $?"
  for t in f16 bf16; do
    grep -q "best n=64 d=7 d_v=12 $t causal=0: flash d=7 d_v=12 .* cpu $t" "$out" || fail "no best line for $t"
  done
  [ "$(sqlite3 "$W/h.db" "SELECT COUNT(*) FROM measurements WHERE status <> 'ok'")" -eq 0 ] || fail "rows not ok"
  [ "$(sqlite3 "$W/h.db" "SELECT COUNT(DISTINCT dtype) FROM measurements")" -eq 2 ] || fail "not both dtypes"
  for t in f16 bf16; do
    "$PLAN" "$W/h.db" 7/12:$t 64 2 >"$out" 2>&1 || fail "the $t plan is not the tuned one (exit $?)"
  done
  ;;
model)  # a GPU that is not here: model rows, said so
  "$T" --gpu A100 --d 64..256 --db "$W/y.db" >"$out" 2>&1 || fail "tune exit $?"
  grep -q "A100 is not present" "$out" || fail "no 'not present' line"
  grep -q "performance model (provenance model)" "$out" || fail "model not named"
  for d in 64 128 256; do
    for t in f16 bf16; do
      grep -q "best n=1024 d=$d $t causal=0: flash d=$d .* cuda $t .*sm_80.*(model," "$out" || fail "no best for d=$d $t"
    done
  done
  n=$(rows "$W/y.db")
  [ "$n" -gt 6 ] || fail "only $n rows"
  [ "$(sqlite3 "$W/y.db" "SELECT COUNT(*) FROM measurements WHERE provenance <> 'model'")" -eq 0 ] || fail "non-model rows"
  ;;
model_bound)  # every model row names its bound; show prints it and --json carries it; FlashAttention-2's tiles
  "$T" --gpu H100 --d 64,128 --n 4096 --dtype bf16 --db "$W/b.db" >"$out" 2>&1 || fail "tune exit $?"
  [ "$(sqlite3 "$W/b.db" "SELECT COUNT(*) FROM measurements WHERE status = 'ok' AND (bound IS NULL OR bound = '')")" -eq 0 ] ||
    fail "model rows without a bound"
  sqlite3 "$W/b.db" "SELECT k.spec FROM measurements m JOIN kernels k ON k.id = m.kernel_id" >"$W/specs.txt"
  grep -q "d=64 br=128 bc=128 causal=0 unroll=0 warps=4" "$W/specs.txt" || fail "FA2's d=64 128x128 tile is not in the space"
  grep -q "d=128 br=128 bc=64 causal=0 unroll=0 warps=4" "$W/specs.txt" || fail "FA2's d=128 128x64 tile is not in the space"
  "$T" show --db "$W/b.db" >"$out" 2>&1 || fail "show exit $?"
  [ "$(grep -c "bound: " "$out")" -eq 2 ] || fail "show lacks the bound"
  "$T" show --json --db "$W/b.db" >"$out" 2>&1 || fail "show --json exit $?"
  grep -q '"bound": "tensor_cores"' "$out" || fail "--json lacks bound"
  ;;
model_compiled)  # --compiled: each candidate compiled once (NVRTC), its resources kept and read back by a rerun
  "$T" --gpu A100 --d 64 --n 2048 --dtype bf16 --compiled --jobs 2 --db "$W/c.db" >"$out" 2>&1 || fail "tune exit $?"
  if grep -q "NVRTC is not available" "$out"; then echo "PASS ($case_; NVRTC is not available: the estimate served)"; exit 0; fi
  k=$(sqlite3 "$W/c.db" "SELECT COUNT(*) FROM kernel_resources")
  [ "$k" -gt 10 ] || fail "only $k compiled resources stored"
  [ "$(sqlite3 "$W/c.db" "SELECT COUNT(*) FROM kernel_resources WHERE registers < 32 OR registers > 255")" -eq 0 ] ||
    fail "implausible registers"
  grep -q "compiled now" "$out" || fail "no line on the compiled kernels"
  "$T" --gpu A100 --d 64 --n 2048 --dtype bf16 --compiled --remeasure --db "$W/c.db" >"$out" 2>&1 || fail "rerun exit $?"
  grep -q "(0 compiled now)" "$out" || fail "the rerun compiled again"
  ;;
unknown_gpu)
  "$T" --gpu V100 --d 64 --db "$W/z.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "exit $rc, want 2"
  grep -q "unknown GPU 'V100'" "$out" && grep -q "A100, H100, H200, L4, L40S, RTX 4090" "$out" || fail "message"
  [ "$(wc -l <"$out")" -eq 1 ] || fail "more than one line"
  ;;
empty_space)
  "$T" --gpu L4 --d 256 --dtype f32 --db "$W/e.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "exit $rc, want 1"
  grep -q "empty search space for flash d=256 f32 causal=0 on L4" "$out" || fail "no empty-space message"
  grep -q "of shared memory per block" "$out" || fail "no reason"
  "$T" --gpu cpu --d 64 --budget 0 --db "$W/e.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "budget 0: exit $rc, want 2"
  grep -q "budget 0: nothing would be evaluated" "$out" || fail "budget 0 message"
  ;;
bad_args)  # each exits 2 with one line
  for args in "--d 64.." "--d a..b" "--d 256..64" "--d 64..256:0" "--d 577" "--d 0" "--d 64 --n 0" \
              "--d 64 --algo nosuch" "--d 64 --algo lowrank" "--d 64 --dtype f8" "--d 64 --causal 2" "--d 64 --bogus" \
              "--n 64" "--d 64 --strategy nosuch" "--d 64 --strategy $W/missing.lua" "--d 64 --tolerance -1" \
              "--d 64 --jobs 0" "--d 64 --time-cap 0" "--d 64 --time-cap x" "--d 64 --n-kv 0" "--d 64 --dv 577" \
              "--d 64 --dv 0" "--d 64 --dv 64.." "--gpu A100 --d 64 --dv 577" "--gpu A100 --d 0"; do
    "$T" --gpu cpu $args --db "$W/b.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] || fail "'$args': exit $rc, want 2"
    [ "$(wc -l <"$out")" -eq 1 ] || fail "'$args': not one line"
  done
  "$T" nosuchverb >"$out" 2>&1
  [ $? -eq 2 ] || fail "unknown verb"
  [ ! -e "$W/b.db" ] || fail "a usage error created the database"
  ;;
lua_error)
  "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/error.lua" --db "$W/l.db" >"$out" 2>&1
  [ $? -eq 1 ] || fail "exit"
  grep -q "strategy .*error.lua:4: attempt to index a nil value" "$out" || fail "no file:line"
  "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/syntax.lua" --db "$W/l.db" >"$out" 2>&1
  [ $? -eq 1 ] || fail "syntax exit"
  grep -q "syntax.lua:3:" "$out" || fail "syntax: no file:line"
  "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/noreturn.lua" --db "$W/l.db" >"$out" 2>&1
  [ $? -eq 1 ] || fail "noreturn exit"
  grep -q "must return function(space, tune), returned number" "$out" || fail "noreturn message"
  "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/sandbox.lua" --db "$W/l.db" >"$out" 2>&1 || fail "sandbox"
  grep -q "sandbox ok" "$out" || fail "sandbox message"
  ;;
lua_runaway)
  start=$(date +%s)
  ATTN_LUA_TIMEOUT_S=1 "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/runaway.lua" --db "$W/r.db" >"$out" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  [ $rc -eq 1 ] || fail "exit $rc"
  grep -q "strategy .*runaway.lua: stopped after 1 s (runaway script?)" "$out" || fail "message"
  [ $took -le 5 ] || fail "took $took s"
  ;;
lua_nonsense)
  "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/nonsense.lua" --db "$W/n.db" >"$out" 2>&1 || fail "exit $?"
  grep -q "nonsense ok: 16 bad configurations answered invalid" "$out" || fail "script did not finish"
  ;;
anneal)  # real measurements on this CPU
  "$T" --gpu cpu --d 32 --n 128 --strategy anneal --budget 3 --db "$W/a.db" >"$out" 2>&1 || fail "exit $?"
  grep -q "best n=128 d=32 f32 causal=0: flash .*(measured, 3 evaluated)" "$out" || fail "no best after 3"
  [ "$(rows "$W/a.db")" -ge 1 ] && [ "$(rows "$W/a.db")" -le 4 ] || fail "rows $(rows "$W/a.db")"
  ;;
genetic)
  "$T" --gpu H100 --d 64,128 --n 2048 --strategy genetic --budget 3 --db "$W/g.db" >"$out" 2>&1 || fail "exit $?"
  [ "$(grep -c "(model, 3 evaluated)" "$out")" -eq 4 ] || fail "expected 4 problems with 3 evaluations"
  "$T" --gpu cpu --d 32 --n 128 --strategy genetic --budget 3 --db "$W/g2.db" >"$out" 2>&1 || fail "cpu exit $?"
  grep -q "(measured, 3 evaluated)" "$out" || fail "cpu genetic"
  ;;
sigint)  # interrupted after the first stored row, resumed with no repeats (own cache: compiles keep it slow)
  export ATTN_CACHE_DIR="$W/cache"
  "$T" --gpu cpu --d 32 --n 96 --budget 6 --strategy exhaustive --time-cap 0.25 --db "$W/s.db" >"$W/run1.txt" 2>&1 &
  pid=$!
  i=0
  while [ "$(rows "$W/s.db")" -lt 1 ] 2>/dev/null; do
    i=$((i + 1))
    [ $i -lt 600 ] || { kill $pid; fail "no row after 60 s"; }
    sleep 0.1
  done
  kill -INT $pid
  wait $pid
  rc=$?
  cp "$W/run1.txt" "$out"
  [ $rc -eq 130 ] || fail "interrupted run exit $rc, want 130"
  grep -q "interrupted: [0-9]* measurements stored; run the same command to resume" "$out" || fail "message"
  first=$(rows "$W/s.db")
  [ "$first" -ge 1 ] && [ "$first" -lt 6 ] || fail "rows after interrupt: $first"
  "$T" --gpu cpu --d 32 --n 96 --budget 6 --strategy exhaustive --time-cap 0.25 --db "$W/s.db" >"$out" 2>&1 || fail "resume exit $?"
  # the six, then the untuned default (not among the first six of the grid) for the finalist round
  grep -q "7 evaluations ($((7 - first)) stored now, $first found stored)" "$out" || fail "resume counts"
  [ "$(rows "$W/s.db")" -eq 7 ] || fail "rows after resume: $(rows "$W/s.db")"
  # a third run finds everything, keeps the stored choice, and measures nothing
  before=$(sqlite3 "$W/s.db" "SELECT kernel_id, time_ms FROM measurements WHERE chosen = 1")
  "$T" --gpu cpu --d 32 --n 96 --budget 6 --strategy exhaustive --time-cap 0.25 --db "$W/s.db" >"$out" 2>&1 || fail "rerun exit $?"
  grep -q "7 evaluations (0 stored now, 7 found stored)" "$out" || fail "rerun measured again"
  grep -q "the stored finalist round's choice" "$out" || fail "rerun did not keep the choice"
  [ "$(sqlite3 "$W/s.db" "SELECT kernel_id, time_ms FROM measurements WHERE chosen = 1")" = "$before" ] || fail "choice"
  ;;
compile_error)  # a compiler that fails: rows stored as compile_error with the log, the run goes on, says so, exits 1
  export ATTN_CACHE_DIR="$W/cache"
  CC=false "$T" --gpu cpu --d 16 --n 64 --budget 2 --db "$W/ce.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 1 ] || fail "exit $rc, want 1: no configuration was usable"
  [ "$(grep -c ": compile_error" "$out")" -eq 2 ] || fail "not two compile_error lines"
  grep -q "compiling flash d=16 .* failed" "$out" || fail "no compiler message"
  grep -q "none of 2 evaluated configurations ran correctly" "$out" || fail "no summary"
  grep -q "^attntune tune: no usable configuration for 1 of the 1 problems tuned (n=64 d=16 f32 causal=0)" "$out" ||
    fail "no closing line on the unusable problem"
  [ "$(sqlite3 "$W/ce.db" "SELECT COUNT(*) FROM measurements WHERE status = 'compile_error'")" -eq 2 ] || fail "rows"
  ;;
large_n)  # beyond n = 1024 the last 256 query rows of each head are checked against fp64, causal too
  "$T" --gpu cpu --d 32 --n 1100 --causal 0,1 --budget 1 --time-cap 0.25 --db "$W/ln.db" >"$out" 2>&1 || fail "exit $?"
  [ "$(grep -c ": ok .* err=[0-9.]*e-0[5-9]" "$out")" -ge 2 ] || fail "not two accurate rows"
  [ "$(grep -c ": ok" "$out")" = "$(grep -c ": ok .* err=[0-9.]*e-0[5-9]" "$out")" ] || fail "an inaccurate row"
  ;;
concurrent)  # two tuners writing one database at once both succeed, and neither loses rows
  "$T" --gpu A100 --d 64..256 --db "$W/c.db" >"$W/c1.txt" 2>&1 &
  p1=$!
  "$T" --gpu H100 --d 64..256 --causal 0,1 --db "$W/c.db" >"$W/c2.txt" 2>&1 &
  p2=$!
  wait $p1; r1=$?
  wait $p2; r2=$?
  cat "$W/c1.txt" "$W/c2.txt" >"$out"
  [ $r1 -eq 0 ] && [ $r2 -eq 0 ] || fail "exits $r1 $r2"
  n1=$(sed -n 's/^\([0-9]*\) evaluations (\([0-9]*\) stored now.*/\2/p' "$W/c1.txt")
  n2=$(sed -n 's/^\([0-9]*\) evaluations (\([0-9]*\) stored now.*/\2/p' "$W/c2.txt")
  [ -n "$n1" ] && [ -n "$n2" ] && [ "$(rows "$W/c.db")" -eq $((n1 + n2)) ] || fail "rows $(rows "$W/c.db") != $n1 + $n2"
  ;;
verbs)  # gpus table (text and JSON), --version, --help
  "$T" gpus >"$out" 2>&1 || fail "gpus exit $?"
  for g in A100 H100 H200 L4 L40S "RTX 4090"; do grep -q "^$g " "$out" || fail "gpus lacks $g"; done
  "$T" gpus --json >"$out" 2>&1 || fail "gpus --json exit $?"
  grep -q '"name": "H100"' "$out" && grep -q '"smem_per_block_kb": 227' "$out" && grep -q '"bf16_tflops": 989' "$out" \
    || fail "gpus --json fields"
  "$T" gpus --bogus >"$out" 2>&1
  [ $? -eq 2 ] || fail "gpus --bogus"
  "$T" --version >"$out" 2>&1 && grep -q "^attntune [0-9]" "$out" || fail "--version"
  "$T" --help >"$out" 2>&1 && grep -q "tune" "$out" && grep -q "gpus" "$out" || fail "--help"
  "$T" tune --help >"$out" 2>&1 && grep -q "RANGE" "$out" || fail "tune --help"
  ;;
jobs)  # parallel compiles (own cache, so they really compile) give rows as serial ones do
  export ATTN_CACHE_DIR="$W/cache"
  "$T" --gpu cpu --d 16 --n 64 --budget 4 --jobs 2 --db "$W/j.db" >"$out" 2>&1 || fail "exit $?"
  n=$(rows "$W/j.db")
  [ "$n" -ge 4 ] && [ "$n" -le 5 ] || fail "rows $n"
  [ "$(grep -c ": ok " "$out")" -eq "$n" ] || fail "not all ok"
  ;;
decode)  # decode and cross-attention have their own key: n_kv in the rows, decode rows never serve prefill
  "$T" --gpu cpu --d 32 --n 1 --n-kv 300 --heads 2 --budget 3 --db "$W/d.db" >"$out" 2>&1 || fail "exit $?"
  grep -q "best n=1 n_kv=300 d=32 f32 causal=0: flash" "$out" || fail "no best line for n=1 n_kv=300"
  [ "$(sqlite3 "$W/d.db" "SELECT COUNT(*) FROM measurements WHERE n = 1 AND n_kv = 300 AND threads > 0")" = \
    "$(rows "$W/d.db")" ] || fail "rows lack n_kv or threads"
  "$PLAN" "$W/d.db" 32 1 2 300 >"$out" 2>&1 || fail "decode plan is not tuned (exit $?)"
  grep -q "(tuned)" "$out" || fail "decode describe"
  "$PLAN" "$W/d.db" 32 1 2 2000 >"$out" 2>&1 || fail "nearest n_kv not used (exit $?)"
  grep -q "(tuned at n_kv=300: nearest stored shape)" "$out" || fail "describe of the nearest n_kv"
  "$PLAN" "$W/d.db" 32 256 2 >"$out" 2>&1
  [ $? -eq 3 ] || fail "a prefill problem was served by a decode row"
  grep -q "default: no prefill row" "$out" || fail "describe of the prefill default"
  "$T" show --db "$W/d.db" >"$out" 2>&1 || fail "show"
  grep -q " 1  *300  *2 " "$out" || fail "show lacks n_kv"
  ;;
env_retry)  # failures the environment caused are measured again by the next run; a kernel's own are final
  export ATTN_CACHE_DIR="$W/cache"
  CC=/nonexistent/cc "$T" --gpu cpu --d 16 --n 64 --budget 2 --db "$W/e.db" >"$out" 2>&1
  [ $? -eq 1 ] && grep -q "no usable configuration for 1 of the 1 problems" "$out" || fail "a run of errors only"
  [ "$(sqlite3 "$W/e.db" "SELECT COUNT(*) FROM measurements WHERE status = 'error' AND log LIKE '%[environment]%'")" \
    -eq 2 ] || fail "a missing compiler was not stored as an environmental error"
  "$T" --gpu cpu --d 16 --n 64 --budget 2 --db "$W/e.db" >"$out" 2>&1 || fail "retry exit $?"
  grep -q "found stored" "$out" && grep -q " 0 found stored" "$out" || fail "retry took stored errors as final"
  [ "$(sqlite3 "$W/e.db" "SELECT COUNT(*) FROM measurements WHERE status = 'error'")" -eq 0 ] || fail "errors left"
  [ "$(sqlite3 "$W/e.db" "SELECT COUNT(*) FROM measurements WHERE status = 'ok' AND chosen = 1")" -eq 1 ] || fail "choice"
  # a compiler that runs and rejects the source is the kernel's verdict: kept, not retried
  CC=false "$T" --gpu cpu --d 24 --n 64 --budget 1 --db "$W/f.db" >"$out" 2>&1
  [ $? -eq 1 ] || fail "false: exit $?, want 1"
  "$T" --gpu cpu --d 24 --n 64 --budget 1 --db "$W/f.db" >"$out" 2>&1
  [ $? -eq 1 ] || fail "rerun: exit $?, want 1 (the stored compile error is the answer)"
  grep -q "1 found stored" "$out" || fail "a compile error was measured again"
  ;;
remeasure)  # --remeasure times stored rows again (same rows, new times) and runs the finalist round again
  "$T" --gpu cpu --d 32 --n 128 --budget 2 --db "$W/m.db" >"$out" 2>&1 || fail "exit $?"
  n=$(rows "$W/m.db")
  t1=$(sqlite3 "$W/m.db" "SELECT group_concat(created) FROM measurements ORDER BY id")
  "$T" --gpu cpu --d 32 --n 128 --budget 2 --remeasure --db "$W/m.db" >"$out" 2>&1 || fail "remeasure exit $?"
  grep -q "($n stored now, 0 found stored)" "$out" || fail "not all re-timed"
  grep -q "finalists (" "$out" || fail "no finalist round on --remeasure"
  [ "$(rows "$W/m.db")" -eq "$n" ] || fail "rows changed in number"
  [ "$(sqlite3 "$W/m.db" "SELECT group_concat(created) FROM measurements ORDER BY id")" != "$t1" ] || fail "same rows"
  [ "$(sqlite3 "$W/m.db" "SELECT COUNT(*) FROM measurements WHERE chosen = 1")" -eq 1 ] || fail "one choice"
  ;;
lua_gc|lua_xpcall|lua_pattern)  # runaways no hook stops: a looping finalizer or error handler, C-level backtracking
  case $case_ in lua_gc) script=gc_loop ;; lua_xpcall) script=xpcall_loop ;; *) script=pattern ;; esac
  start=$(date +%s)
  # timeout: a tuner that never stops fails here, not at CTest's limit
  ATTN_LUA_TIMEOUT_S=1 timeout 30 "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/$script.lua" --db "$W/r.db" \
    >"$out" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  [ $rc -eq 1 ] || fail "exit $rc, want 1"
  grep -q "strategy .*$script.lua: stopped after 1 s (runaway script?)" "$out" || fail "message"
  [ $took -le 5 ] || fail "took $took s"
  # the evaluation made before stays, and the tuner ends its run normally
  [ "$(rows "$W/r.db")" -eq 1 ] || fail "rows $(rows "$W/r.db"), want 1"
  grep -q "^1 evaluations (1 stored now, 0 found stored)" "$out" || fail "no summary line"
  # no interpreter left running (a fork of the tuner carries its command line)
  if command -v pgrep >/dev/null; then pgrep -f -- "--db $W/r.db" >/dev/null && fail "a process outlived the run"; fi
  if [ "$case_" = lua_gc ]; then  # a strategy that finishes is not held up by a finalizer that would loop at close
    start=$(date +%s)
    ATTN_LUA_TIMEOUT_S=1 timeout 30 "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/gc_close.lua" \
      --db "$W/c.db" >"$out" 2>&1 || fail "gc_close exit $?"
    took=$(( $(date +%s) - start ))
    grep -q "gc_close done" "$out" && grep -q "(model, 1 evaluated)" "$out" || fail "gc_close did not finish"
    [ $took -le 5 ] || fail "gc_close took $took s"
  fi
  ;;
lua_sigint)  # Ctrl-C stops a script within ~2 s, looping in Lua or in C (string.find), with its evaluation stored
  for script in busy pattern; do
    "$T" --gpu A100 --d 64 --dtype f16 --strategy "$LUA/$script.lua" --db "$W/$script.db" >"$W/$script.txt" 2>&1 &
    pid=$!
    i=0
    until grep -q "^$script: " "$W/$script.txt"; do  # evaluated, then in its loop
      i=$((i + 1))
      [ $i -lt 300 ] || { kill $pid; cp "$W/$script.txt" "$out"; fail "$script: did not start its loop in 30 s"; }
      sleep 0.1
    done
    sleep 0.2
    kill -INT $pid
    i=0
    while kill -0 $pid 2>/dev/null; do
      i=$((i + 1))
      [ $i -le 20 ] || { kill -KILL $pid; cp "$W/$script.txt" "$out"; fail "$script: still running 2 s after SIGINT"; }
      sleep 0.1
    done
    wait $pid
    rc=$?
    cp "$W/$script.txt" "$out"
    [ $rc -eq 130 ] || fail "$script: exit $rc, want 130"
    grep -q "interrupted: 1 measurements stored; run the same command to resume" "$out" || fail "$script: message"
    [ "$(rows "$W/$script.db")" -eq 1 ] || fail "$script: rows $(rows "$W/$script.db"), want 1"
    if command -v pgrep >/dev/null; then
      pgrep -f -- "--db $W/$script.db" >/dev/null && fail "$script: a process outlived the run"
    fi
  done
  ;;
shard)  # --shard K/N: every problem in exactly one part; the parts merged are one unsharded run, row for row (the
  # model's rows are deterministic, so bit for bit: export and show --json compared without times of day and run ids)
  A="--gpu A100 --d 64,128 --n 256,1024,4096 --causal 0,1"
  "$T" $A --db "$W/all.db" >"$out" 2>&1 || fail "unsharded exit $?"
  canon() { # DB: the export's devices and measurements, without created and run, in a fixed order
    "$T" export - --db "$1" 2>>"$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
print(json.dumps(d["devices"], sort_keys=True))
ms = [{k: v for k, v in m.items() if k not in ("created", "run")} for m in d["measurements"]]
print("\n".join(sorted(json.dumps(m, sort_keys=True) for m in ms)))'
  }
  canon "$W/all.db" >"$W/all.txt" || fail "export of the unsharded run"
  "$T" show --json --db "$W/all.db" | grep -v '"created"' >"$W/all.show" || fail "show of the unsharded run"
  for n in 2 3 5; do
    parts=
    k=1
    while [ $k -le $n ]; do
      "$T" $A --shard $k/$n --db "$W/p$k-$n.db" >"$out" 2>&1 || fail "part $k/$n exit $?"
      grep -q "^shard $k/$n: [0-9]* of the 24 problems" "$out" || fail "part $k/$n: no shard line"
      parts="$parts $W/p$k-$n.db"
      k=$((k + 1))
    done
    # the parts are disjoint and cover the problems
    for p in $parts; do sqlite3 "$p" "SELECT DISTINCT n, d, causal, dtype FROM measurements"; done | sort >"$W/keys.txt"
    [ "$(wc -l <"$W/keys.txt")" -eq 24 ] && [ "$(sort -u "$W/keys.txt" | wc -l)" -eq 24 ] || fail "$n parts: problems not one each"
    "$T" merge "$W/m$n.db" $parts >"$out" 2>&1 || fail "merge of $n parts exit $?"  # a new target: created
    canon "$W/m$n.db" >"$W/m$n.txt" || fail "export of the merge"
    cmp "$W/all.txt" "$W/m$n.txt" >"$out" 2>&1 || fail "$n parts merged differ from the unsharded run (export)"
    "$T" show --json --db "$W/m$n.db" | grep -v '"created"' >"$W/m$n.show" || fail "show of the merge"
    cmp "$W/all.show" "$W/m$n.show" >"$out" 2>&1 || fail "$n parts merged differ from the unsharded run (show --json)"
  done
  # more parts than problems: the extra parts tune nothing and succeed
  "$T" --gpu A100 --d 64 --n 256 --dtype bf16 --shard 2/2 --db "$W/none.db" >"$out" 2>&1 || fail "an empty part exit $?"
  grep -q "^shard 2/2: 0 of the 1 problems" "$out" && [ "$(rows "$W/none.db")" -eq 0 ] || fail "an empty part"
  # measured parts: each CPU problem whole (finalist round, chosen row) in one part
  for k in 1 2; do
    "$T" --gpu cpu --d 16 --n 64,96 --budget 1 --time-cap 0.1 --shard $k/2 --db "$W/c$k.db" >"$out" 2>&1 || fail "cpu part $k"
    [ "$(sqlite3 "$W/c$k.db" "SELECT COUNT(DISTINCT n) || ' ' || SUM(chosen) FROM measurements")" = "1 1" ] ||
      fail "cpu part $k: not one problem with its choice"
  done
  "$T" merge "$W/c.db" "$W/c1.db" "$W/c2.db" >"$out" 2>&1 || fail "cpu merge"
  [ "$(sqlite3 "$W/c.db" "SELECT group_concat(n) FROM (SELECT n FROM measurements WHERE chosen = 1 ORDER BY n)")" = "64,96" ] ||
    fail "cpu merge lacks a problem"
  # bad values: exit 2, one line, no database
  for v in 0/2 3/2 x 1/0 1/ /2 -1/2 1/2/3 "1 /2" 1/1000001; do
    "$T" --gpu A100 --d 64 --shard "$v" --db "$W/bad.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "^attntune tune: --shard " "$out" || fail "--shard '$v': exit $rc"
  done
  [ ! -e "$W/bad.db" ] || fail "a bad --shard created the database"
  ;;
no_gpu)  # --gpu is required: a forgotten --gpu A100 is a usage error, not a CPU tune
  "$T" --d 64 --db "$W/x.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "^attntune tune: --gpu is required: --gpu cpu measures" "$out" ||
    fail "exit $rc"
  "$T" tune --d 64 --n 128 --db "$W/x.db" >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "gpu is required" "$out" || fail "tune verb"
  [ ! -e "$W/x.db" ] || fail "a tune without --gpu created the database"
  ;;
gpu_alias)  # a variant's name is taken as its table entry with a note naming it; one not in the table is refused
  "$T" --gpu H100-SXM --d 64 --n 256 --dtype bf16 --db "$W/a.db" >"$out" 2>&1 || fail "H100-SXM exit $?"
  grep -q "^note: 'H100-SXM' is not a table name: taken as H100 (H100 SXM5 80GB" "$out" || fail "no note"
  [ "$(sqlite3 "$W/a.db" "SELECT DISTINCT d.name FROM measurements m JOIN devices d ON d.id = m.device_id")" = H100 ] ||
    fail "rows not under H100"
  "$T" --gpu h100 --d 64 --n 256 --dtype bf16 --db "$W/b.db" >"$out" 2>&1 || fail "h100 exit $?"
  grep -q "^note:" "$out" && fail "a note for the table's own name"
  "$T" --gpu H100-PCIe --d 64 --db "$W/c.db" >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] && grep -q "unknown GPU 'H100-PCIe': known: A100, H100" "$out" ||
    fail "H100-PCIe: exit $rc"
  ;;
help)  # help VERB is that verb's help; defaults and the environment are in the help; the manual page is its text
  "$T" help tune >"$out" 2>&1 || fail "help tune exit $?"
  grep -q "^usage: attntune \[tune\] --gpu NAME|cpu" "$out" || fail "help tune is not tune's help"
  grep -q -- "--n RANGE query rows (default 1024)" "$out" || fail "--n's default"
  grep -q -- "--shard K/N" "$out" || fail "--shard"
  "$T" tune --help >"$W/tune-help.txt" 2>&1 && cmp "$out" "$W/tune-help.txt" >/dev/null || fail "help tune != tune --help"
  for v in show export import merge gpus io bench; do
    "$T" help $v >"$out" 2>&1 || fail "help $v exit $?"
    grep -q "^usage: attntune $v" "$out" || fail "help $v"
  done
  "$T" help nosuch >"$out" 2>&1
  [ $? -eq 2 ] && grep -q "unknown verb 'nosuch'" "$out" || fail "help nosuch"
  "$T" help >"$out" 2>&1 || fail "help exit $?"
  grep -q "XDG_CACHE_HOME" "$out" && grep -q "help VERB" "$out" || fail "help lacks the environment or help VERB"
  # the manual page, made by the build from the same texts
  man1=$(dirname "$T")/attntune.1
  [ -s "$man1" ] || fail "no $man1"
  grep -q '^\.TH ATTNTUNE 1 ' "$man1" || fail "no .TH"
  for v in tune show export import merge gpus io bench; do
    grep -q "^\.B $v\$" "$man1" && grep -q "^\.SS $v\$" "$man1" || fail "the manual lacks $v"
    # every line of the verb's help, unescaped, is in the page
    "$T" help $v >"$W/h.txt" 2>&1
    sed -e 's/^\\&//' -e 's/\\-/-/g' -e 's/\\e/\\/g' "$man1" >"$W/man.txt"
    while IFS= read -r line; do
      grep -F -x -q -- "$line" "$W/man.txt" || fail "the manual lacks '$line' of $v's help"
    done <"$W/h.txt"
  done
  if command -v groff >/dev/null 2>&1; then
    groff -man -Tascii -ww -z "$man1" >"$out" 2>&1 || fail "groff exit $?"
    [ ! -s "$out" ] || fail "groff warns"
  fi
  # installed with the CLI
  if command -v cmake >/dev/null 2>&1; then
    cmake --install "$(dirname "$T")/.." --prefix "$W/inst" >"$out" 2>&1 || fail "cmake --install exit $?"
    cmp "$man1" "$W/inst/share/man/man1/attntune.1" >"$out" 2>&1 || fail "the manual page is not in share/man/man1"
  fi
  ;;
xdg)  # XDG_CACHE_HOME (absolute) holds the default database and the kernel cache; a relative one is ignored
  unset ATTN_DB ATTN_CACHE_DIR
  XDG_CACHE_HOME="$W/xdg" HOME="$W/home" "$T" --gpu A100 --d 64 --n 256 >"$out" 2>&1 || fail "model exit $?"
  [ "$(rows "$W/xdg/attntune/attntune.db")" -gt 0 ] || fail "no rows in \$XDG_CACHE_HOME/attntune/attntune.db"
  XDG_CACHE_HOME="$W/xdg" HOME="$W/home" "$T" show >"$out" 2>&1 && grep -q "^A100 " "$out" || fail "show's default"
  # the runtime: its default database (no tuned CPU row there: the default plan, exit 3) and its kernel cache
  XDG_CACHE_HOME="$W/xdg" HOME="$W/home" "$PLAN" "" 16 64 2 >"$out" 2>&1
  rc=$?
  [ $rc -eq 3 ] && grep -q "(default" "$out" || fail "runtime exit $rc"
  [ -n "$(ls "$W/xdg/attntune/so" 2>/dev/null)" ] || fail "no compiled kernels in \$XDG_CACHE_HOME/attntune/so"
  [ ! -e "$W/home/.cache" ] || fail "~/.cache used although XDG_CACHE_HOME is set"
  XDG_CACHE_HOME=relative HOME="$W/home" "$T" --gpu A100 --d 64 --n 256 >"$out" 2>&1 || fail "relative exit $?"
  [ "$(rows "$W/home/.cache/attntune/attntune.db")" -gt 0 ] && [ ! -e relative ] || fail "a relative XDG_CACHE_HOME was used"
  ;;
io_svg)  # the regimes figure's legend fits in the canvas: no label runs past the width (8 px a character at 13 px)
  "$T" io --n 128 --d 32 --sweep 256..1024 --plot "$W/io.svg" >"$out" 2>&1 || fail "io exit $?"
  w=$(sed -n 's/^<svg [^>]* width="\([0-9.]*\)".*/\1/p' "$W/io.svg")
  [ -n "$w" ] || fail "no width"
  grep -q '>4nd (read Q,K,V, write O)</text>' "$W/io.svg" || fail "no legend"
  over=$(grep -o '<text x="[0-9.]*" y="[0-9.]*">[^<]*</text>' "$W/io.svg" | awk -F'"' -v W="$w" '{
    t = $0; sub(/^[^>]*>/, "", t); sub(/<\/text>$/, "", t); gsub(/&[^;]*;/, "e", t)
    if ($2 + 8 * length(t) > W) print t }')
  [ -z "$over" ] || fail "clipped past width $w: $over"
  ;;
too_many)  # a cross product beyond the cap: exit 2 with one line naming the count and the cap, before anything runs
  for args in "--dtype f16,bf16 --causal 0,1 --d 1..512:1 --dv 1..512:1 --n 1..4096:1|4294967296" \
              "--d 1..576:1 --dv 1..576:1|663552" "--d 64 --n 1..4096:1 --n-kv 1..4096:1|33554432" \
              "--d 1..576:1 --n 1..114:1|131328"; do
    a=${args%|*} count=${args#*|}
    "$T" --gpu A100 $a --db "$W/m.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] || fail "'$a': exit $rc, want 2 and one line"
    grep -q "^attntune tune: .* make $count problems, more than the 65536 one run tunes" "$out" || fail "'$a': message"
  done
  [ ! -e "$W/m.db" ] || fail "a refused command created the database"
  ;;
row_limit)  # a problem beyond the runtime's limits is a usage error before anything runs, wherever it is in the lists
  for args in "--gpu cpu --d 64 --n 2147483000|n=2147483000 n_kv=2147483000: at most 2147482623 rows" \
              "--gpu A100 --d 64 --n 1,64 --n-kv 16,2147483000|n=1 n_kv=2147483000: at most 2147482623 rows" \
              "--gpu A100 --d 64,576 --heads 4096 --batch 4096 --n 256,200000000|problem too large"; do
    a=${args%|*} msg=${args#*|}
    "$T" $a --db "$W/r.db" >"$out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$out")" -eq 1 ] || fail "'$a': exit $rc, want 2 and one line"
    grep -q "^attntune tune: $msg" "$out" || fail "'$a': message"
  done
  [ ! -e "$W/r.db" ] || fail "a refused command created the database"
  ;;
small_d)  # d < 16 and DeepSeek's 576/512 in half precision: configurations the model ranks, on H100 and A100
  "$T" --gpu H100 --d 7 --dtype bf16 --db "$W/s.db" >"$out" 2>&1 || fail "d=7 exit $?"
  grep -q "^best n=1024 d=7 bf16 causal=0: flash d=7 .* (model, [0-9]* evaluated)" "$out" || fail "d=7: no best"
  grep -q ": invalid" "$out" && fail "d=7: invalid configurations"
  for g in H100 A100; do
    "$T" --gpu $g --d 576 --dv 512 --causal 0,1 --db "$W/s.db" >"$out" 2>&1 || fail "$g 576/512 exit $?"
    [ "$(grep -c "^best n=1024 d=576 d_v=512 b\{0,1\}f16 causal=[01]: flash d=576 d_v=512 .* warps=8 .*(model," "$out")" \
      -eq 4 ] || fail "$g 576/512: not a best for f16 and bf16, causal and not"
  done
  ;;
compiled_rerank)  # --compiled after a model run (README's order) ranks the stored rows again with compiled registers
  "$T" --gpu A100 --d 16 --algo smallcache --dtype bf16 --db "$W/t.db" >"$out" 2>&1 || fail "model run exit $?"
  n=$(rows "$W/t.db")
  [ "$n" -ge 4 ] || fail "model run: $n rows"
  [ "$(sqlite3 "$W/t.db" "SELECT COUNT(*) FROM measurements WHERE log LIKE '% registers estimated'")" -eq "$n" ] ||
    fail "model rows do not say their registers were estimated"
  "$T" --gpu A100 --d 16 --algo smallcache --dtype bf16 --compiled --jobs 2 --db "$W/t.db" >"$out" 2>&1 ||
    fail "--compiled exit $?"
  if grep -q "NVRTC is not available" "$out"; then echo "SKIP ($case_): NVRTC is not available"; exit 77; fi
  grep -q "^stored model rows of estimated registers: $n ranked again with the compiled kernels' and 0 ruled out" \
    "$out" || fail "the stored rows were not ranked again"
  grep -q "($n stored now, 0 found stored)" "$out" || fail "rows found stored were not replaced"
  [ "$(rows "$W/t.db")" -eq "$n" ] || fail "rows changed in number"
  [ "$(sqlite3 "$W/t.db" "SELECT COUNT(*) FROM measurements WHERE log LIKE '% registers from ptxas (nvrtc %)'")" \
    -eq "$n" ] || fail "rows do not say their registers are ptxas's"
  # registers differ from the estimate: some figure moved (the model's occupancy) and the best is the fastest row
  best=$(sqlite3 "$W/t.db" "SELECT k.spec FROM best b JOIN kernels k ON k.id = b.kernel_id")
  fastest=$(sqlite3 "$W/t.db" "SELECT k.spec FROM measurements m JOIN kernels k ON k.id = m.kernel_id
                                ORDER BY m.time_ms, m.id LIMIT 1")
  [ -n "$best" ] && [ "$best" = "$fastest" ] || fail "best '$best' is not the fastest '$fastest'"
  # what ptxas rules out (a spill, here told by the database) is ruled out of the stored rows too, without compiling
  sqlite3 "$W/t.db" "UPDATE kernel_resources SET spill_bytes = 64 WHERE spec = '$best'" || fail "sqlite3"
  "$T" --gpu A100 --d 16 --algo smallcache --dtype bf16 --db "$W/t.db" >"$out" 2>&1 || fail "rerun exit $?"
  grep -q "0 ranked again with the compiled kernels' and 1 ruled out" "$out" || fail "the spilling row stayed"
  [ "$(sqlite3 "$W/t.db" "SELECT m.status FROM measurements m JOIN kernels k ON k.id = m.kernel_id
                          WHERE k.spec = '$best'")" = invalid ] || fail "the spilling row is not invalid"
  [ "$(sqlite3 "$W/t.db" "SELECT k.spec FROM best b JOIN kernels k ON k.id = b.kernel_id")" != "$best" ] ||
    fail "the best is still the spilling kernel"
  ;;
doc_refs)  # the build files and the README name only documents that exist
  src=$(cd "$(dirname "$0")/.." && pwd)
  missing=
  for f in "$src/CMakeLists.txt" "$src"/*/CMakeLists.txt "$src"/tests/*.cmake "$src/README.md"; do
    for ref in $(grep -o 'docs/[A-Za-z0-9_./-]*\.\(md\|svg\)' "$f" | sort -u); do
      [ -e "$src/$ref" ] || missing="$missing ${f#$src/}:$ref"
    done
  done
  [ -z "$missing" ] || fail "missing documents:$missing"
  ;;
*) echo "unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_)"
