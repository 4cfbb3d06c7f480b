#!/bin/sh
# expect_exit.sh [--skip77] CODE PATTERN COMMAND [ARG...]: runs COMMAND, shows its output, and passes only when it
# exits with CODE and its output matches the grep -E PATTERN (CTest's PASS_REGULAR_EXPRESSION alone ignores the exit
# code). --skip77: COMMAND's exit 77 (a skip, e.g. no NVRTC) is passed on for CTest's SKIP_RETURN_CODE.
skip=0
if [ "$1" = --skip77 ]; then skip=1; shift; fi
code=$1 pattern=$2
shift 2
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
if [ "$skip" -eq 1 ] && [ "$rc" -eq 77 ]; then exit 77; fi
if [ "$rc" -ne "$code" ]; then
  echo "expect_exit: exit status $rc, expected $code" >&2
  exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
  echo "expect_exit: the output does not match '$pattern'" >&2
  exit 1
fi
