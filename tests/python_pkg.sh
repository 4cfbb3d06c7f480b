#!/bin/sh
# python_pkg.sh PYTHON_SRC PREFIX LIBDIR BUILD WORKDIR: `pip install --config-settings prefix=PREFIX ./python` into a
# new venv, bundling libattn from the installed PREFIX (tests/install.sh prefix), offline; then
# tests/python_attention.py in that venv, and the build backend's other ways to find libattn (a build directory,
# pkg-config). Exit 77 (skipped) only when no Python here
# can make a venv.
set -u
PY_SRC=$1 P=$2 LIBDIR=$3 B=$4 W=$5
T=$(cd "$(dirname "$0")" && pwd)
out=$W/out.txt
fail() { echo "FAIL (python): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
rm -rf "$W"
mkdir -p "$W"
: >"$out"

# An interpreter with venv and NumPy (Debian's python3-venv and python3-numpy: scripts/setup.sh): the venv sees
# the system's packages, so nothing is downloaded.
py=""
have_venv=""
for c in ${ATTN_PYTHON:-} python3 /usr/bin/python3; do
  command -v "$c" >/dev/null 2>&1 || continue
  "$c" -c "import venv, ensurepip" 2>/dev/null || continue
  have_venv=$c
  if "$c" -c "import numpy" 2>/dev/null; then py=$c; break; fi
done
if [ -z "$have_venv" ]; then
  echo "SKIP: no python3 with venv and ensurepip here (apt-get install python3-venv)"
  exit 77
fi
[ -n "$py" ] || fail "no python3 with NumPy here (apt-get install python3-numpy, or set ATTN_PYTHON)"

"$py" -m venv --system-site-packages "$W/venv" >"$out" 2>&1 || fail "venv exit $?"
VPY=$W/venv/bin/python
find "$PY_SRC" | sort >"$W/src-before.txt"
# --config-settings, the spelling README gives: pip before 23.1 (Debian 12's 23.0) has no -C
PYTHONDONTWRITEBYTECODE=1 "$VPY" -m pip install --no-index --disable-pip-version-check --no-cache-dir \
  --config-settings prefix="$P" "$PY_SRC" >"$out" 2>&1 || fail "pip install --config-settings prefix=DIR exit $?"
inst=$("$VPY" -c "import os, attntune; print(os.path.dirname(attntune.__file__))" 2>"$out") || fail "import attntune"
cmp "$inst/_lib/lib/libattn.so.0" "$P/$LIBDIR/libattn.so.0" >"$out" 2>&1 || fail "pip install: not the prefix's libattn"
find "$PY_SRC" | sort >"$W/src-after.txt"
diff "$W/src-before.txt" "$W/src-after.txt" >"$out" || fail "the build wrote into $PY_SRC"

# from a directory of its own, so that `import attntune` is the installed package, not the source
cd "$W" || fail "cd"
"$VPY" "$T/python_attention.py" >"$out" 2>&1 || fail "python_attention.py exit $?"
cat "$out"

# the backend's other sources of libattn: a build directory, then pkg-config
loc=$(cd "$W" && ATTNTUNE_BUILD_DIR=$B "$VPY" "$PY_SRC/attntune_build.py" 2>"$out") || fail "build-dir locate"
echo "$loc" | grep -q "^$B/runtime/libattn.so.0$" || { echo "$loc" >"$out"; fail "build-dir: not the build's libattn"; }
loc=$(PKG_CONFIG_PATH=$P/$LIBDIR/pkgconfig "$VPY" "$PY_SRC/attntune_build.py" 2>"$out") || fail "pkg-config locate"
echo "$loc" | grep -q "^$P/$LIBDIR/libattn.so.0$" ||
  { echo "$loc" >"$out"; fail "pkg-config: not the prefix's libattn"; }
ATTNTUNE_PREFIX=$W/nothing "$VPY" "$PY_SRC/attntune_build.py" >"$out" 2>&1 && fail "a missing prefix was accepted"
grep -q "prefix $W/nothing: lacks libattn.so.0" "$out" || fail "no message on a missing prefix"
echo "PASS (python)"
