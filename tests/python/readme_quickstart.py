from checked import BaseWorker, Dispatcher, dataset, result

class InferenceWorker(BaseWorker):
    def setup(self, gpu_id, seed, model_path):
        self.gpu_id = gpu_id
        # Load your model here

    def process(self, data):
        # Run inference
        return result

    def cleanup(self):
        # Release resources
        pass

def data_generator():
    for item in dataset:
        yield item

def on_success(task_id, result, worker_id):
    # Handle result
    pass

def on_exit():
    print("All workers drained!")

dispatcher = Dispatcher(
    worker_cls=InferenceWorker,
    gpu_ids=[0, 1, 2, 3],
    queue_size=512,
)

dispatcher.run(
    generator=data_generator(),
    on_success=on_success,
    on_exit=on_exit,
    model_path="./model.pth",
)
