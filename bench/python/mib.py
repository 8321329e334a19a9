# 1 MiB inputs read as a memoryview: the worker looks at both ends of each (no copy).
class Ends:
    def setup(self, gpu_id, seed, **kwargs):
        pass

    def process(self, data):
        return bytes(data[:4]) + bytes(data[-4:])


def items(count, **kwargs):
    """The Python generator on its own: count short str items."""
    for i in range(int(count)):
        yield str(i)


def on_success(task_id, result, worker_id):
    """The Python sink on its own: a callback that does nothing."""
