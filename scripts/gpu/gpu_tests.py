#!/usr/bin/env python3
"""gpu_tests.py BUILD SRC OUT [PACK]: the gpu-labelled ctests of BUILD (`ctest --show-only=json-v1` on stdin) as a
list validate.sh runs without ctest: one line per test, name<TAB>timeout<TAB>skip code<TAB>working directory<TAB>
environment<TAB>command, the last two as shell words, with BUILD written @BUILD@ and SRC @SRC@. With PACK, the files
of BUILD a test names (its executable, a library it is given) are copied to the same relative paths under PACK
(scripts/gpu/pack.sh); executables outside BUILD and SRC (sh, python3) are the system's."""
import json
import os
import shlex
import shutil
import sys


def main():
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    build, src, out = (os.path.realpath(a) for a in sys.argv[1:4])
    pack = sys.argv[4] if len(sys.argv) == 5 else None
    tests = json.load(sys.stdin)["tests"]

    def rel(s):
        return s.replace(build, "@BUILD@").replace(src, "@SRC@")

    lines = []
    for t in tests:
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if "gpu" not in props.get("LABELS", []):
            continue
        cmd = list(t["command"])
        exe = os.path.realpath(cmd[0])
        if exe.startswith(build + "/") or exe.startswith(src + "/"):
            cmd[0] = exe  # a system executable (sh) keeps its name: the GPU machine's may live elsewhere
        for a in cmd:
            if pack and a.startswith(build + "/") and os.path.isfile(a):
                dst = os.path.join(pack, os.path.relpath(a, build))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if not os.path.exists(dst):
                    shutil.copy2(a, dst)
        env = " ".join(shlex.quote(rel(e)) for e in props.get("ENVIRONMENT", []))
        lines.append("\t".join([t["name"], str(int(float(props.get("TIMEOUT", 1500)))),
                                str(props.get("SKIP_RETURN_CODE", "")), rel(props.get("WORKING_DIRECTORY", "")), env,
                                " ".join(shlex.quote(rel(a)) for a in cmd)]))
    if not lines:
        sys.exit("gpu_tests.py: %s has no gpu-labelled test" % build)
    with open(out, "w") as f:
        f.write("# name\ttimeout\tskip code\tworking directory\tenvironment\tcommand (@BUILD@: the build or pack, "
                "@SRC@: its tree)\n")
        f.write("\n".join(lines) + "\n")


main()
