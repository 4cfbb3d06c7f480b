#!/bin/sh
# python_doc_example.sh ATTNTUNE WORKDIR: docs/strategies.md's worked example run as written there (its climb.lua, its
# command) and its output checked against the form the page shows ("…" for the model's figures and configurations,
# a line of "…" alone for further numbered lines). Exit 77 without python3.
set -u
T=$1 W=$2
DOC=$(cd "$(dirname "$0")/.." && pwd)/docs/strategies.md
PY=${ATTN_PYTHON:-python3}
out=$W/out.txt
fail() { echo "FAIL (doc example): $*" >&2; echo "--- output:" >&2; cat "$out" >&2; exit 1; }
command -v "$PY" >/dev/null 2>&1 || { echo "SKIP: no $PY here"; exit 77; }
rm -rf "$W"
mkdir -p "$W"
: >"$out"

# the page's blocks: the one that starts with "-- climb.lua", the command that runs it, the output that follows
"$PY" - "$DOC" "$W" >"$out" 2>&1 <<'PYEOF' || fail "docs/strategies.md lacks the worked example's blocks"
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
blocks = re.findall(r"```(\w*)\n(.*?)```", text[text.index("## Worked example"):], re.S)
lua = [b for lang, b in blocks if lang == "lua" and b.startswith("-- climb.lua")]
cmd = [b for lang, b in blocks if lang == "sh" and "--strategy climb.lua" in b]
outs = [b for i, (lang, b) in enumerate(blocks) if not lang and i > 0 and blocks[i - 1][1] == (cmd or [None])[0]]
if not (lua and cmd and outs):
    sys.exit("want the climb.lua block, the command running it and the output block after it")
open(sys.argv[2] + "/climb.lua", "w").write(lua[0])
open(sys.argv[2] + "/cmd.txt", "w").write(cmd[0].strip())
open(sys.argv[2] + "/form.txt", "w", encoding="utf-8").write(outs[0])
PYEOF
set -- $(cat "$W/cmd.txt")
[ "$1" = attntune ] || fail "the page's command does not start with attntune: $*"
shift
# the page shows a machine without the GPU: on one that has it, the driver is hidden
(cd "$W" && ATTN_LIBCUDA=$W/no-libcuda.so "$T" "$@") >"$W/run.txt" 2>&1
rc=$?
[ $rc -eq 0 ] || { cp "$W/run.txt" "$out"; fail "the page's command exit $rc"; }
"$PY" - "$W/form.txt" "$W/run.txt" >"$out" 2>&1 <<'PYEOF' || fail "the output's form is not the page's"
import re, sys
form = open(sys.argv[1], encoding="utf-8").read().splitlines()
run = open(sys.argv[2], encoding="utf-8").read()
pat = ""
for line in form:
    if line == "\u2026":
        pat += r"(?:\[\d+/\d+\] .*\n)*"
    else:
        pat += ".+?".join(re.escape(part) for part in line.split("\u2026")) + r"\n"
if not re.fullmatch(pat, run):
    print("--- the run printed:\n" + run + "--- the page shows:\n" + "\n".join(form))
    sys.exit(1)
print("the worked example's output has the page's form:\n" + run)
PYEOF
cat "$out"
echo "PASS (doc example)"
