#!/usr/bin/env bash
# validate.sh OUTDIR [--build DIR] [--db DB] [--gpu NAME]: attntune on an NVIDIA GPU (sm_80 or newer), end to end, in
# about 8 minutes on an H100; docs/gpu-validation.md says what each step checks. Writes OUTDIR/report.md,
# OUTDIR/report.json and OUTDIR/logs/.
#   --build DIR  a pack (scripts/gpu/pack.sh) or a build directory; default $ATTN_BUILD, else .gpu-pack/ at the top of
#                the source tree when it holds a pack, else build/
#   --db DB      a tuned database whose rows are also timed against SDPA (the tuning run's own rows always are)
#   --gpu NAME   the spec table's name for the model's predictions and the tuning run (default: from nvidia-smi)
# Steps run in order; without a GPU every step before the first that needs one runs and the rest are reported as
# not run. A step whose tool is missing (torch, ncu, compute-sanitizer) is reported as skipped with the reason.
# Exit: 0 every check passed; 1 a correctness check failed; 2 usage; 3 the kit cannot run here (no build, a library
# unresolved, no NVRTC); 4 nothing failed but a step errored or ran out of time; 77 no GPU (every step before the
# first GPU step passed). Budgets: $ATTN_VALIDATE_BUDGET seconds in all (default 470), split among the steps, the
# newest code's first (gpukit_check: the sm_90a template, the backward's variants, varlen and paged, decode); a step
# whose kernel never ends is killed at its limit and reported, and the rest still run. $ATTN_VALIDATE_SKIP: a grep -E
# pattern of step ids after the device step to leave out (reported as not run).
set -u
usage() { echo "usage: validate.sh OUTDIR [--build DIR] [--db DB] [--gpu NAME]" >&2; exit 2; }
[ $# -ge 1 ] || usage
out=$1
shift
build=${ATTN_BUILD:-} db= gpu=
while [ $# -gt 0 ]; do
  case $1 in
    --build) [ $# -ge 2 ] || usage; build=$2; shift 2 ;;
    --db) [ $# -ge 2 ] || usage; db=$2; shift 2 ;;
    --gpu) [ $# -ge 2 ] || usage; gpu=$2; shift 2 ;;
    *) echo "validate.sh: unknown argument $1" >&2; usage ;;
  esac
done
case $out in -*|"") usage ;; esac
if [ -n "$db" ] && [ ! -f "$db" ]; then echo "validate.sh: no database $db" >&2; exit 2; fi
budget=${ATTN_VALIDATE_BUDGET:-470}
case $budget in ''|*[!0-9]*) echo "validate.sh: ATTN_VALIDATE_BUDGET must be a number of seconds" >&2; exit 2 ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
mkdir -p "$out/logs" || exit 3
out=$(cd "$out" && pwd)
logs=$out/logs
[ -z "$db" ] || db=$(cd "$(dirname "$db")" && pwd)/$(basename "$db")
work=$(mktemp -d "${TMPDIR:-/tmp}/attntune-validate.XXXXXX") || exit 3
chmod 700 "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
deadline=$((start + budget))
steps=$work/steps.tsv
: >"$steps"
: >"$work/facts.tsv"

# step ID STATUS SECONDS SUMMARY: one line of the report (pass, fail, error, skipped, not run)
step() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$(printf '%s' "$4" | tr '\t\n' '  ')" >>"$steps"; echo "[$2] $1: $4"; }
fact() { printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | tr '\t\n' '  ')" >>"$work/facts.tsv"; }
# limit WANT: seconds a step may take, WANT or what is left of the whole budget (at least 5)
limit() { local left=$((deadline - $(date +%s))); [ "$left" -lt "$1" ] && echo $((left > 5 ? left : 5)) || echo "$1"; }
# tmo SECONDS CMD...: CMD with a time limit (124 when it ran out, as timeout(1))
tmo() { local s=$1; shift; timeout -k 5 "$s" "$@"; }
now() { date +%s; }

# ---- 1. the build: a pack or a build directory, and nothing unresolved by ldd
t0=$(now)
if [ -z "$build" ]; then
  if [ -f "$src/.gpu-pack/.attntune-pack" ]; then build=$src/.gpu-pack; else build=$src/build; fi
fi
mode= cli= lib= runner= manifest=
if [ -f "$build/.attntune-pack" ]; then
  build=$(cd "$build" && pwd)
  mode=pack cli=$build/bin/attntune lib=$build/lib/libattn.so runner=$build/tests/gpukit_run
  manifest=$build/tests/gpu-tests.txt
  ATTN_PACK=$build
  # shellcheck disable=SC1091
  . "$build/env.sh"
elif [ -f "$build/CMakeCache.txt" ]; then
  build=$(cd "$build" && pwd)
  mode=build cli=$build/tuner/attntune lib=$build/runtime/libattn.so runner=$build/tests/gpukit_run
  manifest=$work/gpu-tests.txt
  if [ -z "${ATTN_NVRTC:-}" ] && [ -e /usr/local/cuda/lib64/libnvrtc.so.13 ]; then
    export ATTN_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13
  fi
  export ATTNTUNE_LIB=$lib ATTNTUNE_CLI=$cli PYTHONPATH="$src/python${PYTHONPATH:+:$PYTHONPATH}"
fi
bad=
for f in "$cli" "$lib" "$runner"; do [ -n "$mode" ] && [ -e "$f" ] || bad="$bad ${f:-$build}"; done
if [ -z "$bad" ] && [ "$mode" = build ]; then
  if ! ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 2>"$logs/ctest-list.log" |
       python3 "$here/gpu_tests.py" "$build" "$src" "$manifest" >>"$logs/ctest-list.log" 2>&1; then
    bad=" (listing the gpu tests: $(tail -1 "$logs/ctest-list.log"))"
  fi
fi
[ -z "$bad" ] && [ ! -f "$manifest" ] && bad=" $manifest"
if [ -n "$bad" ]; then
  step build fail $(($(now) - t0)) "no usable build or pack at $build: missing$bad (scripts/gpu/pack.sh DIR, or --build DIR)"
else
  unresolved=$(for f in "$cli" "$lib" "$runner" $(cut -f6 "$manifest" | grep -v '^command' | sed -n "s|^'\{0,1\}@BUILD@\([^ ']*\).*|$build\1|p" | sort -u); do
    ldd "$f" 2>&1 | grep 'not found' | sed "s|^[[:space:]]*|$(basename "$f"): |"
  done | sort -u)
  if [ -n "$unresolved" ]; then
    step build fail $(($(now) - t0)) "unresolved shared libraries: $(echo "$unresolved" | tr '\n' ';')"
  else
    step build pass $(($(now) - t0)) "$mode $build: $(grep -vc '^#' "$manifest") gpu tests"
  fi
fi
fact build "$build"
fact mode "${mode:-none}"

finish() { # the report, then the exit code
  local code=$1
  python3 - "$out" "$steps" "$work/facts.tsv" "$code" <<'EOF' || { echo "validate.sh: python3 could not write the report" >&2; cp "$steps" "$out/report.md"; }
import json, os, sys
out, steps_f, facts_f, code = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
steps = [dict(zip(("id", "status", "seconds", "summary"), l.rstrip("\n").split("\t"))) for l in open(steps_f) if l.strip()]
for s in steps:
    s["seconds"] = int(s["seconds"])
facts = dict(l.rstrip("\n").split("\t", 1) for l in open(facts_f) if "\t" in l)
def load(name):
    p = os.path.join(out, name)
    try:
        return json.load(open(p))
    except (OSError, ValueError):
        return None
meanings = {0: "every check passed", 1: "a correctness check failed", 3: "the kit cannot run here",
            4: "no check failed, but a step errored or ran out of time", 77: "no GPU found: the steps that need one did not run"}
rep = {"exit_code": code, "verdict": meanings.get(code, "?"), "facts": facts, "steps": steps,
       "speed": load("speed.json"), "dram": load("dram.json"), "tests": load("gpu-tests.json"),
       "checks": {k: load(k + ".json") for k in ("sm90", "sm90-speed", "backward", "serve", "decode") if load(k + ".json")}}
json.dump(rep, open(os.path.join(out, "report.json"), "w"), indent=2)
L = ["# attntune GPU validation", "", "Verdict: **%s** (exit %d)." % (rep["verdict"], code), ""]
for k in ("gpu", "device", "driver", "nvrtc", "nvcc", "torch", "compute_sanitizer", "ncu", "build", "mode", "cubins",
          "budget_s"):
    if k in facts:
        L.append("- %s: %s" % (k, facts[k]))
L += ["", "| step | status | s | summary |", "|---|---|---|---|"]
L += ["| %s | %s | %d | %s |" % (s["id"], s["status"], s["seconds"], s["summary"].replace("|", "/")) for s in steps]
if rep["tests"]:
    bad = [t for t in rep["tests"] if t["status"] != "pass"]
    L += ["", "## gpu tests: %d run, %d not passed" % (len(rep["tests"]), len(bad)), ""]
    L += ["- %s: %s (exit %s, %s s): %s" % (t["name"], t["status"], t["rc"], t["seconds"], t.get("why", ""))
          for t in bad]
ck = rep["checks"]
g = lambda x, f="%.1f": "-" if x is None else f % x if isinstance(x, (int, float)) else str(x)
if ck.get("sm90"):
    L += ["", "## sm_90a template (impl=wgmma) against fp64", "", "| case | plan | err fp64 | ok |", "|---|---|---|---|"]
    L += ["| %s | %s | %s | %s |" % (r["case"], r["plan"], g(r["err_fp64"], "%.1e"), r["ok"])
          for r in ck["sm90"] if r.get("kind") == "sm90_correct"]
if ck.get("sm90-speed"):
    sd = {(r["n"], r["causal"], r["backend"]): r for r in ck["sm90-speed"] if r.get("kind") == "sdpa"}
    L += ["", "## sm_90a template against the mma.sync flash and SDPA (bf16, d 128, 16k tokens of 16 heads; TFLOP/s)", "",
          "| n | batch | causal | wgmma | mma.sync | wgmma / mma.sync | SDPA flash | SDPA cuDNN | SDPA efficient | wgmma ms | err vs mma.sync |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ck["sm90-speed"]:
        if r.get("kind") != "sm90_time":
            continue
        b = lambda name: g(sd.get((r["n"], r["causal"], name), {}).get("tflops"))
        L.append("| %d | %d | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (r["n"], r["batch"], r["causal"],
                 g(r["wgmma_tflops"]), g(r["mma_sync_tflops"]), g(r["speedup"], "%.2f"), b("flash"), b("cudnn"),
                 b("efficient"), g(r["wgmma_ms"], "%.3f"), g(r["err_vs_mma_sync"], "%.1e")))
if ck.get("backward"):
    rs = ck["backward"]
    bad = [r for r in rs if r.get("kind") == "bwd_correct" and not r["ok"]]
    n_ok = sum(1 for r in rs if r.get("kind") == "bwd_correct" and r["ok"])
    L += ["", "## CUDA backward: tile variants (%d cases within the limits, %d not)" % (n_ok, len(bad)), ""]
    L += ["- %s %s: error %.2e > %.2e" % (r["case"], r["tiles"], r["err"], r["limit"]) for r in bad]
    sd = {(r["causal"], r["backend"]): r for r in rs if r.get("kind") == "sdpa" and r.get("pass") == "bwd"}
    sf = {(r["causal"], r["backend"]): r for r in rs if r.get("kind") == "sdpa" and r.get("pass") == "fwd"}
    L += ["", "bf16 d 128 n 4096, batch 4 x 16 heads; ms (CUDA events, ours and SDPA's)", "",
          "| causal | pass | tiles | ms | TFLOP/s | / our forward | SDPA flash ms | SDPA cuDNN ms | SDPA efficient ms |",
          "|---|---|---|---|---|---|---|---|---|"]
    for r in rs:
        if r.get("kind") != "bwd_time":
            continue
        c = int(r["case"].split("causal=")[1][0])
        src = sd if r["pass"] == "bwd" else sf
        b = lambda name: g(src.get((c, name), {}).get("ms"), "%.3f")
        L.append("| %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (c, r["pass"], r.get("tiles", "-"), g(r["ms"], "%.3f"),
                 g(r["tflops"]), g(r.get("bwd_over_fwd"), "%.2f"), b("flash"), b("cudnn"), b("efficient")))
if ck.get("serve"):
    L += ["", "## varlen and paged on the device", "", "| case | plan | worst err fp64 (per sequence) |", "|---|---|---|"]
    L += ["| %s | %s | %s |" % (r["case"], r["plan"], g(r["err_fp64"], "%.1e")) for r in ck["serve"]
          if r.get("kind") == "serve_correct"]
    L += ["", "Decode (bf16, d 128, 8 sequences of 8192 keys, 32/8 heads): paged against dense on the same keys", "",
          "| page size | dense ms | paged ms | dense GB/s | paged GB/s | paged / dense time | err vs dense |",
          "|---|---|---|---|---|---|---|"]
    L += ["| %d | %s | %s | %s | %s | %s | %s |" % (r["page_size"], g(r["dense_ms"], "%.3f"), g(r["paged_ms"], "%.3f"),
          g(r["dense_gbs"], "%.0f"), g(r["paged_gbs"], "%.0f"), g(r["paged_over_dense"], "%.2f"),
          g(r["err_vs_dense"], "%.1e")) for r in ck["serve"] if r.get("kind") == "decode_time"]
if ck.get("decode"):
    rs = [r for r in ck["decode"] if r.get("kind") == "decode"]
    L += ["", "## Decode (n = 1): the default plan, split-KV and the model's split against fp64", "",
          "ms by CUDA events (median of 20); GB/s: K and V once per KV head, Q and O; fraction: of the GPU's datasheet "
          "bandwidth (tuner/gpus.json). Cells: ms / fraction; \"refused\": attn_spec_check refuses the split; model: the split "
          "the performance model picks for the default tiles (0: none).", "",
          "| dtype | batch | heads | n_kv | d | causal | default | split 4 | split 16 | model (S) | worst err fp64 | worst vs default | all ok |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    probs = []
    for r in rs:
        key = (r["dtype"], r["batch"], r["heads"], r["heads_kv"], r["n_kv"], r["d"], r["causal"])
        if key not in probs:
            probs.append(key)
    for key in probs:
        pr = [r for r in rs if (r["dtype"], r["batch"], r["heads"], r["heads_kv"], r["n_kv"], r["d"], r["causal"]) == key]
        cell = lambda r: "%s / %s" % (g(r["ms"], "%.3f"), g(r["bw_fraction"], "%.2f")) if r else "refused"
        pick = lambda v, sp=None: next((r for r in pr if r["variant"] == v and (sp is None or r["split"] == sp)), None)
        ms = pr[0].get("model_split", -1)  # the model's S: its own row, or the split row it names
        m = pick("model") or (pick("split", ms) if ms > 1 else None)
        errs = [r["err_fp64"] for r in pr if r["err_fp64"] is not None]
        eds = [r["err_vs_default"] for r in pr if r["err_vs_default"] is not None]
        L.append("| %s | %d | %d/%d | %d | %d | %d | %s | %s | %s | %s | %s | %s | %s |" % (key[0], key[1], key[2],
                 key[3], key[4], key[5], key[6], cell(pick("default")), cell(pick("split", 4)), cell(pick("split", 16)),
                 "%s (%d)" % (cell(m), ms) if m else "-", g(max(errs, default=None), "%.1e"),
                 g(max(eds, default=None), "%.1e"), all(r["ok"] for r in pr)))
    L += ["- async: %s: same bits as the synchronous call: %s" % (r["case"], r["same_bits"])
          for r in ck["decode"] if r.get("kind") == "decode_async"]
if rep["speed"]:
    L += ["", "## Speed (TFLOP/s; model: the performance model's best configuration for this GPU)", "",
          "| source | dtype | batch | n | d | causal | plan | stream-ordered | plan TF | model TF | flash TF | cudnn TF | efficient TF | best SDPA ms / plan ms | err fp64 |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda x: "-" if x is None else ("%.1f" % x if isinstance(x, float) else str(x))
    for r in rep["speed"]:
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r.get("source"), r.get("dtype"), r.get("batch"), r.get("n"), r.get("d"), r.get("causal"), r.get("plan"), r.get("stream_ordered"),
            f(r.get("plan_tflops")), f(r.get("model_tflops")), f(r.get("flash_tflops")), f(r.get("cudnn_tflops")),
            f(r.get("efficient_tflops")), f(r.get("ratio_vs_best")),
            "%.1e" % r["err_fp64"] if isinstance(r.get("err_fp64"), float) else "-"))
if rep["dram"]:
    L += ["", "## DRAM bytes (ncu) against the closed forms", "",
          "Closed forms: every block's loads from global memory as if none hit the L2; floor: Q, K, V read and O "
          "written once (bytes).", "",
          "| kernel | shape | plan | ncu read | ncu write | closed-form read | closed-form write | ncu/closed | ncu/floor | time us |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    q = lambda a, b: "%.3f" % (a / b) if a is not None and b else "-"
    for r in rep["dram"]:
        rw = None if r.get("dram_read") is None else r["dram_read"] + (r.get("dram_write") or 0)
        cl = (r.get("closed_read") or 0) + (r.get("closed_write") or 0)
        L.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (r["algo"], r["shape"], r.get("plan"),
                 r.get("dram_read"), r.get("dram_write"), r.get("closed_read"), r.get("closed_write"),
                 q(rw, cl), q(rw, r.get("floor")), r.get("time_us")))
L += ["", "Logs: logs/ (one per step and test)."]
open(os.path.join(out, "report.md"), "w").write("\n".join(L) + "\n")
EOF
  echo "validate.sh: $out/report.md (exit $code)"
  exit "$code"
}
verdict() { # the exit code the steps so far call for
  if grep -q $'\tfail\t' "$steps"; then echo 1; elif grep -q $'\terror\t' "$steps"; then echo 4; else echo 0; fi
}
fact budget_s "$budget"
if grep -q $'^build\tfail' "$steps"; then
  step gpu-steps "not run" 0 "the build is not usable"
  finish 3
fi

# ---- 2. versions: NVRTC (needed), driver, toolkit and tools (optional)
t0=$(now)
if v=$(tmo 30 "$runner" nvrtc 2>&1); then
  fact nvrtc "${v#nvrtc=} (${ATTN_NVRTC:-libnvrtc.so.13 or .12 from the library path})"
  nvrtc_ok=1
else
  nvrtc_ok=0
fi
have() { command -v "$1" >/dev/null 2>&1; }
if have nvidia-smi; then
  nvidia-smi >"$logs/nvidia-smi.txt" 2>&1
  smi=$(nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1)
  [ -n "$smi" ] && fact device "$smi" && fact driver "$(echo "$smi" | cut -d, -f2 | tr -d ' ')"
else
  fact device "nvidia-smi not found"
fi
have nvcc && fact nvcc "$(nvcc --version | tail -2 | head -1)"
if have compute-sanitizer; then fact compute_sanitizer "$(compute-sanitizer --version | tail -1)"; else fact compute_sanitizer "not found"; fi
if have ncu; then fact ncu "$(ncu --version | tail -1)"; else fact ncu "not found"; fi
torch_v=$(tmo 60 python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda)' 2>"$logs/torch-import.log")
fact torch "${torch_v:-not importable: $(tail -1 "$logs/torch-import.log" 2>/dev/null)}"
if [ "$nvrtc_ok" = 1 ]; then
  step versions pass $(($(now) - t0)) "NVRTC $(grep '^nvrtc' "$work/facts.tsv" | cut -f2)"
else
  step versions fail $(($(now) - t0)) "NVRTC cannot be loaded: $v (set ATTN_NVRTC to libnvrtc.so)"
  step gpu-steps "not run" 0 "no NVRTC: nothing can be compiled"
  finish 3
fi

# ---- 3. the model's predictions for the speed grid (no GPU needed)
t0=$(now)
gpu_from=--gpu
if [ -z "$gpu" ]; then # the device step replaces this guess by the name libattn files the device under
  gpu_from="nvidia-smi's name"
  case ${smi:-} in
    *H200*) gpu=H200 ;; *H100*) gpu=H100 ;; *A100*) gpu=A100 ;; *L40S*) gpu=L40S ;; *L4*) gpu=L4 ;; *4090*) gpu="RTX 4090" ;;
    *) gpu=H100 gpu_from="assumed: no known GPU named by nvidia-smi" ;;
  esac
fi
# The speed grid: n:batch with batch x n = 16k tokens of 16 heads (FlashAttention-2's benchmark: the GPU filled at
# every n), and n = 4096 at batch 1, the tuning run's problem.
# n:batch:seconds:rounds (an H200 took about 45 s at n = 1024 and 60 s at 4096; 16k tokens a launch at every n)
grid="1024:16:60:5 4096:4:100:5 16384:1:160:3" grid_d=64,128,256
model() { # the model's best configuration per problem of the speed grid, for $gpu, into model.json
  rm -f "$work/model.db"
  local nb
  local n b rest
  for nb in $grid 4096:1; do
    IFS=: read -r n b rest <<EOG
$nb
EOG
    tmo "$(limit 30)" "$cli" --gpu "$gpu" --model --d "$grid_d" --n "$n" --batch "$b" --dtype f16,bf16 \
      --causal 0,1 --heads 16 --db "$work/model.db" >>"$logs/model.log" 2>&1 || return 1
  done
  "$cli" show --db "$work/model.db" --json >"$out/model.json" 2>>"$logs/model.log"
}
fact gpu "$gpu ($gpu_from)"
if model; then
  step model pass $(($(now) - t0)) "$gpu ($gpu_from): $(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$out/model.json" 2>/dev/null) predicted problems (model.json)"
else
  step model error $(($(now) - t0)) "attntune --gpu $gpu --model failed: $(tail -1 "$logs/model.log")"
fi

# ---- 4. the device (the first step that needs a GPU)
t0=$(now)
info=$(tmo 60 "$runner" info 2>&1)
rc=$?
echo "$info" >"$logs/device.log"
if [ "$rc" = 77 ]; then
  step device "not run" $(($(now) - t0)) "no GPU found: $(echo "$info" | sed -n 's/^SKIP: //p' | head -1)"
  for s in sm90 sm90-speed backward serve decode gpu-tests sanitizers dram tune bench speed; do step "$s" "not run" 0 "no GPU"; done
  code=$(verdict)
  [ "$code" = 0 ] && code=77
  finish "$code"
elif [ "$rc" != 0 ]; then
  step device fail $(($(now) - t0)) "the device does not open: $(echo "$info" | tail -1)"
  for s in sm90 sm90-speed backward serve decode gpu-tests sanitizers dram tune bench speed; do step "$s" "not run" 0 "the device does not open"; done
  finish 1
fi
step device pass $(($(now) - t0)) "$info"
table=$(echo "$info" | sed -n 's/.* table="\([^"]*\)".*/\1/p')
if [ "$gpu_from" != --gpu ] && [ -n "$table" ] && [ "$table" != "$gpu" ] && [ "${table#cuda:}" = "$table" ]; then
  gpu=$table gpu_from="the device"
  fact gpu "$gpu ($gpu_from)"
  t0=$(now)
  if model; then step model-device pass $(($(now) - t0)) "the model again for $gpu"; else step model-device error $(($(now) - t0)) "attntune --gpu $gpu --model failed"; fi
fi

export ATTN_CACHE_DIR=$work/test-cache-cuda
mkdir -p "$ATTN_CACHE_DIR"
chmod 700 "$ATTN_CACHE_DIR"
if [ -f "$build/cubins.tar.xz" ]; then # pack.sh --precompile: the kernel cache starts with them (this user's files)
  if tar -xJf "$build/cubins.tar.xz" -C "$ATTN_CACHE_DIR" --no-same-owner --no-same-permissions 2>"$logs/cubins.log"; then
    chmod 600 "$ATTN_CACHE_DIR"/*.cubin 2>/dev/null
    fact cubins "$(ls "$ATTN_CACHE_DIR" | grep -c '\.cubin$') precompiled by pack.sh"
  else
    fact cubins "not unpacked (compiled here instead): $(tail -1 "$logs/cubins.log")"
  fi
fi
jobs=$(nproc 2>/dev/null || echo 4)
[ "$jobs" -gt 16 ] && jobs=16
# in_time ID: false (and the step reported as an error) when the budget is spent
# ($ATTN_VALIDATE_SKIP, a grep -E pattern of step ids: those are reported as not run)
in_time() {
  if [ -n "${ATTN_VALIDATE_SKIP:-}" ] && echo "$1" | grep -Eq "$ATTN_VALIDATE_SKIP"; then
    step "$1" "not run" 0 "ATTN_VALIDATE_SKIP"
    return 1
  fi
  [ $((deadline - $(now))) -ge 10 ] && return 0
  step "$1" error 0 "out of time (ATTN_VALIDATE_BUDGET=$budget s)"
  return 1
}

# ---- 5-8. the newest CUDA code first, each mode of gpukit_check under its own time limit (a kernel that never
# ends is killed and reported, the steps after it still run): the sm_90a template against fp64, its speed against
# the mma.sync flash and SDPA, the backward's tile variants, varlen and paged, decode's split-KV and GQA-packed plans
checker=$build/tests/gpukit_check
# guarded ID MODE SECONDS: gpukit_check MODE, its RESULT lines appended to $work/ID.jsonl; g_st and g_why say how it
# ended: pass; fail (a wrong result, a crash, or a kernel still running at the time limit: "hung"); skipped (77, the
# device cannot run it); error (killed while compiling)
guarded() {
  local id=$1 mode=$2 log=$logs/$1.log marks
  if [ ! -x "$checker" ]; then g_st=error g_why="no $checker (build the gpukit_check target)"; return; fi
  tmo "$(limit "$3")" "$checker" "$mode" >"$log" 2>&1
  local rc=$?
  sed -n 's/^RESULT //p' "$log" >>"$work/$id.jsonl"
  marks=$(grep -E '^(case |run$)' "$log" | tail -2)
  case $rc in
    0) g_st=pass g_why="$(tail -1 "$log")" ;;
    77) g_st=skipped g_why="$(sed -n 's/^SKIP: //p' "$log" | head -1)" ;;
    124|137)
      if [ "$(echo "$marks" | tail -1)" = run ]; then
        g_st=fail g_why="hung: killed at its time limit while running $(echo "$marks" | head -1 | sed 's/^case //') (logs/$id.log)"
      else
        g_st=error g_why="out of time while compiling $(echo "$marks" | tail -1 | sed 's/^case //') (logs/$id.log)"
      fi ;;
    1) g_st=fail g_why="$(grep -c 'FAIL' "$log") failures, the first: $(grep -m1 'FAIL' "$log" | sed 's/^[^ ]*: FAIL: //' | cut -c1-300)" ;;
    *) g_st=fail g_why="gpukit_check $mode exited $rc: $(tail -1 "$log")" ;;
  esac
}
# sdpa ID ARGS...: SDPA's times for the same problems (scripts/gpu/sdpa_times.py), its RESULT lines into ID.jsonl;
# sets s_note when it did not run or failed
sdpa() {
  local id=$1
  shift
  s_note=
  if [ -z "$torch_v" ]; then s_note="; SDPA not timed: torch is not importable"; return; fi
  tmo "$(limit 90)" python3 "$here/sdpa_times.py" "$@" >"$logs/$id-sdpa.log" 2>&1
  local rc=$?
  sed -n 's/^RESULT //p' "$logs/$id-sdpa.log" >>"$work/$id.jsonl"
  [ "$rc" = 0 ] || s_note="; SDPA not timed: sdpa_times.py exited $rc: $(tail -1 "$logs/$id-sdpa.log" | cut -c1-200)"
  # a crash or a time-out is an error of the step; 77 (torch sees no device) only a note
  if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$g_st" = pass ]; then g_st=error; fi
}
# rows ID: ID.json (a list of the RESULT rows) from ID.jsonl; prints a summary of the figures for the step's line
rows() {
  python3 - "$work/$1.jsonl" "$out/$1.json" "$1" <<'EOF2'
import json, sys
rows = []
for l in open(sys.argv[1]) if __import__("os").path.exists(sys.argv[1]) else []:
    try:
        rows.append(json.loads(l))
    except ValueError:
        pass
json.dump(rows, open(sys.argv[2], "w"), indent=1)
k = lambda kind: [r for r in rows if r.get("kind") == kind]
f = lambda x, fmt="%.0f": "-" if x is None else fmt % x
sid = sys.argv[3]
if sid == "sm90":
    c = k("sm90_correct")
    errs = [r["err_fp64"] for r in c if r["err_fp64"] is not None]
    print("%d cases within 1e-2 of fp64 of %d run, worst error %s" % (sum(1 for r in c if r["ok"]), len(c),
          f(max(errs, default=None), "%.1e")), end="")
elif sid == "sm90-speed":
    print("; ".join("n=%d causal=%d wgmma %s / mma.sync %s TF/s" % (r["n"], r["causal"], f(r["wgmma_tflops"]),
                    f(r["mma_sync_tflops"])) for r in k("sm90_time")) or "no times", end="")
elif sid == "backward":
    c, t = k("bwd_correct"), [r for r in k("bwd_time") if r["pass"] == "bwd"]
    best = min([r for r in t if r["ms"] is not None], key=lambda r: r["ms"], default=None)
    print("%d of %d variant cases within the limits%s" % (sum(1 for r in c if r["ok"]), len(c),
          "; fastest %s %.3f ms (%sx the forward)" % (best["tiles"], best["ms"], f(best["bwd_over_fwd"], "%.2f"))
          if best else ""), end="")
elif sid == "serve":
    c, t = k("serve_correct"), k("decode_time")
    print("%d layouts run, worst error %s; %s" % (len(c), f(max([r["err_fp64"] for r in c if r["err_fp64"] is not None],
          default=None), "%.1e"), "; ".join("decode pages of %d: %s GB/s, dense %s GB/s" % (r["page_size"],
          f(r["paged_gbs"]), f(r["dense_gbs"])) for r in t) or "no decode times"), end="")
elif sid == "decode":
    c, a = k("decode"), k("decode_async")
    errs = [r["err_fp64"] for r in c if r["err_fp64"] is not None]
    fr = [r["bw_fraction"] for r in c if r["bw_fraction"] is not None]
    print("%d of %d plans within 1e-2 of fp64 and the default plan, the same bits twice; worst error %s; best %s of "
          "the DRAM bandwidth; async paged %s" % (sum(1 for r in c if r["ok"]), len(c), f(max(errs, default=None), "%.1e"),
          f(max(fr, default=None), "%.2f"), "the same bits" if a and all(r["ok"] for r in a) else "NOT checked or differs"),
          end="")
EOF2
}
for id in sm90 sm90-speed backward serve decode; do : >"$work/$id.jsonl"; done
t0=$(now)
if in_time sm90; then
  guarded sm90 sm90 90
  step sm90 "$g_st" $(($(now) - t0)) "$(rows sm90): $g_why"
fi
t0=$(now)
if in_time sm90-speed; then
  guarded sm90-speed sm90-time 60
  [ "$g_st" = skipped ] && s_note= || sdpa sm90-speed --n 4096,8192 --tokens 16384 --heads 16 --d 128 --dtype bf16 --causal 0,1
  step sm90-speed "$g_st" $(($(now) - t0)) "$(rows sm90-speed): $g_why$s_note"
fi
t0=$(now)
if in_time backward; then
  guarded backward bwd 120
  sdpa backward --n 4096 --batch 4 --heads 16 --d 128 --dtype bf16 --causal 0,1 --bwd
  step backward "$g_st" $(($(now) - t0)) "$(rows backward): $g_why$s_note"
fi
t0=$(now)
if in_time serve; then
  guarded serve serve 60
  step serve "$g_st" $(($(now) - t0)) "$(rows serve): $g_why"
fi
t0=$(now)
if in_time decode; then
  guarded decode decode 60
  step decode "$g_st" $(($(now) - t0)) "$(rows decode): $g_why"
fi

# ---- 9. every other gpu-labelled test, $jobs at a time (they compile with NVRTC on the CPU cores)
t0=$(now)
tests_deadline=$((t0 + $(limit 140)))
skip_tests=
if [ -n "${ATTN_VALIDATE_SKIP:-}" ] && echo gpu-tests | grep -Eq "$ATTN_VALIDATE_SKIP"; then skip_tests=1; fi
mkdir -p "$logs/tests" "$work/rc"
run_test() { # NAME TIMEOUT SKIP WORKDIR ENV CMD
  local name=$1 tl=$2 left=$((tests_deadline - $(now)))
  [ "$tl" -gt "$left" ] && tl=$left
  if [ "$tl" -lt 5 ]; then echo "125 0" >"$work/rc/$name"; return; fi # not started: out of time
  local s=$(now)
  # the environment and command are shell words written by gpu_tests.py
  [ -z "$4" ] || mkdir -p "$4"
  (cd "${4:-.}" && eval "tmo $tl env $5 ATTN_CACHE_DIR=\"\$ATTN_CACHE_DIR\" $6") >"$logs/tests/$name.log" 2>&1
  echo "$? $(($(now) - s)) $3" >"$work/rc/$name"
}
while IFS=$'\t' read -r name tl skip wd env cmd; do
  case $name in '#'*|''|gpu_check_*) continue ;; esac # gpu_check_*: gpukit_check's modes, run as steps above
  [ -z "$skip_tests" ] || continue
  [ -z "${ATTN_VALIDATE_TESTS:-}" ] || echo "$name" | grep -Eq "$ATTN_VALIDATE_TESTS" || continue
  env=${env//@BUILD@\/test-cache-cuda/$ATTN_CACHE_DIR}
  env=${env//@BUILD@/$build}
  env=${env//@SRC@/$src}
  cmd=${cmd//@BUILD@/$build}
  cmd=${cmd//@SRC@/$src}
  wd=${wd//@BUILD@/$build}
  wd=${wd//@SRC@/$src}
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
  run_test "$name" "$tl" "$skip" "$wd" "$env" "$cmd" &
done < <(grep -E $'^[^\t]*(lowrank|dims|io)' "$manifest"; grep -vE $'^[^\t]*(lowrank|dims|io)' "$manifest")
wait
python3 - "$work/rc" "$out/gpu-tests.json" "$logs/tests" <<'EOF'
import json, os, sys
rows = []
for name in sorted(os.listdir(sys.argv[1])):
    rc, secs, *skip = open(os.path.join(sys.argv[1], name)).read().split()
    rc = int(rc)
    st = ("pass" if rc == 0 else "timeout" if rc in (124, 137) else "not run (out of time)" if rc == 125
          else "skipped" if skip and rc == int(skip[0]) else "fail")
    row = {"name": name, "status": st, "rc": rc, "seconds": int(secs)}
    if st != "pass":  # what the log says first went wrong, else its last line
        try:
            lines = open(os.path.join(sys.argv[3], name + ".log"), errors="replace").read().splitlines()
        except OSError:
            lines = []
        why = [l for l in lines if "FAIL" in l or "SKIP" in l] or lines[-1:]
        row["why"] = why[0][:300] if why else ""
    rows.append(row)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
EOF
n_all=$(ls "$work/rc" | wc -l)
n_pass=$(grep -l '^0 ' "$work/rc"/* 2>/dev/null | wc -l)
n_late=$(grep -lE '^(124|137|125) ' "$work/rc"/* 2>/dev/null | wc -l)
if [ -n "$skip_tests" ]; then
  step gpu-tests "not run" 0 "ATTN_VALIDATE_SKIP"
elif [ "$n_pass" = "$n_all" ] && [ "$n_all" -gt 0 ]; then
  step gpu-tests pass $(($(now) - t0)) "$n_pass of $n_all passed"
elif [ $((n_pass + n_late)) = "$n_all" ] && [ "$n_all" -gt 0 ]; then
  step gpu-tests error $(($(now) - t0)) "$n_pass of $n_all passed, $n_late ran out of time (logs/tests/)"
else
  step gpu-tests fail $(($(now) - t0)) "$n_pass of $n_all passed, $((n_all - n_pass - n_late)) failed (a skip on a GPU is a failure; logs/tests/)"
fi

# ---- 10. compute-sanitizer: each algorithm's default at a small shape, zero reports
t0=$(now)
if ! in_time sanitizers; then :
elif have compute-sanitizer; then
  san_bad= san_n=0
  san_deadline=$((t0 + $(limit 60)))
  for algo in flash smallcache lowrank; do
    for tool in memcheck racecheck synccheck initcheck; do
      (
        left=$((san_deadline - $(now)))
        log=$logs/sanitize-$algo-$tool.log
        tmo $((left > 5 ? left : 5)) compute-sanitizer --tool "$tool" --error-exitcode 99 \
          "$runner" run "$algo" f16 100 64 1 >"$log" 2>&1
        echo $? >"$work/san-$algo-$tool"
      ) &
      while [ "$(jobs -rp | wc -l)" -ge 4 ]; do wait -n; done
    done
  done
  wait
  for algo in flash smallcache lowrank; do
    for tool in memcheck racecheck synccheck initcheck; do
      log=$logs/sanitize-$algo-$tool.log
      rc=$(cat "$work/san-$algo-$tool")
      san_n=$((san_n + 1))
      # "ERROR SUMMARY: 0 errors", "RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)"
      reports=$(grep -E 'SUMMARY:' "$log" | grep -oE '[0-9]+ (errors?|hazards?|warnings?)' | awk '{s += $1} END {print s + 0}')
      if [ "$rc" != 0 ] || ! grep -q 'SUMMARY:' "$log" || [ "$reports" != 0 ]; then
        san_bad="$san_bad $algo/$tool(exit $rc, $reports reports)"
      fi
    done
  done
  if [ -z "$san_bad" ]; then
    step sanitizers pass $(($(now) - t0)) "$san_n runs (memcheck, racecheck, synccheck, initcheck x 3 algorithms, f16 n=100 d=64 causal): 0 reports"
  else
    step sanitizers fail $(($(now) - t0)) "reports or failures:$san_bad"
  fi
else
  step sanitizers skipped 0 "compute-sanitizer not found"
fi

# ---- 11. DRAM bytes from ncu against the closed forms: flash at two shapes, smallcache at one
t0=$(now)
if ! in_time dram; then :
elif have ncu; then
  : >"$work/dram.tsv"
  dr_err=
  for shape in "flash bf16 4096 128 0 16" "flash f16 16384 64 1 16" "smallcache f16 2048 64 0 8"; do
    set -- $shape
    log=$logs/ncu-$1-$3-$4.log
    tmo "$(limit 25)" ncu --clock-control none --csv --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \
      "$runner" run "$@" --nocheck >"$log" 2>&1
    rc=$?
    [ "$rc" = 0 ] || dr_err="$dr_err $1/$3/$4(exit $rc)"
    printf '%s\t%s\t%s\n' "$1" "$2 n=$3 d=$4 causal=$5 heads=$6" "$log" >>"$work/dram.tsv"
  done
  python3 - "$work/dram.tsv" "$out/dram.json" <<'EOF'
import csv, json, re, sys
rows = []
for line in open(sys.argv[1]):
    algo, shape, log = line.rstrip("\n").split("\t")
    text = open(log, errors="replace").read()
    r = {"algo": algo, "shape": shape}
    m = re.search(r'plan="([^"]*)" closed_read_bytes=(\d+) closed_write_bytes=(\d+) floor_bytes=(\d+)', text)
    if m:
        r.update(plan=m.group(1), closed_read=int(m.group(2)), closed_write=int(m.group(3)), floor=int(m.group(4)))
    sums = {}
    lines = [l for l in text.splitlines() if l.startswith('"')]
    if lines:
        for row in csv.DictReader(lines):
            name, unit, val = row.get("Metric Name"), row.get("Metric Unit", ""), row.get("Metric Value", "0")
            try:
                v = float(val.replace(",", ""))
            except ValueError:
                continue
            scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "nsecond": 1e-3, "usecond": 1,
                     "msecond": 1e3, "B": 1, "ns": 1e-3, "us": 1, "ms": 1e3}.get(unit, 1)
            sums[name] = sums.get(name, 0) + v * scale
    r["dram_read"] = int(sums["dram__bytes_read.sum"]) if "dram__bytes_read.sum" in sums else None
    r["dram_write"] = int(sums["dram__bytes_write.sum"]) if "dram__bytes_write.sum" in sums else None
    r["time_us"] = round(sums["gpu__time_duration.sum"], 1) if "gpu__time_duration.sum" in sums else None
    rows.append(r)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
EOF
  if [ -n "$dr_err" ]; then
    step dram error $(($(now) - t0)) "ncu runs that failed:$dr_err"
  else
    step dram pass $(($(now) - t0)) "3 kernels measured (dram.json; the closed forms count every block's loads, L2 hits included)"
  fi
else
  step dram skipped 0 "ncu not found"
fi

# ---- 12. a real tuning run on this GPU, and 13. bench of its row against the default
t0=$(now)
tune_db=$out/tune.db
rm -f "$tune_db"
if ! in_time tune; then :
elif tmo "$(limit 70)" "$cli" --gpu "$gpu" --d 128 --n 4096 --dtype bf16 --jobs "$jobs" --db "$tune_db" \
     >"$logs/tune.log" 2>&1; then
  if grep -q ' is present ' "$logs/tune.log"; then
    step tune pass $(($(now) - t0)) "$(grep '^best' "$logs/tune.log" | head -1)"
  else
    step tune error $(($(now) - t0)) "not measured: $(grep 'is not present' "$logs/tune.log" | head -1)"
  fi
else
  rc=$?
  st=fail
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && st=error
  step tune "$st" $(($(now) - t0)) "attntune --gpu $gpu --d 128 --n 4096 --dtype bf16: exit $rc: $(tail -1 "$logs/tune.log")"
fi
t0=$(now)
if ! in_time bench; then :
elif tmo "$(limit 25)" "$cli" bench --target cuda --n 4096 --d 128 --dtype bf16 --heads 16 --db "$tune_db" --time-cap 5 --json \
     >"$out/bench.json" 2>"$logs/bench.log"; then
  step bench pass $(($(now) - t0)) "$(python3 -c '
import json, sys
for r in json.load(open(sys.argv[1])):
    print("%s: %s ms, the default %s ms" % (r.get("plan"), r.get("plan_ms"), r.get("baseline_ms")), end="; ")
' "$out/bench.json" 2>/dev/null)(bench.json)"
else
  rc=$?
  st=fail
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && st=error
  step bench "$st" $(($(now) - t0)) "attntune bench --target cuda: exit $rc: $(tail -1 "$logs/bench.log")"
fi

# ---- 14. speed against SDPA (flash, cuDNN, efficient), the model beside each figure
t0=$(now)
if ! in_time speed; then :
elif [ -n "$torch_v" ]; then
  sp_bad= sp_err= sp_skip=
  speed_parts=
  for nb in $grid; do # the defaults: a database that does not exist
    IFS=: read -r n b lim rounds <<EOG
$nb
EOG
    tmo "$(limit "$lim")" env ATTN_DB="$work/no-database.db" python3 "$src/scripts/gpu/torch_compare.py" --lib "$lib" \
      --n "$n" --batch "$b" --rounds "$rounds" --d "$grid_d" --causal 0,1 --dtype f16,bf16 \
      --json "$work/speed-default-$n.json" \
      >"$logs/speed-default-$n.log" 2>&1
    rc=$?
    speed_parts="$speed_parts default:$work/speed-default-$n.json"
    [ "$rc" = 1 ] && sp_bad="$sp_bad n=$n"
    [ "$rc" = 77 ] && sp_skip=$(tail -1 "$logs/speed-default-$n.log")
    [ "$rc" != 0 ] && [ "$rc" != 1 ] && [ "$rc" != 77 ] && sp_err="$sp_err n=$n(exit $rc)"
  done
  for tdb in "$tune_db" $db; do
    [ -f "$tdb" ] || continue
    tag=tuned
    [ "$tdb" = "$tune_db" ] || tag=db
    # the tuning run's problem (bf16, not causal, d 128); a given database's rows at n = 4096 across the grid
    if [ "$tag" = tuned ]; then sel="--d 128 --causal 0 --dtype bf16"; else sel="--d $grid_d --causal 0,1 --dtype f16,bf16"; fi
    tmo "$(limit 40)" python3 "$src/scripts/gpu/torch_compare.py" --lib "$lib" --db "$tdb" --n 4096 $sel \
      --json "$work/speed-$tag.json" >"$logs/speed-$tag.log" 2>&1
    rc=$?
    speed_parts="$speed_parts $tag:$work/speed-$tag.json"
    [ "$rc" = 1 ] && sp_bad="$sp_bad $tag"
    [ "$rc" = 77 ] && sp_skip=$(tail -1 "$logs/speed-$tag.log")
    [ "$rc" != 0 ] && [ "$rc" != 1 ] && [ "$rc" != 77 ] && sp_err="$sp_err $tag(exit $rc)"
  done
  python3 - "$out/model.json" "$out/speed.json" $speed_parts <<'EOF'
import json, sys
try:
    model = {(r["n"], r["d"], r["dtype"], int(bool(r["causal"])), r["batch"]): r for r in json.load(open(sys.argv[1]))}
except (OSError, ValueError):
    model = {}
rows = []
for part in sys.argv[3:]:
    tag, path = part.split(":", 1)
    try:
        got = json.load(open(path))
    except (OSError, ValueError):
        continue
    for r in got:
        m = model.get((r.get("n"), r.get("d"), r.get("dtype"), int(r.get("causal", 0)), r.get("batch", 1)))
        r["source"] = tag
        r["model_tflops"] = m["gflops"] / 1e3 if m and m.get("gflops") else None
        r["model_plan"] = m["summary"] if m else None
        rows.append(r)
json.dump(rows, open(sys.argv[2], "w"), indent=1)
EOF
  rows=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$out/speed.json" 2>/dev/null || echo 0)
  if [ -n "$sp_bad" ]; then
    step speed fail $(($(now) - t0)) "torch_compare.py found wrong outputs:$sp_bad ($rows rows)"
  elif [ -n "$sp_err" ]; then
    step speed error $(($(now) - t0)) "torch_compare.py did not finish:$sp_err ($rows rows)"
  elif [ -n "$sp_skip" ] && [ "$rows" = 0 ]; then
    step speed skipped $(($(now) - t0)) "torch_compare.py: $sp_skip"
  else
    step speed pass $(($(now) - t0)) "$rows rows (speed.json)"
  fi
else
  step speed skipped 0 "torch is not importable (logs/torch-import.log)"
fi

finish "$(verdict)"
