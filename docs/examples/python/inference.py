# The usage example of the library gpud grew from, as gpud runs it: the worker class,
# the generator function and the callbacks are the library's, unchanged; what was the
# Dispatcher(...).run(...) call is job.ini. Run it with:  gpud run job.ini
import time

import gpud


# --- 1. Define the Worker ---
class InferenceWorker(gpud.BaseWorker):
    def setup(self, gpu_id, seed, config_path):
        self.gpu_id = gpu_id
        print(f"[GPU {gpu_id}] Initializing with config: {config_path}")
        # Simulate heavy model loading
        time.sleep(1)

    def process(self, image_path):
        # Simulate inference
        # result = model(image_path)
        return f"Features from {image_path} via GPU {self.gpu_id}"

    def cleanup(self):
        print(f"[GPU {self.gpu_id}] Shutting down.")


# --- 2. Define Data Source ---
def path_generator():
    # This generator can yield millions of items without memory issues
    # thanks to the Dispatcher's backpressure mechanism.
    for i in range(1000):
        yield f"/data/img_{i:04d}.jpg"


# --- 3. Define Callbacks ---
def on_result(task_id, data, worker_id):
    if task_id % 100 == 0:
        print(f"Progress: {task_id} on GPU {worker_id} -> {data}")


def on_failure(task_id, error, worker_id):
    print(f"Task {task_id} Failed on GPU {worker_id}: {error}")


def on_timeout_handler(task_id, timeout, worker_id):
    print(f"Task {task_id} on GPU {worker_id} timed out after {timeout}s")


# gpud calls the callbacks by these names (the library took them as arguments).
on_success = on_result
on_error = on_failure
on_timeout = on_timeout_handler
