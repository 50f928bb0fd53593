"""Make ``latopt/data/fashion-mnist-mini.npz``, the Fashion-MNIST subset the package ships (task ``fashion-mnist-mini``,
the quickstart's data), from the four IDX files of Fashion-MNIST.

    apt-get install -y dataset-fashion-mnist && python tools/make_fashion_mini.py
    python tools/make_fashion_mini.py --source DIR      # the four files (.gz or not) in DIR

The subset is stratified and drawn once with a fixed seed: 1,300 images of each class from the 60,000 training
images (13,000: the task's training and validation splits, cut by ``data.split_seed``) and 500 of each class from the
10,000 test images (5,000: its test split). The file holds the images (uint8, 28x28), the labels, the indices of the
images in the source files and the SHA-256 of the source files, so that the subset can be checked against them.
Fashion-MNIST is Zalando SE's, under the MIT (Expat) licence; its notice is written beside the file
(``fashion-mnist-mini.LICENSE``) and ships with it.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from latopt.data.idx import MNIST_FILES, find_mnist_dir, read_mnist_files  # noqa: E402
from latopt.data.mnist import MINI_FILE, MINI_LICENSE  # noqa: E402

PER_CLASS = {"train": 1300, "test": 500}
SEED = [2026, 12, 4]
NOTICE = """The file fashion-mnist-mini.npz holds a subset of Fashion-MNIST
(https://github.com/zalandoresearch/fashion-mnist): 13,000 of its training images and 5,000 of its test images,
drawn by tools/make_fashion_mini.py.

The MIT License (MIT)
Copyright © 2017 Zalando SE, https://tech.zalando.com

Permission is hereby granted, free of charge, to any person obtaining a copy of this software and associated
documentation files (the "Software"), to deal in the Software without restriction, including without limitation the
rights to use, copy, modify, merge, publish, distribute, sublicense, and/or sell copies of the Software, and to
permit persons to whom the Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or substantial portions of the
Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT NOT LIMITED TO THE
WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR
COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR
OTHERWISE, ARISING FROM, OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""


def stratified(labels: np.ndarray, per_class: int, rng: np.random.Generator) -> np.ndarray:
    """``per_class`` indices of each class, drawn without replacement, sorted."""
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(labels == c), per_class, replace=False)
                                   for c in range(10)]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", default="/usr/share/datasets/fashion-mnist", help="the four IDX files (default: Debian's)")
    p.add_argument("--out", default=str(MINI_FILE), help=f"default {MINI_FILE.relative_to(ROOT)}")
    args = p.parse_args(argv)
    src = find_mnist_dir(Path(args.source), "FashionMNIST")
    if src is None:
        print(f"make_fashion_mini: no Fashion-MNIST in {args.source}: apt-get install -y dataset-fashion-mnist, "
              "or give --source DIR", file=sys.stderr)
        return 2
    train_x, train_y, test_x, test_y = read_mnist_files(src)
    rng = np.random.default_rng(SEED)
    tr, te = stratified(train_y, PER_CLASS["train"], rng), stratified(test_y, PER_CLASS["test"], rng)
    digests = {}
    for f in MNIST_FILES.values():
        path = next(p for p in (src / f, src / f"{f}.gz") if p.is_file())
        digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    buf = io.BytesIO()
    np.savez_compressed(buf, train_x=train_x[tr], train_y=train_y[tr].astype(np.uint8), test_x=test_x[te],
                        test_y=test_y[te].astype(np.uint8), train_index=tr.astype(np.int32),
                        test_index=te.astype(np.int32),
                        sources=np.array(sorted(f"{k} {v}" for k, v in digests.items())))
    out = Path(args.out)
    out.write_bytes(buf.getvalue())
    (out.parent / MINI_LICENSE).write_text(NOTICE)
    print(f"wrote {out} ({out.stat().st_size / 1e6:.1f} MB: {len(tr)} training and {len(te)} test images) and "
          f"{out.parent / MINI_LICENSE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
