from checked import BaseWorker, Dispatcher

import time

# --- 1. Define the Worker ---
class InferenceWorker(BaseWorker):
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

# --- 4. Run Pipeline ---
if __name__ == "__main__":
    # Configure the dispatcher
    dispatcher = Dispatcher(
        worker_cls=InferenceWorker,
        gpu_ids=[0, 1, 2, 3],
        queue_size=512
    )
    
    print("Starting Dispatcher...")
    
    try:
        # Start processing
        dispatcher.run(
            generator=path_generator(),
            on_success=on_result,
            on_error=on_failure,
            on_timeout=on_timeout_handler,
            task_timeout=30.0,  # 30 seconds per task
            # Arguments below are passed to setup()
            config_path="./configs/yolo_v8.yaml",
            base_seed=100
        )
    except KeyboardInterrupt:
        print("\nStopped by user.")
