# SPDX-License-Identifier: MIT
"""A PyTorch model in gpud's workers, written the library's way: a Dispatcher call in a
script. Each worker builds the same small MLP embedder in setup() (on its GPU, cuda:0,
when there is one, else the CPU), takes its tasks in batches (batch_size) and turns the
inputs into one tensor without copying them out of their buffers (torch.frombuffer);
every result is checked against a single-process loop over the same model.

    ./build.sh python /usr/bin/python3        # the gpud package into Debian's Python
    apt-get install python3-torch             # PyTorch 1.13, CPU (about 850 MB)
    /usr/bin/python3 docs/examples/python/torch_embed.py [ITEMS] [GPUS]

GPUS: "0,1" (the default: two worker slots, CPU-only machines too), "all" or "auto".
"""
import sys
import time

import numpy as np
import torch

from gpud import BaseWorker, Dispatcher

DIM, HIDDEN, OUT = 64, 256, 32


def build_model(model_seed):
    """The same weights in every process: seeded by model_seed, not the worker's seed."""
    torch.manual_seed(model_seed)
    return torch.nn.Sequential(
        torch.nn.Linear(DIM, HIDDEN), torch.nn.GELU(), torch.nn.Linear(HIDDEN, OUT)).eval()


class EmbedWorker(BaseWorker):
    def setup(self, gpu_id, seed, model_seed):
        # gpud gives each worker one GPU, which it sees as device 0.
        self.device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
        self.model = build_model(model_seed).to(self.device)
        print(f"[GPU {gpu_id}] {sys.executable} torch {torch.__version__} on {self.device}",
              flush=True)

    @torch.no_grad()
    def process_batch(self, items):
        # Each item is a bytearray of DIM float32s: a tensor over it, no copy.
        x = torch.stack([torch.frombuffer(b, dtype=torch.float32) for b in items])
        y = self.model(x.to(self.device)).cpu().numpy()
        return [row.copy() for row in y]  # NumPy arrays: pickled with their data out of band

    def process(self, data):
        return self.process_batch([data])[0]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    gpus = sys.argv[2] if len(sys.argv) > 2 else "0,1"
    gpu_ids = gpus if gpus in ("all", "auto") else [int(g) for g in gpus.split(",")]
    rng = np.random.default_rng(0)
    inputs = rng.standard_normal((n, DIM), dtype=np.float32)

    def items():  # a closure over the program's array
        for row in inputs:
            yield bytearray(row.tobytes())

    results = {}

    def on_success(task_id, embedding, worker_id):
        results[task_id] = embedding

    def on_error(task_id, error, worker_id):
        print(f"task {task_id} failed on GPU {worker_id}:\n{error}", file=sys.stderr)

    t0 = time.perf_counter()
    stats = Dispatcher(EmbedWorker, gpu_ids, queue_size=1024, batch_size=64).run(
        items(), on_success, on_error=on_error, model_seed=1234)
    dt = time.perf_counter() - t0

    # The same model, one process, no gpud: every result must match.
    with torch.no_grad():
        want = build_model(1234)(torch.from_numpy(inputs)).numpy()
    assert len(results) == n, f"{len(results)} results for {n} inputs"
    worst = max(float(np.abs(results[i] - want[i]).max()) for i in range(n))
    assert worst < 1e-4, f"results differ from the single-process loop by {worst}"
    print(f"{n} embeddings in {dt:.2f} s ({n / dt:,.0f}/s), all equal to the single-process "
          f"loop (largest difference {worst:.1e}); per GPU: "
          + ", ".join(f"{g}: {s['completed']}" for g, s in stats["gpu_status"].items()))


if __name__ == "__main__":
    main()
