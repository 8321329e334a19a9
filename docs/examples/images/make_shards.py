"""Makes WebDataset-style shards of JPEGs to try docs/images-to-array.md on:
shards/shard-000.tar ... each sample a random image (KEY.jpg) and its class (KEY.cls).

    /usr/bin/python3 docs/examples/images/make_shards.py [SHARDS] [SAMPLES_PER_SHARD]

Needs NumPy and Pillow (Debian: python3-numpy python3-pil)."""
import io
import os
import sys
import tarfile

import numpy as np
from PIL import Image


def main():
    shards = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    per = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    os.makedirs("shards", exist_ok=True)
    rng = np.random.default_rng(1)
    for s in range(shards):
        with tarfile.open(f"shards/shard-{s:03d}.tar", "w") as t:
            for i in range(per):
                h, w = rng.integers(120, 480, 2)
                img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
                buf = io.BytesIO()
                Image.fromarray(img).save(buf, "JPEG", quality=90)
                for ext, data in (("jpg", buf.getvalue()), ("cls", b"%d" % (i % 10))):
                    info = tarfile.TarInfo(f"s{s:03d}-{i:06d}.{ext}")
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
    print(f"{shards} shards of {per} samples in shards/")


if __name__ == "__main__":
    main()
