# SPDX-License-Identifier: MIT
"""Rows of a Parquet file through gpud.Dispatcher, read by the program's own pyarrow.

gpud has no Parquet reader of its own: the program reads the file in record batches
(pyarrow.parquet.ParquetFile.iter_batches, a few thousand rows in memory at a time) and
yields each row's value; gpud's workers run the model class on them and the results
come back to the callback, here collected into one NumPy array, a row per input row.

    python3 parquet_rows.py [FILE.parquet [COLUMN]]

Without a file it writes a small one first (texts.parquet, column "text"). It needs
pyarrow and NumPy in the Python that runs it (pip install pyarrow numpy); where pyarrow
is not installed it says so in one line and exits 0 without running anything.
"""
import os
import sys

try:
    import pyarrow as pa
    import pyarrow.parquet as pq
except ImportError:
    print("SKIP: parquet_rows.py reads Parquet through pyarrow, which this Python does not "
          "have (pip install pyarrow)")
    sys.exit(0)
import numpy as np

import gpud


class Embed(gpud.BaseWorker):
    """A stand-in model: a text to 4 float32 features (its length, its vowels, its
    words, its first letter); a real one loads its weights in setup()."""

    def setup(self, gpu_id, seed):
        self.gpu = gpu_id

    def process(self, text):
        words = text.split()
        return np.array([len(text), sum(c in "aeiou" for c in text), len(words),
                         ord(text[0]) if text else 0], dtype=np.float32)


def rows(path, column, batch_rows=4096):
    """The column's values, one at a time, read a record batch at a time."""
    f = pq.ParquetFile(path)
    for batch in f.iter_batches(batch_size=batch_rows, columns=[column]):
        yield from batch.column(0).to_pylist()


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "texts.parquet"
    column = sys.argv[2] if len(sys.argv) > 2 else "text"
    if len(sys.argv) < 2 and not os.path.exists(path):
        texts = [f"row {i}: the quick brown fox" + " jumps" * (i % 5) for i in range(10000)]
        pq.write_table(pa.table({column: texts}), path)
    n = pq.ParquetFile(path).metadata.num_rows
    out = np.zeros((n, 4), dtype=np.float32)
    failed = []

    def done(task_id, features, gpu):
        out[task_id] = features  # task ids are row numbers, in file order

    stats = gpud.Dispatcher(Embed, "auto").run(
        rows(path, column), done, on_error=lambda t, e, g: failed.append((t, e)))
    np.save("features.npy", out)
    print(f"{stats['completed']} of {n} rows embedded into features.npy "
          f"({len(failed)} failed)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
