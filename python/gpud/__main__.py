# SPDX-License-Identifier: MIT
"""`python -m gpud ARGS`: the gpud command of the package, as `gpud ARGS` (gpud._cli).
It needs no script of pip's: a venv moved or copied elsewhere after the install keeps it
working (its bin/gpud names the old place's Python in its first line)."""
import sys

from gpud._cli import main

if __name__ == "__main__":
    sys.argv[0] = "gpud"
    sys.exit(main())
