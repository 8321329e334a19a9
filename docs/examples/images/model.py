"""The model of docs/images-to-array.md: an image's embedding, here its per-channel
mean as 3 float32 (a stand-in for a network: put yours in setup() and process_batch()).

In a job file the jpeg stage's pixels arrive as bytes (height x width x 3 uint8); the
class makes them an array without a copy."""
import numpy as np

import gpud

SIDE = 224  # the jpeg stage's height and width in embed.ini


class Embed(gpud.BaseWorker):
    def setup(self, gpu_id, seed):
        self.gpu_id = gpu_id  # load the model onto this GPU here

    def process_batch(self, items):
        imgs = np.stack([np.frombuffer(b, np.uint8).reshape(SIDE, SIDE, 3) for b in items])
        means = imgs.reshape(len(items), -1, 3).mean(axis=1, dtype=np.float64)
        return list(means.astype(np.float32))  # one 12-byte row per image
