"""Hostile input and interruptions against the whole ``latopt`` command line: a fuzz suite and a fault suite.

    python -m tests.harness fuzz   [--n N] [--seed 0] [--json OUT] [--work DIR] [--in-process]
    python -m tests.harness faults [--n 15]  [--seed 0] [--json OUT] [--work DIR]

run from the checkout's root. Both run against the checkout this package lives in (its root goes first
on ``PYTHONPATH``), build their fixtures with that checkout's own commands (a tiny ``mobilenetv2_035`` at
32 px on 64 digits: config, fast CPU device profile, base/folded checkpoints, a LUT, a study, a small MLP,
fake CIFAR and image folders), and print how many cases were tried, how many were clean, and each failure
kind with one example. ``--json`` writes every case. ``tests/test_fuzz.py`` and ``tests/test_faults.py``
run a small deterministic subset of the same cases.

Failure kinds: traceback, wrong exit code, multi-line error, leftover files, device replaced, pickle
executed, wrong result, timeout (fuzz); traceback, wrong exit code, leftover files, partial files, orphan
processes, artefact mismatch, timeout (faults). A case can show several.

Modules by job: :mod:`.process` runs one command (a subprocess under limits, or in-process) and reads its
stderr; :mod:`.files` lists directories and loads what a command wrote; :mod:`.fixtures` builds the inputs;
:mod:`.judge` holds a case, its outcome and the rules that judge it; :mod:`.mutations` the artefact tables;
:mod:`.fuzz` and :mod:`.faults` the two suites; ``__main__`` the command line and its report.
"""
