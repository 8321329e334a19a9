# Real numeric work with NumPy under gpud: a dense layer y = tanh(W x) on float32
# vectors, W made from the seed. The generator makes the vectors, the worker applies the
# layer, and the callbacks check every result against NumPy on the host.
#   gpud run docs/examples/python/dense.ini
import numpy as np

import gpud

DIM = 256


def weights(seed):
    return np.random.default_rng(seed).standard_normal((DIM, DIM), dtype=np.float32) / 16


def vector(i):
    return np.random.default_rng(1000 + i).standard_normal(DIM, dtype=np.float32)


class Dense(gpud.BaseWorker):
    def setup(self, gpu_id, seed, weight_seed):
        self.w = weights(int(weight_seed))  # on a GPU: move it there once, here

    def process(self, data):
        x = np.frombuffer(data, dtype=np.float32)  # a view of shared memory, no copy
        if x.shape != (DIM,):
            gpud.reject(f"expected {DIM} float32 values, got {len(data)} bytes")
        return np.tanh(self.w @ x).astype(np.float32).tobytes()  # x is not kept


def vectors(count):
    for i in range(int(count)):
        yield vector(i).tobytes()


class Check:
    """Recomputes every result and counts the ones that differ."""

    def __init__(self, weight_seed, report_file):
        self.w = weights(int(weight_seed))
        self.report = report_file
        self.checked = self.bad = 0

    def on_success(self, task_id, result, worker_id):
        want = np.tanh(self.w @ vector(task_id))
        got = np.frombuffer(result, dtype=np.float32)
        self.checked += 1
        if got.shape != want.shape or not np.allclose(got, want, atol=1e-5):
            self.bad += 1

    def on_error(self, task_id, error, worker_id):
        print(f"task {task_id} failed: {error}")
        self.bad += 1

    def on_exit(self, stats):
        line = f"checked {self.checked}, wrong {self.bad}, ok {stats['ok']}"
        print(line)
        with open(self.report, "w") as f:
            f.write(line + "\n")
