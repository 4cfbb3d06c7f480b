#!/bin/sh
# gpukit_events.sh MODE BUILD: gpukit_check MODE (bwd or serve) on the fake driver (tests/fake_libcuda.c, sm_90, 227
# KiB; its kernels do not run, so the correctness checks fail: exit 1), whose CUDA events are always 1 ms apart: every
# time row it writes (bwd_time: the forward and each backward variant, both masks; decode_time: dense and paged decode,
# pages of 16 and 64) says method "events" and holds exactly that 1 ms, which the host's clock around the calls never
# reads. Exit 0 pass, 1 fail, 77 skipped (no NVRTC: nothing compiles, no time is taken).
set -u
mode=$1 build=$2
out=$(mktemp "${TMPDIR:-/tmp}/gpukit-events.XXXXXX") || exit 1
trap 'rm -f "$out"' EXIT
ATTN_LIBCUDA="$build/tests/fake_libcuda.so" FAKE_LIBCUDA=cc=90,smem=232448 "$build/tests/gpukit_check" "$mode" \
  >"$out" 2>&1
rc=$?
if grep -q "NVRTC is not available" "$out"; then echo "SKIP: NVRTC is not available: no kernel compiles"; exit 77; fi
grep '^RESULT ' "$out"
[ "$rc" = 1 ] || { echo "FAIL: gpukit_check $mode on the fake driver exited $rc, expected 1 (no kernel runs)"; exit 1; }
python3 - "$out" "$mode" <<'PY'
import json, sys
rows = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
mode, bad = sys.argv[2], []
if mode == "bwd":
    t = [r for r in rows if r["kind"] == "bwd_time"]
    fwd, bwd = [r for r in t if r["pass"] == "fwd"], [r for r in t if r["pass"] == "bwd"]
    if len(fwd) != 2 or len(bwd) < 2 or not any("atomic" in r["tiles"] for r in bwd):
        bad.append("%d forward and %d backward time rows (want 2, and at least 2 with a dq=atomic one)" %
                   (len(fwd), len(bwd)))
    times = [(r["case"] + " " + r.get("tiles", "forward"), r, ("ms",)) for r in t]
else:
    t = [r for r in rows if r["kind"] == "decode_time"]
    if sorted(r["page_size"] for r in t) != [16, 64]:
        bad.append("decode time rows for pages of %s (want 16 and 64)" % [r["page_size"] for r in t])
    times = [("decode page_size=%d" % r["page_size"], r, ("dense_ms", "paged_ms")) for r in t]
for what, r, keys in times:
    if r.get("method") != "events" or any(r[k] != 1.0 for k in keys):
        bad.append("%s: method %s, %s (want events, the fake's 1 ms)" % (what, r.get("method"),
                   ", ".join("%s %s" % (k, r[k]) for k in keys)))
if bad:
    sys.exit("FAIL: " + "; ".join(bad))
print("%d time rows, all by events at the fake's 1 ms" % len(times))
PY
