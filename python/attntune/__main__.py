"""python -m attntune ARGS: runs the attntune CLI (the one bundled with the package, else $ATTNTUNE_CLI or attntune
on PATH: attntune.cli_path()) with ARGS, as if it had been run directly."""
import os
import sys

from . import cli_path


def main():
    path = cli_path()
    if not path:
        sys.stderr.write("python -m attntune: no attntune CLI: the package bundles none, $ATTNTUNE_CLI is unset and "
                         "attntune is not on PATH\n")
        return 1
    try:
        os.execv(path, [path] + sys.argv[1:])
    except OSError as e:
        sys.stderr.write("python -m attntune: cannot run %s: %s\n" % (path, e))
    return 1


if __name__ == "__main__":
    sys.exit(main())
