#!/bin/sh
# pack.sh [--precompile[=CC]] DIR [BUILD]: the build (CLI, libattn, strategies, the gpu tests' binaries and gpukit_run) plus every shared
# library from ldd that a CUDA machine without a package manager may lack, in one folder that runs from anywhere:
#   DIR/bin/attntune, DIR/lib/libattn.so* and the libraries, DIR/share/attntune/strategies (cmake --install)
#   DIR/tests/<binaries> and DIR/tests/gpu-tests.txt (the gpu-labelled ctests, paths relative to DIR and to the
#   source tree, for scripts/gpu/validate.sh)
#   DIR/env.sh (source it: PATH, LD_LIBRARY_PATH with the packed libraries ldconfig does not know, ATTN_NVRTC when
#   /usr/local/cuda/lib64/libnvrtc.so.13 exists) and
#   DIR/run CMD [ARG...] (the same, then runs CMD)
#   --precompile: DIR/cubins.tar.xz, the cubins of every kernel the gpu tests and validate.sh's own runs load on a
#   device of compute capability CC (default 90: H100, H200), compiled here with NVRTC by running them on the build's
#   fake driver (tests/fake_libcuda.c: kernels do not run, so their checks fail and are ignored); validate.sh starts
#   its kernel cache from them, so that device time goes to running. Hundreds of kernels: tens of minutes on two cores.
#   $ATTN_PACK_PRECOMPILE_TESTS (a grep -E pattern of gpu test names): only those tests' kernels, no gpukit_run's.
# BUILD: the build directory (default $ATTN_BUILD, else build/ beside scripts/); it must be built. Left out: glibc,
# libstdc++, libgcc_s, the CUDA driver and NVRTC (the GPU machine's own). DIR is replaced if it holds an earlier pack
# (or is empty); the pack must stay under 64 MiB (the size checked at the end). Exit 0, 1 on failure, 2 usage.
set -eu
usage() { echo "usage: pack.sh [--precompile[=CC]] DIR [BUILD]" >&2; exit 2; }
precompile=
case ${1:-} in
  --precompile) precompile=90; shift ;;
  --precompile=*) precompile=${1#--precompile=}; shift
    case $precompile in [89][0-9]|1[0-9][0-9]) ;; *) echo "pack.sh: --precompile=CC takes a compute capability such as 90" >&2; exit 2 ;; esac ;;
esac
[ $# -ge 1 ] && [ $# -le 2 ] || usage
case $1 in -*) usage ;; esac
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
build=${2:-${ATTN_BUILD:-$src/build}}
[ -d "$build" ] || { echo "pack.sh: no build directory $build" >&2; exit 1; }
build=$(cd "$build" && pwd)
for f in tuner/attntune runtime/libattn.so tests/gpukit_run CTestTestfile.cmake; do
  [ -e "$build/$f" ] || { echo "pack.sh: $build/$f is missing: build the project first" >&2; exit 1; }
done
dir=$1
if [ -e "$dir" ]; then
  [ -d "$dir" ] || { echo "pack.sh: $dir is not a directory" >&2; exit 1; }
  if [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/.attntune-pack" ]; then
    echo "pack.sh: $dir is neither empty nor an earlier pack: not replacing it" >&2
    exit 1
  fi
  rm -rf "$dir"
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
touch "$dir/.attntune-pack"

cmake --install "$build" --prefix "$dir" >/dev/null
# no symbolic links: a folder carried to another machine may lose them
find "$dir" -type l | while read -r l; do cp -L "$l" "$l.tmp" && mv -f "$l.tmp" "$l"; done
mkdir -p "$dir/tests"
cp "$build/tests/gpukit_run" "$dir/tests/"
# validate.sh's first steps (the sm_90a template, the backward's variants, varlen and paged) run gpukit_check
[ ! -e "$build/tests/gpukit_check" ] || cp "$build/tests/gpukit_check" "$dir/tests/"

# The gpu tests as ctest runs them, with the build directory written @BUILD@ and the source tree @SRC@ (validate.sh
# puts the pack and the tree it sits in there); each test's executable is copied to the same place under DIR.
ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 | python3 "$here/gpu_tests.py" "$build" "$src" \
  "$dir/tests/gpu-tests.txt" "$dir"

# Shared libraries: whatever ldd resolves for the packed executables and libattn, less the system's own.
skip_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|libpthread\.so|librt\.so|libresolv\.so|libutil\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvrtc|libnvidia)'
missing=$(for f in "$dir"/bin/* "$dir"/lib/libattn.so* $(find "$dir/tests" -type f -perm -u+x); do
  ldd "$f" 2>/dev/null | awk '/not found/ {print "MISSING " $1}'
done | sort -u)
[ -z "$missing" ] || { echo "pack.sh: unresolved here: $missing" >&2; exit 1; }
for f in "$dir"/bin/* "$dir"/lib/libattn.so* $(find "$dir/tests" -type f -perm -u+x); do
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1 " " $3}'
done | sort -u | while read -r name path; do
  if printf '%s\n' "$name" | grep -Eq "$skip_re"; then continue; fi
  case $name in libattn.so*) continue ;; esac
  cp -L "$path" "$dir/lib/$name"
done

cat >"$dir/env.sh" <<'EOF'
# Source this file (bash: `. PACK/env.sh`; sh: `ATTN_PACK=PACK; . PACK/env.sh`): the packed attntune and libattn,
# the packed libraries the system lacks, the toolkit's NVRTC when present, the Python binding of the tree around it.
if [ -n "${BASH_SOURCE:-}" ]; then ATTN_PACK=$(cd "$(dirname "$BASH_SOURCE")" && pwd); fi
if [ ! -f "${ATTN_PACK:-/nonexistent}/.attntune-pack" ]; then
  echo "env.sh: ATTN_PACK does not name a pack (set it to the pack's directory)" >&2
  return 1 2>/dev/null || exit 1
fi
export ATTN_PACK
export PATH="$ATTN_PACK/bin:$PATH"
# The pack's libraries serve only where the system lacks them (ldconfig's cache): a process that also loads the
# system's copies (Python, PyTorch) then gets one of each. ATTN_PACK_ALL_LIBS=1: every packed library.
ATTN_PACK_LIBS="$ATTN_PACK/lib.use"
if ! { mkdir -p "$ATTN_PACK_LIBS" && [ -w "$ATTN_PACK_LIBS" ]; } 2>/dev/null; then
  ATTN_PACK_LIBS=$(mktemp -d "${TMPDIR:-/tmp}/attntune-pack-libs.XXXXXX")
fi
rm -f "$ATTN_PACK_LIBS"/*
ATTN_SYSTEM_LIBS=$( (ldconfig -p || /sbin/ldconfig -p || /usr/sbin/ldconfig -p) 2>/dev/null)  # /sbin: not on a user's PATH
for f in "$ATTN_PACK"/lib/*.so*; do
  case ${f##*/} in libattn.so*) continue ;; esac
  if [ -z "${ATTN_PACK_ALL_LIBS:-}" ] && printf '%s\n' "$ATTN_SYSTEM_LIBS" | grep -q "^[[:space:]]*${f##*/} (.*x86-64"; then
    continue
  fi
  ln -s "$f" "$ATTN_PACK_LIBS/${f##*/}"
done
unset ATTN_SYSTEM_LIBS
export LD_LIBRARY_PATH="$ATTN_PACK_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ -z "${ATTN_NVRTC:-}" ] && [ -e /usr/local/cuda/lib64/libnvrtc.so.13 ]; then
  export ATTN_NVRTC=/usr/local/cuda/lib64/libnvrtc.so.13
fi
export ATTNTUNE_LIB="$ATTN_PACK/lib/libattn.so" ATTNTUNE_CLI="$ATTN_PACK/bin/attntune"
if [ -d "$ATTN_PACK/../python/attntune" ]; then
  PYTHONPATH="$(cd "$ATTN_PACK/../python" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
  export PYTHONPATH
fi
EOF
cat >"$dir/run" <<'EOF'
#!/bin/sh
# run CMD [ARG...]: CMD with the pack's environment (env.sh)
ATTN_PACK=$(cd "$(dirname "$0")" && pwd) || exit 1
. "$ATTN_PACK/env.sh" || exit 1
exec "$@"
EOF
chmod +x "$dir/run"

# Checked here as it will be there: nothing unresolved with only the pack's libraries added.
bad=$(for f in "$dir"/bin/* "$dir"/lib/*.so* $(find "$dir/tests" -type f -perm -u+x); do
  LD_LIBRARY_PATH="$dir/lib" ldd "$f" 2>/dev/null | grep 'not found' | sed "s|^|$f: |"
done)
[ -z "$bad" ] || { echo "pack.sh: $bad" >&2; exit 1; }
if [ -n "$precompile" ]; then
  fake=$build/tests/fake_libcuda.so
  [ -f "$fake" ] || { echo "pack.sh: $fake is missing: build the tests" >&2; exit 1; }
  jobs=$(nproc 2>/dev/null || echo 2)
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/attntune-pack.XXXXXX")
  mkdir -m 700 "$dir/cubins"
  # each gpu test as the manifest runs it, and validate.sh's gpukit_run shapes (sanitizers, ncu)
  tab=$(printf '\t')
  runs="flash_f16_100_64_1 smallcache_f16_100_64_1 lowrank_f16_100_64_1 flash_bf16_4096_128_0_16 flash_f16_16384_64_1_16 smallcache_f16_2048_64_0_8"
  i=0
  grep -v '^#' "$dir/tests/gpu-tests.txt" | while IFS="$tab" read -r name tl skip wd env cmd; do
    [ -z "${ATTN_PACK_PRECOMPILE_TESTS:-}" ] || echo "$name" | grep -Eq "$ATTN_PACK_PRECOMPILE_TESTS" || continue
    i=$((i + 1))
    printf 'mkdir -p "%s" && cd "%s" && env %s ATTN_CACHE_DIR=%s ATTN_DB=%s %s\n' "${wd:-.}" "${wd:-.}" "$env" \
      "$dir/cubins" "$scratch/none.db" "$cmd" | sed -e "s|@BUILD@|$dir|g" -e "s|@SRC@|$src|g" >"$scratch/$i.sh"
  done
  [ -z "${ATTN_PACK_PRECOMPILE_TESTS:-}" ] || runs=
  for a in $runs; do
    echo "'$dir/tests/gpukit_run' run $(echo "$a" | tr _ ' ') --nocheck" >"$scratch/run-$a.sh"
  done
  t0=$(date +%s)
  # the fake driver's kernels write nothing: the checks fail (exit 1) and are ignored; the cubins stay
  # the device's shared memory (H100, H200: 227 KiB) so that the specs refused or chosen are the device's
  fake_cfg="cc=$precompile"
  case $precompile in 90) fake_cfg="$fake_cfg,smem=232448" ;; 80) fake_cfg="$fake_cfg,smem=166912" ;; esac
  ls "$scratch"/*.sh 2>/dev/null | xargs -r -P "$jobs" -n 1 env ATTN_LIBCUDA="$fake" FAKE_LIBCUDA="$fake_cfg" \
    ATTN_CACHE_DIR="$dir/cubins" ATTN_DB="$scratch/none.db" ATTN_TEST_SEED=1 sh >"$scratch/log" 2>&1 || true
  rm -rf "$scratch"
  # xz: about 10 KB a cubin instead of 70 (the pack must stay under 64 MiB)
  (cd "$dir/cubins" && ls | grep '\.cubin$' | tar -cf - -T - | xz -6 >"$dir/cubins.tar.xz")
  echo "pack.sh: $(ls "$dir/cubins" | grep -c '\.cubin$') cubins for sm_$precompile in $(($(date +%s) - t0)) s"
  rm -rf "$dir/cubins"
fi
kib=$(du -sk "$dir" | cut -f1)
if [ "$kib" -ge 65536 ]; then
  echo "pack.sh: $dir holds $kib KiB, over the 64 MiB a carried folder may hold" >&2
  exit 1
fi
echo "pack.sh: $dir ($kib KiB): $(ls "$dir/lib" | wc -l) libraries, $(($(wc -l <"$dir/tests/gpu-tests.txt") - 1)) gpu tests"
