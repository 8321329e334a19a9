# SPDX-License-Identifier: MIT
"""The `gpud` command of a wheel install (pip's console script): runs the gpud command
the wheel holds (gpud/_native/bin/gpud) with the same arguments, in this process's
place."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native", "bin", "gpud")
    if not os.access(exe, os.X_OK):
        print(f"gpud: this gpud package has no gpud command ({exe} is missing): it was "
              "installed for development (./build.sh python), which uses the build "
              "folder's gpud (build/daemon/gpud); a wheel (./build.sh wheel) holds its own",
              file=sys.stderr)
        return 2
    # Run from a venv's bin/ without activating it, the python plugins run on that
    # venv's Python, as when it is activated ([job] python still says otherwise).
    if (sys.prefix != sys.base_prefix and not os.environ.get("VIRTUAL_ENV")
            and not os.environ.get("CONDA_PREFIX")):
        os.environ["VIRTUAL_ENV"] = sys.prefix
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [sys.argv[0]] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
