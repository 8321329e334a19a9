# The no-op worker class of the Python benchmark: returns its input. The same class
# runs under gpud (noop.ini) and under the library gpud grew from (library.py).
class Noop:
    def setup(self, gpu_id, seed, **kwargs):
        pass

    def process(self, data):
        return data

    def cleanup(self):
        pass
