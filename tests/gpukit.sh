#!/bin/sh
# gpukit.sh nogpu|pack|refuse|fakecheck|hang|fakegpu SRC BUILD: the GPU validation kit (scripts/gpu/) on a machine without a GPU.
#   nogpu: validate.sh on the build directory, with the driver made absent (ATTN_LIBCUDA), runs every step before the
#          device step, exits 77 and writes a report that says no GPU was found and that the GPU steps did not run
#   pack:  pack.sh into a copy of the kit's scripts at another path; the packed CLI and libattn resolve every library
#          (ldd, the pack's own first) and run from there; validate.sh in that copy finds the pack by itself (.gpu-pack)
#          and gets to the same "no GPU" end
#   refuse: gpukit_check's modes (validate.sh's sm90, sm90-speed, backward, serve and decode steps) exit 77 with the
#          reason where there is no driver, sm90 on an sm_80 device too; a mode it does not know is a usage error (2)
#   hang:  validate.sh on the fake driver (sm_90) whose first kernel never ends (hang=1): the serve step is killed at
#          its time limit and reported as a failure naming the case that hung, the steps after it are still reported,
#          and the whole run ends within its budget (ATTN_VALIDATE_BUDGET)
#   fakecheck: gpukit_check sm90 on the fake driver (sm_90, 227 KiB): every case is tried and fails with the reason
#          (the fake has no cuTensorMapEncodeTiled and runs no kernel), exit 1: the check cannot pass without a device
#   fakegpu: validate.sh from a pack on the fake driver (tests/fake_libcuda.c, sm_90; kernels do not run): the device
#          opens, the kernel cache starts from the pack's cubins.tar.xz, the gpu test ATTN_VALIDATE_TESTS selects runs
#          from the pack's list and passes, and bench's wrong outputs are a failure (exit 1)
# Exit 0 pass, 1 fail, 77 skipped (no NVRTC: validate.sh then stops before the device step with exit 3).
set -u
mode=$1 src=$2 build=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpukit-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# check_report OUT RC MODE: validate.sh's exit and report for a run without a GPU
check_report() {
  out=$1 rc=$2 want_mode=$3
  if [ "$rc" = 3 ] && grep -q 'NVRTC cannot be loaded' "$out/report.md"; then
    echo "SKIP: NVRTC is not available here: validate.sh stops before the device step"
    exit 77
  fi
  [ "$rc" = 77 ] || fail "validate.sh exited $rc, expected 77 (no GPU)"
  grep -q 'no GPU found' "$out/report.md" || fail "report.md does not say that no GPU was found"
  python3 - "$out/report.json" "$want_mode" <<'EOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
st = {s["id"]: s["status"] for s in r["steps"]}
want = {"build": "pass", "versions": "pass", "model": "pass", "device": "not run", "sm90": "not run",
        "sm90-speed": "not run", "backward": "not run", "serve": "not run", "gpu-tests": "not run",
        "sanitizers": "not run", "dram": "not run", "tune": "not run", "bench": "not run", "speed": "not run"}
bad = ["%s: %s, expected %s" % (k, st.get(k), v) for k, v in want.items() if st.get(k) != v]
if r["exit_code"] != 77 or r["facts"].get("mode") != sys.argv[2]:
    bad.append("exit_code %s, mode %s" % (r["exit_code"], r["facts"].get("mode")))
if bad:
    sys.exit("FAIL: report.json: " + "; ".join(bad))
EOF
  [ -s "$out/model.json" ] || fail "no model.json: the model step wrote nothing"
}

case $mode in
  nogpu)
    ATTN_LIBCUDA=/nonexistent/libcuda.so.1 "$src/scripts/gpu/validate.sh" "$tmp/out" --build "$build" >"$tmp/log" 2>&1
    rc=$?
    cat "$tmp/log"
    check_report "$tmp/out" "$rc" build
    ;;
  pack)
    mkdir -p "$tmp/tree/scripts" && cp -R "$src/scripts/gpu" "$tmp/tree/scripts/" || fail "copying scripts/gpu"
    "$tmp/tree/scripts/gpu/pack.sh" "$tmp/tree/.gpu-pack" "$build" || fail "pack.sh failed"
    pack=$tmp/tree/.gpu-pack
    for f in "$pack/bin/attntune" "$pack/lib/libattn.so" "$pack/tests/gpukit_run" "$pack/tests/gpukit_check" \
             "$pack/tests/cuda_correct"; do
      [ -f "$f" ] || fail "$f is not in the pack"
      out=$(LD_LIBRARY_PATH="$pack/lib" ldd "$f") || fail "ldd $f"
      echo "$out" | grep -q 'not found' && fail "$f: $(echo "$out" | grep 'not found')"
      for lib in libsqlite3 libjansson liblua; do # what the GPU machines lack comes from the pack
        echo "$out" | grep "$lib" | grep -qv "=> $pack/lib/" && fail "$f takes $lib from outside the pack"
      done
    done
    [ -z "$(find "$pack" -type l)" ] || fail "the pack holds symbolic links: $(find "$pack" -type l | head -3)"
    "$pack/run" attntune gpus | grep -q '^H100 ' || fail "the packed CLI does not run from the pack"
    # the packed libraries serve where the system lacks them (here it has them all), or all of them when asked
    [ ! -e "$pack/lib.use/libjansson.so.4" ] || fail "env.sh put the pack's libjansson before the system's"
    ATTN_PACK_ALL_LIBS=1 "$pack/run" attntune gpus >/dev/null && [ -e "$pack/lib.use/libjansson.so.4" ] ||
      fail "ATTN_PACK_ALL_LIBS=1: the pack's libjansson is not on the library path"
    "$pack/run" sh -c 'python3 -c "import ctypes, os; ctypes.CDLL(os.environ[\"ATTNTUNE_LIB\"]).attn_strerror"' ||
      fail "the packed libattn does not load"
    (cd "$tmp" && ATTN_LIBCUDA=/nonexistent/libcuda.so.1 ATTN_BUILD= tree/scripts/gpu/validate.sh "$tmp/out") \
      >"$tmp/log" 2>&1
    rc=$?
    cat "$tmp/log"
    check_report "$tmp/out" "$rc" pack
    grep -q "$pack" "$tmp/out/report.md" || fail "validate.sh did not take the pack at $pack"
    grep -q '^gpu_check_sm90	' "$pack/tests/gpu-tests.txt" || fail "the pack's gpu-tests.txt lacks gpu_check_sm90"
    ;;
  refuse)
    chk=$build/tests/gpukit_check
    for m in sm90 sm90-time bwd serve decode; do
      out=$(ATTN_LIBCUDA=/nonexistent/libcuda.so.1 "$chk" $m 2>&1)
      rc=$?
      [ "$rc" = 77 ] && echo "$out" | grep -q '^SKIP: no CUDA device' || fail "gpukit_check $m without a driver: exit $rc: $out"
    done
    for m in sm90 sm90-time; do
      out=$(ATTN_LIBCUDA="$build/tests/fake_libcuda.so" FAKE_LIBCUDA=cc=80 "$chk" $m 2>&1)
      rc=$?
      [ "$rc" = 77 ] && echo "$out" | grep -q '^SKIP: the sm_90a template needs an sm_90 device.* sm_80' ||
        fail "gpukit_check $m on an sm_80 device: exit $rc: $out"
    done
    "$chk" sm91 >/dev/null 2>&1
    rc=$?
    [ "$rc" = 2 ] || fail "gpukit_check sm91: exit $rc, expected 2 (usage)"
    ;;
  fakecheck)
    out=$(ATTN_LIBCUDA="$build/tests/fake_libcuda.so" FAKE_LIBCUDA=cc=90,smem=232448 "$build/tests/gpukit_check" sm90 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" = 1 ] || fail "gpukit_check sm90 on the fake driver exited $rc, expected 1 (no kernel runs there)"
    [ "$(echo "$out" | grep -c '^case sm90 ')" = 10 ] || fail "not every case was tried"
    [ "$(echo "$out" | grep -c 'FAIL: .*no cuTensorMapEncodeTiled')" = 10 ] ||
      fail "not every case failed for want of the tensor-map encoder"
    ;;
  hang)
    s=$(date +%s)
    ATTN_LIBCUDA="$build/tests/fake_libcuda.so" FAKE_LIBCUDA=cc=90,hang=1 ATTN_VALIDATE_BUDGET=45 \
      ATTN_VALIDATE_SKIP='^(sm90|sm90-speed|backward|decode|gpu-tests|sanitizers|dram|tune)$' \
      "$src/scripts/gpu/validate.sh" "$tmp/out" --build "$build" >"$tmp/log" 2>&1
    rc=$? took=$(($(date +%s) - s))
    cat "$tmp/log"
    [ "$rc" = 1 ] || fail "validate.sh exited $rc, expected 1 (a kernel hung)"
    [ "$took" -le 75 ] || fail "validate.sh took $took s with a budget of 45"
    python3 - "$tmp/out/report.json" <<'EOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
st = {s["id"]: s for s in r["steps"]}
bad = []
sv = st.get("serve", {})
if sv.get("status") != "fail" or "hung: killed at its time limit while running serve varlen" not in sv.get("summary", ""):
    bad.append("serve: %s" % sv)
for k in ("bench", "speed"):  # the steps after the hang are still reported
    if k not in st:
        bad.append("no %s step" % k)
if st.get("sm90", {}).get("status") != "not run":
    bad.append("sm90: %s" % st.get("sm90"))
if bad:
    sys.exit("FAIL: report.json: " + "; ".join(bad))
EOF
    grep -q 'hung: killed' "$tmp/out/report.md" || fail "report.md does not say that a kernel hung"
    ;;
  fakegpu)
    mkdir -p "$tmp/tree/scripts" && cp -R "$src/scripts/gpu" "$tmp/tree/scripts/" || fail "copying scripts/gpu"
    "$tmp/tree/scripts/gpu/pack.sh" "$tmp/tree/.gpu-pack" "$build" >/dev/null || fail "pack.sh failed"
    # a cubin that is not one: the cache drops it and compiles again (README: the kernel cache's trust model)
    mkdir "$tmp/c" && echo junk >"$tmp/c/0000000000000000-sm_90.cubin" &&
      tar -C "$tmp/c" -cJf "$tmp/tree/.gpu-pack/cubins.tar.xz" 0000000000000000-sm_90.cubin || fail "making cubins.tar.xz"
    ATTN_LIBCUDA="$build/tests/fake_libcuda.so" FAKE_LIBCUDA=cc=90 ATTN_VALIDATE_TESTS='^cuda_correct_api$' \
      ATTN_VALIDATE_SKIP='^(sm90|sm90-speed|backward|serve|decode)$' ATTN_VALIDATE_BUDGET=100 "$tmp/tree/scripts/gpu/validate.sh" "$tmp/out" >"$tmp/log" 2>&1
    rc=$?
    cat "$tmp/log"
    [ "$rc" = 1 ] || fail "validate.sh exited $rc, expected 1 (bench's outputs are wrong on the fake driver)"
    python3 - "$tmp/out/report.json" <<'EOF' || exit 1
import json, sys
r = json.load(open(sys.argv[1]))
st = {s["id"]: s["status"] for s in r["steps"]}
bad = ["%s: %s, expected %s" % (k, st.get(k), v) for k, v in
       {"build": "pass", "versions": "pass", "device": "pass", "sm90": "not run", "serve": "not run",
        "gpu-tests": "pass", "bench": "fail"}.items()
       if st.get(k) != v]
if [(t["name"], t["status"]) for t in r["tests"] or []] != [("cuda_correct_api", "pass")]:
    bad.append("tests: %s" % r["tests"])
if not r["facts"].get("cubins", "").startswith("1 precompiled"):
    bad.append("cubins: %s" % r["facts"].get("cubins"))
if bad:
    sys.exit("FAIL: report.json: " + "; ".join(bad))
EOF
    ;;
  *) echo "usage: gpukit.sh nogpu|pack|refuse|fakecheck|hang|fakegpu SRC BUILD" >&2; exit 2 ;;
esac
echo "PASS: gpukit $mode"
