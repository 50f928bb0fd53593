"""``latopt run [CONFIG]``: the main job, end to end, resumable.

train (or load) the base model → profile the device (LUT) → search with the config's method (``method:``, a
registered method of :mod:`latopt.methods`) → pick the recommended trial → export (ONNX + numeric gates + measured latency) → one report (Markdown with a per-block latency
bar chart marking the folded blocks and the Pareto plot) and a one-screen summary.

Everything lives under ``runs/<name>/`` (``name`` from the config). ``run.json`` records, for each
finished stage, what it was made from (its *fingerprint*: the config sections it depends on, the SHA-256
of its input artefacts, the device profile, the seed, the latopt version) and the SHA-256 of what it
wrote. A rerun reuses a stage only when its fingerprint is unchanged, its outputs are intact and every path
its record names is one of those hashed outputs (:func:`latopt.run.state.untied`);
otherwise that stage and every stage after it are re-run, and the summary says which stages were reused
and why the others were re-run (``fold.post_epochs changed (4 → 2)``, ``base checkpoint changed``, ...):

=========  ===========================================================================================
stage      fingerprint
=========  ===========================================================================================
base       config sections model, data, train; seed; latopt version
profile    config sections model, data; device profile; the variants the method needs timed; the config's
           ``lut`` path and SHA-256 when given (instead of the variants)
search     what the method reads of the config (:meth:`latopt.methods.Method.made_from`: Layer Folding's
           unsampled ``fold`` keys, ranges and sampler; the DP's ``dp`` section and fine-tuning keys) and
           ``search.max_acc_drop`` and ``search.storage``; base checkpoint and LUT SHA-256; seed; the validation rule
           (selection/confirmation split, confirmation bound); not ``trials`` (more trials resume the study)
export     exported checkpoint and LUT SHA-256; device profile; seed; latopt version
=========  ===========================================================================================

A search made from the same inputs resumes its study (after an interruption, or with more ``--trials``);
one made from other inputs starts a new study: the run's own SQLite study under ``runs/<name>/search/``
is deleted first, while a study in a storage URL the config names (``search.storage``) is never deleted:
the run refuses and says how to delete it. ``--fresh`` deletes the whole run directory's state (the same
rule for a configured storage) and starts over. ``runs/<name>/config.yaml`` is written when every stage
is done, so it always describes the artefacts beside it. Defaults: the shipped ``quickstart`` config
(``latopt/configs/quickstart.yaml``) on the ``cpu`` device.

The package, one job per module: ``state.py`` (run.json: records, fingerprint checks, ``--fresh``'s
clean-up), ``stages.py`` (the five stages, declared: fingerprint, outputs, make, reuse), ``pipeline.py``
(:func:`run_main`: the plan and the walk over the stages), ``report.py`` (REPORT.md, the charts, the summary).

Public API::

    run_main(config=None, *, device=None, trials=None, runs_dir="runs", seed=0, fresh=False) -> RunResult
    write_report(root, cfg, lut, base, srch, exported, times, plan=None) -> summary str
    latency_chart(lut, folded, path) -> Path
"""

from latopt.run.pipeline import DEFAULT_CONFIG, RunResult, run_main
from latopt.run.run_report import latency_chart, write_report

__all__ = ["DEFAULT_CONFIG", "RunResult", "latency_chart", "run_main", "write_report"]
