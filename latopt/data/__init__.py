"""Datasets for training and folding, chosen by a task spec string.

Specs (``data.task`` in the config, ``--data`` on the command line):

- ``digits``: scikit-learn's bundled 8x8 handwritten digits (1797 images, offline), split 60/20/20 into
  train/val/test, stratified and deterministic in ``split_seed``; upsampled (bilinear) to the
  config resolution, 3 channels, normalised with the training split's mean/std.
- ``digits-clutter``: a harder task built from the same real digits: each digit is scaled to 24..36 px
  and placed at a random position on a 64x64 canvas cluttered with 4 fragments of *other* digits and
  Gaussian noise (3 canvases per source digit; the split is done on the source digits first, so no
  test digit is seen in training). Generated deterministically from ``split_seed``; resized to the
  config resolution. With ``augment`` the training canvases are generated afresh each time a digit is
  drawn (from the torch RNG, so a seeded run is still reproducible): far less over-fitting. Telling the
  digit from the fragments needs non-linear features, so folding costs accuracy here, where on plain digits
  almost any fold keeps it.
- ``fashion-mnist[:PATH]``, ``mnist[:PATH]``: the 28x28 grey IDX data sets (gzipped or not), never downloaded:
  ``$LATOPT_DATA/<name>``, then (Fashion-MNIST) Debian's ``/usr/share/datasets/fashion-mnist`` from
  ``apt-get install dataset-fashion-mnist``, or PATH (the four files, or torchvision's ``FashionMNIST/raw``).
  5,000 of the 60,000 training images (seeded by ``split_seed``) are the validation split, the 10,000 test
  images the test split. Held in memory as uint8 and served a batch at a time (resize, normalisation with the
  training split's mean/std, and with ``augment`` random crop + flip, all on the batch tensor).
- ``fashion-mnist-mini``: a stratified subset of Fashion-MNIST shipped with the package (8 MB; Zalando's MIT
  licence beside it): 13,000 of the training images, of which 5,000 (by ``split_seed``) are the validation split,
  and 5,000 of the test images, the test split; offline, served as ``fashion-mnist`` is. A real-data task for a
  machine without the full set, with a validation split large enough to confirm a 1-point accuracy promise.
- ``imagefolder:PATH``: ``PATH/train/<class>/*`` and ``PATH/val/<class>/*`` (torchvision
  ``ImageFolder``); ``PATH/test/`` is used as the test split when present, otherwise ``val/`` doubles
  as the test split. Images are resized to the resolution (resize to 1.14x + centre crop; random
  resized crop + flip for training with ``augment``), ImageNet mean/std. The first image of each split
  is verified up front; any other file that cannot be decoded stops training when it is read, with one
  line naming the file and its split (:class:`UnreadableImage`; no up-front scan of a large folder).
- ``cifar10:PATH``: CIFAR-10 as distributed, never downloaded: the python batches
  (``cifar-10-batches-py``: ``data_batch_1..5``, ``test_batch``, ``batches.meta``) or the binary ones
  (``cifar-10-batches-bin``: ``data_batch_1..5.bin``, ``test_batch.bin``, ``batches.meta.txt``; a label
  byte and 3072 image bytes per record); PATH is that directory or its parent. The python batches are
  pickles: they are read with an unpickler that allows only the numpy globals an array needs, so a
  file that would run code is refused with one line naming the global. 10 % of the training batches
  (seeded) are held out as the validation split.

A missing, empty or malformed dataset directory raises :class:`LatoptError` with one line saying
what is wrong.

Every spec names a task of the registry (:mod:`latopt.data.registry`: ``NAME`` or ``NAME:PATH``); a task
module registers its factory with :func:`register_task`, and an unknown name is refused with one line
listing the registered ones. The modules: ``task.py`` (:class:`Task`, :func:`limit_task`), ``registry.py``
(:func:`register_task`, :func:`get_task`, :func:`load_task`), ``digits.py`` (``digits``, ``digits-clutter``,
:func:`split_indices`), ``idx.py`` (the IDX reader), ``mnist.py`` (``fashion-mnist``, ``mnist``), ``arrays.py``
(:class:`ArrayImages`, in-memory images served in batches), ``folder.py`` (``imagefolder``), ``cifar.py`` (``cifar10``), ``transforms.py`` (the
image transforms of both), ``loaders.py`` (:func:`make_loaders`, :class:`ShardSampler`), ``fingerprint.py``
(:func:`data_meta`, :func:`data_fingerprint`), ``normalize.py`` (``data.normalize``: :func:`config_norm`,
:func:`norm_of`, :func:`renormalize`, :class:`Renormalized`).

Public API: :class:`Task`, :func:`get_task`, :func:`load_task` (the task of a run config), :func:`limit_task`,
:func:`make_loaders`, :func:`collate` (the loaders' collation: a batched dataset's batch as it is),
:class:`ShardSampler`, :func:`data_meta` (what a checkpoint records about its data),
:func:`data_fingerprint`, :func:`split_indices` (the one digits split), :func:`split_validation` (validation
cut into a selection and a confirmation part: a search's recommendation), :func:`register_task` and
:data:`TASKS` (the registry: name -> :class:`TaskEntry`), :class:`UnreadableImage`.
"""

from __future__ import annotations

# the task modules register their tasks when imported; the registry lists them in this order
# isort: off
from latopt.data import digits, mnist, folder, cifar  # noqa: F401
# isort: on
from latopt.data.cifar import CIFAR_MEAN, CIFAR_STD
from latopt.data.digits import split_indices
from latopt.data.fingerprint import data_fingerprint, data_meta
from latopt.data.folder import UnreadableImage
from latopt.data.loaders import ShardSampler, collate, make_loaders
from latopt.data.normalize import Renormalized, config_norm, norm_of, renormalize
from latopt.data.registry import TASKS, TaskEntry, get_task, load_task, register_task, task_forms
from latopt.data.task import Task, limit_task, split_validation, subsample_train

__all__ = ["CIFAR_MEAN", "CIFAR_STD", "TASKS", "Renormalized", "ShardSampler", "Task", "TaskEntry", "UnreadableImage",
           "collate", "config_norm", "data_fingerprint", "data_meta", "get_task", "limit_task", "load_task",
           "make_loaders", "norm_of", "register_task", "renormalize", "split_indices", "split_validation",
           "subsample_train", "task_forms"]
