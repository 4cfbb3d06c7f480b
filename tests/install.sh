#!/bin/sh
# install.sh CASE BUILD WORKDIR CMAKE CC PKG_CONFIG LIBDIR: `cmake --install` and what an installed prefix gives
# (one CTest entry per case; tests/install.cmake). `prefix` installs BUILD into WORKDIR/stage and moves it to
# WORKDIR/prefix; the other cases use that moved prefix, so anything that still pointed at the place it was
# installed to, or into the source tree, fails them.
set -u
case_=$1 B=$2 W=$3 CMAKE=$4 CC=$5 PKGCONFIG=$6 LIBDIR=$7
SRC=$(cd "$(dirname "$0")" && pwd)
P=$W/prefix
out=$W/$case_.out
fail() { echo "FAIL ($case_): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
mkdir -p "$W"
: >"$out"
unset ATTN_SCRIPTS_DIR   # the installed CLI must find its strategies by itself

case $case_ in
prefix)
  rm -rf "$W/stage" "$P"
  "$CMAKE" --install "$B" --prefix "$W/stage" >"$out" 2>&1 || fail "cmake --install exit $?"
  mv "$W/stage" "$P" || fail "mv"
  for f in bin/attntune include/attntune/attn.h "$LIBDIR/libattn.so" "$LIBDIR/libattn.so.0" \
           "$LIBDIR/cmake/attntune/attntuneConfig.cmake" "$LIBDIR/cmake/attntune/attntuneConfigVersion.cmake" \
           "$LIBDIR/cmake/attntune/attntuneTargets.cmake" "$LIBDIR/pkgconfig/attntune.pc" \
           share/attntune/strategies/anneal.lua share/attntune/strategies/genetic.lua; do
    [ -e "$P/$f" ] || fail "$f is not installed"
  done
  # nothing installed names the directory it was installed to; no text file names the source or build tree
  if grep -rlF "$W/stage" "$P" >"$out" 2>&1; then fail "files name the install directory"; fi
  if grep -rlF -e "$(cd "$SRC/.." && pwd -P)" -e "$(cd "$B" && pwd -P)" "$P/include" "$P/$LIBDIR/cmake" \
       "$P/$LIBDIR/pkgconfig" "$P/share" >"$out" 2>&1; then
    fail "files name the source or build tree"
  fi
  ;;
strategy)  # the moved CLI runs a Lua strategy by name; a missing one is reported with what is there
  "$P/bin/attntune" --gpu cpu --d 32 --n 128 --strategy anneal --budget 3 --time-cap 0.1 --db "$W/anneal.db" \
    >"$out" 2>&1 || fail "anneal exit $?"
  grep -q "best n=128 d=32 f32 causal=0: flash .*(measured, 3 evaluated)" "$out" || fail "no best after 3"
  real=$(cd "$P/share/attntune/strategies" && pwd -P)
  "$P/bin/attntune" --gpu cpu --d 32 --strategy nosuch --db "$W/x.db" >"$out" 2>&1
  [ $? -eq 2 ] || fail "nosuch: exit, want 2"
  grep -q "^attntune tune: --strategy nosuch: .* one of the strategies in $real (anneal, bayes, genetic, guided)$" \
    "$out" ||
    fail "nosuch: the message does not list the installed strategies"
  # a CLI without its strategies says so, and offers none
  rm -rf "$W/bare"
  mkdir -p "$W/bare/bin" || fail "mkdir"
  cp "$P/bin/attntune" "$W/bare/bin/" || fail "copy"
  "$W/bare/bin/attntune" --gpu cpu --d 32 --strategy anneal --db "$W/x.db" >"$out" 2>&1
  [ $? -eq 2 ] || fail "bare: exit, want 2"
  grep -q "no strategies at $W/bare/bin/../share/attntune/strategies: No such file or directory" "$out" ||
    fail "bare: no message on the missing strategies"
  if grep -q "anneal," "$out"; then fail "bare: offers strategies that are not there"; fi
  # the build tree's CLI has its own copies, beside it as in an install
  "$B/tuner/attntune" --gpu cpu --d 32 --strategy nosuch --db "$W/x.db" >"$out" 2>&1
  grep -q "strategies in $(cd "$B" && pwd -P)/share/attntune/strategies (anneal, bayes, genetic, guided)$" "$out" ||
    fail "build tree: strategies not beside the CLI"
  [ ! -e "$W/x.db" ] || fail "a usage error created the database"
  ;;
cmake)  # find_package(attntune) in a project of its own
  rm -rf "$W/cmake-consumer"
  mkdir -p "$W/cmake-consumer"
  cp "$SRC/install_consumer.c" "$W/cmake-consumer/consumer.c" || fail "copy"
  cat >"$W/cmake-consumer/CMakeLists.txt" <<'EOF'
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(attntune 0.1 REQUIRED)
message(STATUS "attntune ${attntune_VERSION} from ${attntune_DIR}")
add_executable(consumer consumer.c)
target_compile_options(consumer PRIVATE -Wall -Wextra -Werror)
target_link_libraries(consumer PRIVATE attntune::attn m)
EOF
  "$CMAKE" -S "$W/cmake-consumer" -B "$W/cmake-consumer/build" -DCMAKE_C_COMPILER="$CC" -DCMAKE_PREFIX_PATH="$P" \
    >"$out" 2>&1 || fail "configure exit $?"
  grep -q "attntune 0.1.0 from $P/$LIBDIR/cmake/attntune" "$out" || fail "found another attntune"
  "$CMAKE" --build "$W/cmake-consumer/build" >>"$out" 2>&1 || fail "build exit $?"
  ATTN_DB=$W/none.db "$W/cmake-consumer/build/consumer" >"$out" 2>&1 || fail "consumer exit $?"
  grep -q "PASS" "$out" || fail "no PASS"
  ;;
pkgconfig)  # cc $(pkg-config --cflags --libs attntune)
  export PKG_CONFIG_PATH="$P/$LIBDIR/pkgconfig"
  flags=$("$PKGCONFIG" --cflags --libs attntune 2>"$out") || fail "pkg-config exit $?"
  libdir=$("$PKGCONFIG" --variable=libdir attntune 2>"$out") || fail "pkg-config libdir"
  [ "$(cd "$libdir" && pwd -P)" = "$(cd "$P/$LIBDIR" && pwd -P)" ] || fail "libdir $libdir is not the moved prefix's"
  static=$("$PKGCONFIG" --static --libs attntune 2>"$out") || fail "pkg-config --static exit $?"
  for l in -lattn -lsqlite3 -lcrypto -lm; do
    echo " $static " | grep -q -- " $l " || fail "--static lacks $l: $static"
  done
  # shellcheck disable=SC2086 # the flags are words
  "$CC" -std=c17 -Wall -Wextra -Werror "$SRC/install_consumer.c" -o "$W/pc-consumer" $flags -lm \
    -Wl,-rpath,"$libdir" >"$out" 2>&1 || fail "cc exit $?"
  ATTN_DB=$W/none.db "$W/pc-consumer" >"$out" 2>&1 || fail "consumer exit $?"
  grep -q "PASS" "$out" || fail "no PASS"
  ;;
*) echo "install.sh: unknown case $case_" >&2; exit 2 ;;
esac
echo "PASS ($case_)"
