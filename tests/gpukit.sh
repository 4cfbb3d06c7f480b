#!/bin/sh
# gpukit.sh nogpu SRC BUILD | pack SRC BUILD: the GPU validation kit (scripts/gpu/) on a machine without a GPU.
#   nogpu: validate.sh on the build directory, with the driver made absent (ATTN_LIBCUDA), runs every step before the
#          device step, exits 77 and writes a report that says no GPU was found and that the GPU steps did not run
#   pack:  pack.sh into a copy of the kit's scripts at another path; the packed CLI and libattn resolve every library
#          (ldd, the pack's own first) and run from there; validate.sh in that copy finds the pack by itself (.gpu-pack)
#          and gets to the same "no GPU" end
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
want = {"build": "pass", "versions": "pass", "model": "pass", "device": "not run", "gpu-tests": "not run",
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
    for f in "$pack/bin/attntune" "$pack/lib/libattn.so" "$pack/tests/gpukit_run" "$pack/tests/cuda_correct"; do
      [ -f "$f" ] || fail "$f is not in the pack"
      out=$(LD_LIBRARY_PATH="$pack/lib" ldd "$f") || fail "ldd $f"
      echo "$out" | grep -q 'not found' && fail "$f: $(echo "$out" | grep 'not found')"
      for lib in libsqlite3 libjansson liblua; do # what the GPU machines lack comes from the pack
        echo "$out" | grep "$lib" | grep -qv "=> $pack/lib/" && fail "$f takes $lib from outside the pack"
      done
    done
    [ -z "$(find "$pack" -type l)" ] || fail "the pack holds symbolic links: $(find "$pack" -type l | head -3)"
    "$pack/run" attntune gpus | grep -q '^H100 ' || fail "the packed CLI does not run from the pack"
    "$pack/run" sh -c 'python3 -c "import ctypes, os; ctypes.CDLL(os.environ[\"ATTNTUNE_LIB\"]).attn_strerror"' ||
      fail "the packed libattn does not load"
    (cd "$tmp" && ATTN_LIBCUDA=/nonexistent/libcuda.so.1 ATTN_BUILD= tree/scripts/gpu/validate.sh "$tmp/out") \
      >"$tmp/log" 2>&1
    rc=$?
    cat "$tmp/log"
    check_report "$tmp/out" "$rc" pack
    grep -q "$pack" "$tmp/out/report.md" || fail "validate.sh did not take the pack at $pack"
    ;;
  *) echo "usage: gpukit.sh nogpu|pack SRC BUILD" >&2; exit 2 ;;
esac
echo "PASS: gpukit $mode"
