"""The budget loop: the DP's plan timed on the device against the as-is network, and re-solved with the budget
corrected by what was measured, so that the plan meets the budget *when measured*, not only on the LUT.

The DP fills the LUT-predicted budget to the last per cent, so every error of the LUT (a few per cent at
224 px, more at 32 px, and moving with the machine's load) becomes a miss. The device is at hand, so after
:func:`latopt.dp.select_plan` has chosen a plan at budget B the loop times it against the as-is network in one
interleaved run (:func:`latopt.latency.profiler.measure_networks`, the networks in the form export ships:
:func:`latopt.rewrite.as_shipped`; seconds). The measured ratio r_m is the plan's median over the as-is median (what
``latopt export`` measures: 1 / its speed-up); its spread is the quartiles of the per-round ratio. Then:

- r_m within the tolerance ``[B·(1 − TOL_BELOW), B·(1 + TOL_ABOVE)]`` (3 % below, 2 % above): done;
- else the DP solves again at ``B · r_p / r_m`` (r_p: the LUT's predicted ratio of the plan just measured),
  i.e. with the LUT's error on that plan taken out of the budget (clipped to 1), and the new plan is measured;
- at most ``rounds`` plans are measured (default :data:`DEFAULT_ROUNDS`); the loop also stops when the
  re-solved plan is one already measured (the same correction would repeat) or the corrected budget is below
  the fastest network the variants allow.

**Noise.** On a loaded machine one timing can be far off (on the 2-core development machine at load 10, the
as-is network measured 0.09 ms in one run and 0.27 ms, with an inter-quartile range wider than its median, in
the next). A timing is *trusted* when the standard error of its median per-round ratio (from the quartiles:
``Measured.ratio_se``) is at most ``NOISE_FRACTION`` (1/4) of the tolerance's width; a plan is timed up to
``TIMINGS`` (3) times, the rounds of its timings pooled (:meth:`Measured.pooled`), until the pooled timing is
trusted. A plan whose pooled timings are still not trusted ends the loop (note: too noisy), and its round is
recorded with ``trusted: false``; the budget is never corrected by such a timing.

The plan kept: the first measured within the tolerance; else the least-loss measured plan that met
``B·(1 + TOL_ABOVE)`` (equal loss: the lower measured ratio), status ``under`` (it meets the budget, spending
more accuracy than asked); else the one measured lowest, status ``over``; only trusted rounds are chosen
from. Without any trusted round the DP's plan on the LUT is kept, status ``noisy``. A LUT that errs by the
same factor on every plan therefore meets the budget in the second round (``tests/test_budget_loop.py``
checks it with a fake timer).

Not measured (one note in the record and a progress line): ``rounds`` 0 (status ``off``); a ``count`` device
(flops, params, uniform: its counts are exact and additive, status ``exact``); a device that cannot run here (e.g.
TensorRT without its GPU, status ``skipped``); no device profile of the LUT's device here, or one whose backend,
precision or batch is not the LUT's (``skipped``). The plan is then the DP's plan on the LUT alone.

The record (:class:`latopt.dp.plan_record.BudgetLoop`; ``budget_loop`` in the plan file and in the DP's report.json)::

    asked        B, the budget asked for
    rounds_max   the most plans measured;  tolerance [low, high]: the accepted measured ratios
    status       met | under | over | noisy | off | exact | skipped;  note: why not measured / why it stopped
    device       the device profile timed on (null when not measured)
    chosen       the index of the round whose plan is kept (null when not measured)
    rounds       [{budget (what the DP solved at), plan {block: variant} changed blocks, spans, loss,
                   predicted_ms, predicted_ratio, timings (how often the plan was timed), trusted,
                   measured: {ratio, ratio_q1, ratio_q3, asis_ms, plan_ms, asis_iqr_ms, plan_iqr_ms, n}}, ...]
                   (measured: the timings' rounds pooled)

Public API::

    DEFAULT_ROUNDS, TOL_BELOW, TOL_ABOVE, NOISE_FRACTION   (TIMINGS and the statuses: latopt.dp.plan_record)
    meet_budget(lut, losses, budget, *, rounds=DEFAULT_ROUNDS, device=None, measure=None, progress=True,
                resolution=DEFAULT_RESOLUTION) -> (plan, selection, record)
    Measured(ratio, ratio_q1, ratio_q3, asis_ms, plan_ms, asis_iqr_ms, plan_iqr_ms, n)   a plan's timing
        .from_rounds(asis_ms, plan_ms) (one sample each per interleaved round), .pooled(other), .ratio_se, .record()
    loop_device(lut, device) -> (DeviceProfile | None, note | None, status)   the profile to time on, or why not
    device_timer(lut, profile) -> context manager of a function (plan, spans) -> Measured
    format_loop(record) -> list[str];  loop_summary(record) -> str             the report's lines; a summary's words
    check_rounds(rounds) -> int                                                0 .. MAX_BUDGET_ROUNDS, else LatoptError
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from latopt.constants import MAX_BUDGET_ROUNDS
from latopt.dp.knapsack import DEFAULT_RESOLUTION
from latopt.dp.plan_record import TIMINGS, BudgetLoop, LoopMeasured, LoopRound, Selection
from latopt.dp.select import check_budget, select_plan
from latopt.errors import LatoptError
from latopt.latency.lut import LUT
from latopt.log import get_logger
from latopt.runtime import TimingStats

DEFAULT_ROUNDS = 3     # plans measured at most (the first one included); 0: the loop is off
TOL_BELOW = 0.03       # a measured ratio down to B·(1 − 3 %) meets the budget without wasting accuracy
TOL_ABOVE = 0.02       # ... and up to B·(1 + 2 %) meets it within the timing's noise
NOISE_FRACTION = 0.25  # a measurement is trusted when its ratio's standard error is <= this x the tolerance's width
_LOG = get_logger("dp")


@dataclass(frozen=True)
class Measured:
    """A plan timed against the as-is network in interleaved rounds (one call of each per round)."""

    ratio: float        # plan median / as-is median (what export measures: 1 / its speed-up)
    ratio_q1: float     # quartiles of the per-round ratio
    ratio_q3: float
    asis_ms: float
    plan_ms: float
    asis_iqr_ms: float
    plan_iqr_ms: float
    n: int              # rounds timed
    rounds: tuple[tuple[float, float], ...] = field(default=(), repr=False, compare=False)   # (as-is, plan) ms

    @classmethod
    def from_rounds(cls, asis_ms: Sequence[float], plan_ms: Sequence[float]) -> Measured:
        """From the times of each round (``asis_ms[i]`` and ``plan_ms[i]`` from round i of one interleaved run)."""
        a, p = TimingStats.from_samples(asis_ms), TimingStats.from_samples(plan_ms)
        r = p.per_round_ratio(a)
        return cls(ratio=p.median_ms / a.median_ms, ratio_q1=r.q1_ms, ratio_q3=r.q3_ms, asis_ms=a.median_ms,
                   plan_ms=p.median_ms, asis_iqr_ms=a.iqr_ms, plan_iqr_ms=p.iqr_ms, n=r.n,
                   rounds=tuple(zip(a.samples_ms, p.samples_ms, strict=True)))

    def pooled(self, other: Measured) -> Measured:
        """The rounds of both timings as one timing (each round's pair stays together)."""
        both = self.rounds + other.rounds
        return Measured.from_rounds([a for a, _ in both], [p for _, p in both])

    @property
    def ratio_se(self) -> float:
        """The standard error of the median per-round ratio, from its quartiles (normal approximation:
        σ ≈ IQR / 1.349, SE(median) ≈ 1.2533 σ / √n)."""
        return 1.2533 * (self.ratio_q3 - self.ratio_q1) / 1.349 / max(self.n, 1) ** 0.5

    def record(self) -> LoopMeasured:
        """The plan file's ``measured`` (the rounds themselves are not kept)."""
        return LoopMeasured(**{k: v for k, v in asdict(self).items() if k != "rounds"})


Timer = Callable[[Mapping[int, str], Sequence[Sequence[int]]], Measured]


def check_rounds(rounds: int, param: str = "budget_rounds") -> int:
    r = int(rounds)
    if not 0 <= r <= MAX_BUDGET_ROUNDS:
        raise LatoptError(f"{param} {rounds!r}: the most plans the budget loop measures, 0 (off) .. {MAX_BUDGET_ROUNDS}",
                          param=param)
    return r


def loop_device(lut: LUT, device: Any = None) -> tuple[Any, str | None, str]:
    """The device profile to time the LUT's plans on: ``device`` (a name, a path or a profile) when it is the
    LUT's device, else the LUT's device by name. Returns (profile, None, "measure"), or (None, why not,
    status): ``exact`` for a count device, ``skipped`` otherwise (module docstring)."""
    from latopt.latency.backends.count import CountProfile
    from latopt.latency.devices import DeviceProfile, load_device

    profile = None
    for spec in (device, lut.device):
        if spec is None:
            continue
        try:
            p = spec if isinstance(spec, DeviceProfile) else load_device(spec)
        except LatoptError:
            continue
        if p.name == lut.device:
            profile = p
            break
    if profile is None:
        return None, f"no device profile {lut.device!r} (the LUT's device) here to time the plan on", "skipped"
    if isinstance(profile, CountProfile):
        return None, f"device {profile.name} counts ({profile.count}): its counts are exact, nothing to measure", "exact"
    have = {"backend": lut.backend, "precision": lut.precision, "batch": lut.batch}
    for key, value in have.items():
        if value not in (None, "") and value != getattr(profile, key):
            return None, (f"device profile {profile.name} has {key} {getattr(profile, key)!r}, the LUT {value!r}: "
                          "its times would not be the LUT's device's"), "skipped"
    if lut.backend in (None, ""):
        return None, "the LUT records no backend: which runtime its times are of is unknown", "skipped"
    return profile, None, "measure"


@contextlib.contextmanager
def device_timer(lut: LUT, profile: Any) -> Iterator[Timer]:
    """A function timing a plan (with its spans) against the as-is network on ``profile`` (one interleaved run
    each call, the networks as export ships them, random weights: times do not depend on them), the backend
    opened once and closed on exit. LatoptError when the backend cannot run here."""
    import torch

    from latopt.latency.backends import close_backend, get_backend
    from latopt.latency.profiler import measure_networks
    from latopt.nets.blocks import input_channels
    from latopt.nets.models import build_model
    from latopt.rewrite import as_shipped

    backend = get_backend(profile)
    try:
        model = build_model(lut.model, num_classes=int(lut.num_classes or 1000)).eval()
        R = int(lut.resolution)
        shape = (int(profile.batch), input_channels(model), R, R)

        def timer(plan: Mapping[int, str], spans: Sequence[Sequence[int]]) -> Measured:
            with torch.no_grad():
                net = model if not plan else as_shipped(model, dict(plan), spans=[s[:2] for s in spans],
                                                         mode=lut.fold_mode, input_size=(R, R))[0]
            st = measure_networks({"as-is": model, "plan": net}, profile, shape, backend=backend)
            return Measured.from_rounds(st["as-is"].samples_ms, st["plan"].samples_ms)

        yield timer
    finally:
        close_backend(backend)


def _record(budget: float, rounds_max: int, status: str, note: str | None, device: str | None,
            chosen: int | None = None, rounds: Sequence[LoopRound] = ()) -> BudgetLoop:
    return BudgetLoop.model_validate({
        "asked": budget, "rounds_max": rounds_max, "tolerance": list(_tolerance(budget)), "status": status,
        "note": note, "device": device, "chosen": chosen, "rounds": list(rounds)})


def _tolerance(budget: float) -> tuple[float, float]:
    return budget * (1 - TOL_BELOW), budget * (1 + TOL_ABOVE)


def meet_budget(lut: LUT, losses: Mapping[int, Mapping[str, float]], budget: float, *, rounds: int = DEFAULT_ROUNDS,
                device: Any = None, measure: Timer | None = None, progress: bool = True,
                resolution: int = DEFAULT_RESOLUTION) -> tuple[dict[int, str], Selection, BudgetLoop]:
    """The DP's plan at ``budget`` (:func:`latopt.dp.select_plan`), measured and re-solved until it meets the
    budget when measured (module docstring). ``measure`` times a plan (tests give a fake); else the plans are
    timed on ``device`` (:func:`loop_device`). Returns (plan, the selection info of the plan kept, the record)."""
    budget = check_budget(budget)
    rounds = check_rounds(rounds)
    plan, sel = select_plan(lut, losses, budget, resolution=resolution)
    profile = None
    if rounds == 0:
        status, note = "off", "budget loop off (0 rounds): the plan meets the budget on the LUT, not measured"
    elif measure is not None:
        status, note = "measure", None
    else:
        profile, note, status = loop_device(lut, device)
    if status != "measure":
        if progress:
            _LOG.info(f"budget loop: {note}")
        return plan, sel, _record(budget, rounds, status, note, None if profile is None else profile.name)
    with contextlib.ExitStack() as stack:
        if measure is None:
            assert profile is not None  # loop_device's, with status "measure"
            try:
                measure = stack.enter_context(device_timer(lut, profile))
            except LatoptError as e:   # the backend cannot run on this machine (TensorRT without its GPU, ...)
                note = f"device {profile.name} cannot be timed here: {e}"
                if progress:
                    _LOG.info(f"budget loop: {note}")
                return plan, sel, _record(budget, rounds, "skipped", note, None)
        plan, sel, chosen, status, note, done = _loop(lut, losses, budget, rounds, plan, sel, measure, progress,
                                                      resolution)
        return plan, sel, _record(budget, rounds, status, note, None if profile is None else profile.name, chosen,
                                  done)


def _timed(measure: Timer, plan: Mapping[int, str], spans: Sequence[Sequence[int]],
           max_se: float) -> tuple[Measured, int, bool]:
    """(the timing, the timings taken, trusted): the plan timed up to TIMINGS times, the rounds pooled, until the
    pooled timing's standard error is at most ``max_se``."""
    m = measure(plan, spans)
    for t in range(2, TIMINGS + 1):
        if m.ratio_se <= max_se:
            return m, t - 1, True
        m = m.pooled(measure(plan, spans))
    return m, TIMINGS, m.ratio_se <= max_se


def _loop(lut: LUT, losses: Mapping[int, Mapping[str, float]], budget: float, rounds: int, plan: dict[int, str],
          sel: Selection, measure: Timer, progress: bool, resolution: int
          ) -> tuple[dict[int, str], Selection, int, str, str | None, list[LoopRound]]:
    """The measured rounds: (the plan kept, its selection, its round's index, the status, the note, the rounds)."""
    low, high = _tolerance(budget)
    max_se = NOISE_FRACTION * (high - low)
    first = (plan, sel)
    tried: list[tuple[dict[int, str], Selection]] = []
    done: list[LoopRound] = []
    note = None
    for k in range(rounds):
        m, timings, trusted = _timed(measure, plan, sel.spans, max_se)
        tried.append((plan, sel))
        done.append(LoopRound.model_validate({
            "budget": sel.budget, "plan": {str(i): v for i, v in plan.items()}, "spans": sel.spans, "loss": sel.loss,
            "predicted_ms": sel.predicted_ms, "predicted_ratio": sel.ratio, "timings": timings, "trusted": trusted,
            "measured": m.record()}))
        line = (f"budget loop round {k + 1}/{rounds}: DP at {sel.budget:.4f} changed {len(plan)} blocks, LUT ratio "
                f"{sel.ratio:.3f}; measured {m.ratio:.3f} (quartiles {m.ratio_q1:.3f}-{m.ratio_q3:.3f}, standard "
                f"error {m.ratio_se:.4f}, as-is {m.asis_ms:.3f} ms, {m.n} rounds in {timings} timing(s)) against {budget:g} "
                f"[{low:.3f}, {high:.3f}]")
        if not trusted:
            note = (f"the timings are too noisy to correct the budget (standard error of the ratio {m.ratio_se:.4f} > "
                    f"{max_se:.4f} over {timings} timings pooled): measure on a quieter machine")
            if progress:
                _LOG.info(line + f": {note}")
            break
        if low <= m.ratio <= high:
            if progress:
                _LOG.info(line + ": within")
            break
        if k + 1 == rounds:
            if progress:
                _LOG.info(line + ": outside, no rounds left")
            break
        nxt = min(1.0, budget * sel.ratio / m.ratio)
        try:
            plan2, sel2 = select_plan(lut, losses, nxt, resolution=resolution)
        except LatoptError:
            note = (f"the corrected budget {nxt:.4f} is below the fastest network the variants allow "
                    f"({sel.fastest_ms / sel.asis_ms:.4f} of as-is on the LUT)")
            if progress:
                _LOG.info(line + f": outside; {note}")
            break
        if any(p == plan2 and s.spans == sel2.spans for p, s in tried):
            note = f"the DP at the corrected budget {nxt:.4f} chose a plan already measured"
            if progress:
                _LOG.info(line + f": outside; {note}")
            break
        if progress:
            _LOG.info(line + f": outside, re-solving at {nxt:.4f}")
        plan, sel = plan2, sel2
    ratios = {i: r.measured.ratio for i, r in enumerate(done) if r.trusted}
    within = [i for i, r in ratios.items() if low <= r <= high]
    meets = [i for i, r in ratios.items() if r <= high]
    if within:
        chosen, status = within[0], "met"
    elif meets:
        chosen, status = min(meets, key=lambda i: (tried[i][1].loss, ratios[i])), "under"
    elif ratios:
        chosen, status = min(ratios, key=lambda i: ratios[i]), "over"
    else:   # nothing trusted: the DP's plan on the LUT (the first round's)
        chosen, status = 0, "noisy"
    plan, sel = tried[chosen]
    assert status != "noisy" or (plan, sel) == first
    if progress:
        _LOG.info(f"budget loop: kept round {chosen + 1} (measured {done[chosen].measured.ratio:.3f} "
                  f"for budget {budget:g}: {status})")
    return plan, sel, chosen, status, note, done


def loop_summary(rec: BudgetLoop | None) -> str:
    """The budget loop in a few words for a one-line summary ("" without a record)."""
    if rec is None:
        return ""
    if rec.chosen is None:
        return f"; not measured ({rec.status})"
    m = rec.rounds[rec.chosen].measured
    return (f"; measured {m.ratio:.3f} of as-is ({m.ratio_q1:.3f}-{m.ratio_q3:.3f}) in round "
            f"{rec.chosen + 1}/{len(rec.rounds)} of the budget loop: {rec.status}")


def format_loop(rec: BudgetLoop | None) -> list[str]:
    """The report's lines on the budget loop (none for a record without one: an older report or plan)."""
    if rec is None:
        return []
    low, high = rec.tolerance
    head = (f"budget loop: asked {rec.asked:g}, accepted measured ratio [{low:.3f}, {high:.3f}], status "
            f"{rec.status}" + (f" ({rec.note})" if rec.note else ""))
    lines = [head]
    for i, r in enumerate(rec.rounds):
        m = r.measured
        mark = ("" if r.trusted else "  (too noisy)") + ("  <- kept" if i == rec.chosen else "")
        lines.append(f"  round {i + 1}: DP at {r.budget:.4f}, {len(r.plan)} blocks changed, LUT ratio "
                     f"{r.predicted_ratio:.3f}, measured {m.ratio:.3f} (quartiles {m.ratio_q1:.3f}-"
                     f"{m.ratio_q3:.3f}; as-is {m.asis_ms:.3f} ms, plan {m.plan_ms:.3f} ms, {m.n} "
                     f"rounds){mark}")
    return lines
