# SPDX-License-Identifier: MIT
"""What the Dispatcher takes from the calling program's process, one mode per argv[1]
(the arguments after it are the program's own); prints "PASS <mode>" when every check
held. Run by run_tests.py.

argv: the workers see the program's sys.argv, as multiprocessing's spawn gives its
children, already while the script is loaded as their __mp_main__ (its top level).
launcher: gpu_ids="auto" with launcher variables gpud refuses (a local size of 0, a
local rank past it, a CUDA_VISIBLE_DEVICES list `gpus` would refuse) raises JobError
naming the variable and its value, and the program goes on."""
import os
import sys

import gpud
from gpud import BaseWorker, Dispatcher

ARGV_AT_IMPORT = list(sys.argv)  # in a worker: what the script's top level saw


class Worker(BaseWorker):
    def setup(self, gpu_id, seed):
        pass

    def process(self, data):
        return {"at_import": ARGV_AT_IMPORT, "argv": list(sys.argv)}


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", flush=True)
        sys.exit(1)


def argv():
    got = {}
    Dispatcher(Worker, [0, 1], ui="off").run(range(4), lambda t, r, w: got.__setitem__(t, r))
    check(len(got) == 4, f"4 results: {got}")
    for t, r in got.items():
        check(r["argv"] == sys.argv, f"task {t}: the worker's sys.argv {r['argv']} is not "
              f"the program's {sys.argv}")
        check(r["at_import"] == sys.argv, f"task {t}: the script's top level saw "
              f"{r['at_import']}, not {sys.argv}")


def launcher():
    cases = [
        ({"OMPI_COMM_WORLD_LOCAL_SIZE": "0"}, "OMPI_COMM_WORLD_LOCAL_SIZE = '0'"),
        ({"SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
          "SLURM_STEP_TASKS_PER_NODE": "0"}, "SLURM_STEP_TASKS_PER_NODE = '0'"),
        ({"OMPI_COMM_WORLD_LOCAL_RANK": "5", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"},
         "OMPI_COMM_WORLD_LOCAL_RANK = 5"),
        ({"CUDA_VISIBLE_DEVICES": "0,0"}, "CUDA_VISIBLE_DEVICES = '0,0': GPU 0 is listed twice"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,,2"}, "CUDA_VISIBLE_DEVICES = '0,1,,2'"),
        ({"CUDA_VISIBLE_DEVICES": "-1"}, "CUDA_VISIBLE_DEVICES = '-1'"),
    ]
    base = dict(os.environ)
    for env, want in cases:
        os.environ.clear()
        os.environ.update(base)
        os.environ["CUDA_VISIBLE_DEVICES"] = "0,1"
        os.environ.update(env)
        try:
            Dispatcher(Worker, "auto", ui="off").run(range(3), lambda *a: None)
        except gpud.JobError as e:
            check(want in str(e) and "\n" not in str(e).strip(), f"{env}: message: {e}")
        else:
            check(False, f"{env}: no JobError")
    os.environ.clear()
    os.environ.update(base)


if __name__ == "__main__":
    mode = sys.argv[1]
    {"argv": argv, "launcher": launcher}[mode]()
    print(f"PASS {mode}", flush=True)
