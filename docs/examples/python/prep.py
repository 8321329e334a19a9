# A CPU stage for the stage demos (config/stage-demo.ini, config/stage-cpu-demo.ini):
# it "decodes" task i (the range generator's decimal number) into a vector of `dim`
# float32 values made from i, as an image decoder or a tokenizer makes a model's input
# from a file name or a line of text. It runs in gpud's CPU processes, which have no GPU
# (CUDA_VISIBLE_DEVICES is empty, gpu_id is -1), in front of the GPU workers: the GPU
# never waits for it.
import random
from array import array


class Decode:
    def setup(self, gpu_id, seed, dim="1024", **keys):
        self.dim = int(dim)

    def process(self, data):
        rng = random.Random(int(bytes(data)))
        return array("f", (rng.uniform(-1.0, 1.0) for _ in range(self.dim))).tobytes()
