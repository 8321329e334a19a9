# SPDX-License-Identifier: MIT
"""The numbers and markers the package shares with its C side (gpud._gpud, built from
_gpud.c against gpud/gpud.h): defined here once, imported by the package's modules.
gpud._gpud exposes its own copies as module constants (RUN_RESUME, UI_OFF, CODEC_RAW,
FRAME_MAGIC, ...) and the test python_types checks that the two agree."""
from __future__ import annotations

from typing import Dict

# gpud_run_options.flags (gpud.h GPUD_RUN_*).
RUN_RESUME = 1 << 0
RUN_RETRY_FAILED = 1 << 1
RUN_FORCE = 1 << 2

# gpud_run_options.ui (gpud.h enum gpud_ui), by Dispatcher's ui= names.
UI_OFF, UI_PLAIN, UI_DASHBOARD = 0, 1, 2
UI_MODES: Dict[str, int] = {"off": UI_OFF, "plain": UI_PLAIN, "dashboard": UI_DASHBOARD}

# How items and results cross _gpud.run (its enum codec).
CODEC_RAW = 0  # bytes-like as is, str as UTF-8 (a C worker plugin)
CODEC_PICKLE = 1  # pickle protocol 5 (the package's Python worker)
CODEC_PARTS = 2  # items framed already (the chunks); results as CODEC_RAW
CODEC_RAW_PICKLE = 3  # items raw (a C stage first), results pickled (a Python class last)
CODEC_PICKLE_RAW = 4  # items pickled (a Python stage first), results raw (a C plugin last)

# The first bytes of a framed pickle (gpud._worker.frame: a pickle with its
# out-of-band buffers).
FRAME_MAGIC = b"GPD5"
