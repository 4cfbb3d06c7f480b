# sh_util.sh: the tuner tests' sh preamble, sourced with case_ and W set: . "$(dirname "$0")/sh_util.sh"
# shellcheck shell=sh disable=SC2154,SC2034 # case_ is the sourcing script's; quick is for it
# W emptied; out=$W/out.txt, the output fail shows
rm -rf "$W"
mkdir -p "$W"
out=$W/out.txt
# fail MESSAGE: exit 1, saying so, with the output
fail() { echo "FAIL ($case_): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
# q DB SQL: sqlite3's answer, -1 where it fails
q() { sqlite3 "$1" "$2" 2>/dev/null || echo -1; }
# default_only: $quick, the tune arguments that measure one configuration, the untuned default (a Lua table of no
# fields, $W/default.lua)
default_only() {
  printf 'return function(space, tune) tune.evaluate({}) end\n' >"$W/default.lua"
  quick="--strategy $W/default.lua --budget 1 --reps 1 --time-cap 0.02"
}
