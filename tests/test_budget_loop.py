"""The DP's budget loop (latopt.dp.budgetloop): a plan measured against the as-is network and re-solved with the
budget corrected by the measurement. The loop's logic runs on a fake timer (deterministic: it measures the LUT's
prediction times a known factor); one CLI test times a tiny network for real (ONNX Runtime, no assertion on
times)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

import latopt.dp.budgetloop as bl
from latopt.cli import main
from latopt.config import load_config, write_config
from latopt.dp import plan_only, read_plan, select_plan, write_plan
from latopt.dp.budgetloop import TOL_ABOVE, TOL_BELOW, Measured, loop_device, meet_budget
from latopt.errors import LatoptError
from latopt.latency.lut import LUT, predict, save_lut
from tests.test_dp import MODEL, TINY, _lut_for


def _filling_losses(lut: LUT) -> dict[int, dict[str, float]]:
    """Loss = the time a variant saves: the DP then fills its budget as closely as the LUT's steps allow."""
    return {b.index: {v: b.ms["none"] - t for v, t in b.ms.items()} for b in lut.blocks}


class FakeTimer:
    """Measures a plan at ``factor`` × the LUT's prediction, recording each call: 41 rounds whose per-round ratios
    have their median there and their quartiles at ± ``spread`` of it (a mapping: by call, from 1)."""

    def __init__(self, lut: LUT, factor: float | Mapping[int, float], spread: float | Mapping[int, float] = 0.01) -> None:
        self.lut, self.factor, self.spread, self.calls = lut, factor, spread, []

    def __call__(self, plan: Mapping[int, str], spans: Sequence[Sequence[int]]) -> Measured:
        self.calls.append(dict(plan))
        n = len(self.calls)
        f = self.factor if isinstance(self.factor, float) else self.factor[n]
        w = self.spread if isinstance(self.spread, float) else self.spread[n]
        asis, ms = predict(self.lut, {}), f * predict(self.lut, plan, spans)
        z = [i / 10 for i in range(-20, 21)]   # inclusive quartiles -1 and 1, median 0
        return Measured.from_rounds([asis] * len(z), [ms * (1 + w * x) for x in z])


@pytest.mark.parametrize("factor", [1.15, 0.85])
@pytest.mark.parametrize("budget", [0.6, 0.75])
def test_a_lut_off_by_a_factor_meets_the_budget_in_the_second_round(factor: float, budget: float) -> None:
    lut = _lut_for(MODEL, 16)
    losses = _filling_losses(lut)
    timer = FakeTimer(lut, factor)
    plan, sel, rec = meet_budget(lut, losses, budget, measure=timer, progress=False)
    first, _ = select_plan(lut, losses, budget)
    low, high = budget * (1 - TOL_BELOW), budget * (1 + TOL_ABOVE)
    assert rec.tolerance == pytest.approx([low, high])
    r1, r2 = rec.rounds          # the LUT's plan misses by the factor; the corrected one meets the budget
    assert timer.calls == [first, plan] and r1.plan == {str(k): v for k, v in first.items()}
    assert r1.budget == budget and not low <= r1.measured.ratio <= high
    assert r2.budget == pytest.approx(min(1.0, budget * r1.predicted_ratio / r1.measured.ratio))
    assert low <= r2.measured.ratio <= high and r2.measured.ratio == pytest.approx(factor * sel.ratio)
    assert (rec.status, rec.chosen, rec.note) == ("met", 1, None)
    assert sel.budget == r2.budget and sel.ratio == r2.predicted_ratio and plan != first
    assert {str(k): v for k, v in plan.items()} == r2.plan


def test_a_plan_within_the_tolerance_is_kept_without_another_round() -> None:
    lut = _lut_for(MODEL, 16)
    losses = _filling_losses(lut)
    timer = FakeTimer(lut, 1.0)
    plan, sel, rec = meet_budget(lut, losses, 0.6, measure=timer, progress=False)
    assert (plan, sel) == select_plan(lut, losses, 0.6) and len(timer.calls) == 1
    assert (rec.status, rec.chosen, len(rec.rounds)) == ("met", 0, 1)


def test_the_loop_stops_when_the_rounds_are_spent_or_a_plan_repeats() -> None:
    lut = _lut_for(MODEL, 16)
    losses = _filling_losses(lut)
    # the LUT's error changes with every plan (1.2, then 0.7, then 1.2): three plans, none within the tolerance
    timer = FakeTimer(lut, {1: 1.2, 2: 0.7, 3: 1.2})
    _, sel, rec = meet_budget(lut, losses, 0.6, rounds=3, measure=timer, progress=False)
    ratios = [r.measured.ratio for r in rec.rounds]
    assert len(timer.calls) == 3 and not any(rec.tolerance[0] <= r <= rec.tolerance[1] for r in ratios)
    meets = [i for i, r in enumerate(ratios) if r <= rec.tolerance[1]]
    assert meets and rec.status == "under" and rec.chosen in meets   # kept: a plan that meets the budget
    assert rec.chosen == min(meets, key=lambda i: rec.rounds[i].loss) and sel.budget == rec.rounds[
        rec.chosen].budget
    # uniform losses change the fewest blocks (9 drops at 0.6: 0.55 on the LUT, measured 0.567, under the
    # tolerance), so the small correction gives the same plan: no new information, the loop stops
    uniform = {b.index: dict.fromkeys(b.ms, 1.0) | {"none": 0.0} for b in lut.blocks}
    timer = FakeTimer(lut, 1.03)
    plan, _, rec = meet_budget(lut, uniform, 0.6, rounds=3, measure=timer, progress=False)
    assert len(timer.calls) == 1 and rec.status == "under" and "already measured" in rec.note
    assert rec.rounds[0].measured.ratio < rec.tolerance[0] and plan == select_plan(lut, uniform, 0.6)[0]
    # a device slower than the fastest plan allows: the corrected budget is out of reach, the plan measured lowest kept
    timer = FakeTimer(lut, 3.0)
    _, _, rec = meet_budget(lut, losses, 0.6, rounds=3, measure=timer, progress=False)
    assert len(timer.calls) == 1 and rec.status == "over" and "below the fastest network" in rec.note


def test_noisy_timings_are_pooled_and_never_correct_the_budget() -> None:
    lut = _lut_for(MODEL, 16)
    losses = _filling_losses(lut)
    first = select_plan(lut, losses, 0.6)
    assert FakeTimer(lut, 1.0)(first[0], []).ratio == pytest.approx(first[1].ratio)   # the fake is what it says
    # quartiles at ± 5 %: one timing's standard error is over a quarter of the tolerance, two pooled are under
    timer = FakeTimer(lut, 1.0, spread=0.05)
    one = timer(first[0], [])
    assert one.ratio_se > 0.25 * 0.05 * 0.6 >= one.pooled(one).ratio_se
    timer.calls.clear()
    plan, sel, rec = meet_budget(lut, losses, 0.6, measure=timer, progress=False)
    assert (plan, sel) == first and len(timer.calls) == 2 and rec.status == "met"
    assert (rec.rounds[0].timings, rec.rounds[0].trusted, rec.rounds[0].measured.n) == (2, True, 82)
    # never calm (± 30 %, the LUT off by 1.5): the LUT's plan is kept, the loop says why, no budget was corrected
    timer = FakeTimer(lut, 1.5, spread=0.3)
    plan, sel, rec = meet_budget(lut, losses, 0.6, measure=timer, progress=False)
    assert (plan, sel) == first and len(timer.calls) == bl.TIMINGS and len(rec.rounds) == 1
    assert (rec.status, rec.chosen, rec.rounds[0].trusted) == ("noisy", 0, False)
    assert "too noisy" in rec.note


def test_off_count_devices_and_devices_that_cannot_run_here_are_not_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    lut = _lut_for(MODEL, 16)
    losses = _filling_losses(lut)
    want = select_plan(lut, losses, 0.6)

    def never(plan: Any, spans: Any) -> Measured:
        raise AssertionError("measured")

    plan, sel, rec = meet_budget(lut, losses, 0.6, rounds=0, measure=never, progress=False)
    assert (plan, sel) == want and (rec.status, rec.rounds, rec.chosen) == ("off", [], None)
    # flops, params, uniform: the counts are exact, nothing to measure
    count = lut.model_copy(update={"device": "flops", "backend": "count"})
    assert loop_device(count)[2] == "exact"
    plan, sel, rec = meet_budget(count, losses, 0.6, progress=False)
    assert (plan, sel) == select_plan(count, losses, 0.6) and rec.status == "exact" and "exact" in rec.note
    assert rec.rounds == [] and plan == want[0] and sel.unit == "cost units"   # the same plan, labelled a count
    # a device whose backend cannot run on this machine (TensorRT without its GPU): skipped, with the reason
    trt = lut.model_copy(update={"device": "gpu-trt-fp16", "backend": "tensorrt", "precision": "fp16"})
    assert loop_device(trt)[2] == "measure"

    def no_gpu(profile: Any) -> Any:
        raise LatoptError("device 'gpu-trt-fp16': no CUDA GPU here")

    monkeypatch.setattr("latopt.latency.backends.get_backend", no_gpu)
    plan, sel, rec = meet_budget(trt, losses, 0.6, progress=False)
    assert (plan, sel) == want and rec.status == "skipped" and "no CUDA GPU here" in rec.note
    # a LUT whose device profile is not here, or is not the one it was timed with
    assert loop_device(lut.model_copy(update={"device": "nowhere"}))[2] == "skipped"
    note = loop_device(lut.model_copy(update={"backend": "onnxruntime", "batch": 8}))[1]
    assert "batch 1, the LUT 8" in note
    assert "records no backend" in loop_device(lut)[1]   # the made-up LUT: its runtime is unknown


@pytest.fixture
def cfg_lut(tmp_path: Path) -> tuple[Any, Path]:
    lut = _lut_for(MODEL, 16).model_copy(update={"backend": "onnxruntime"})
    return load_config("quickstart", TINY), save_lut(lut, tmp_path / "lut.json")


def test_the_plan_file_records_every_round_and_old_plans_stay_readable(cfg_lut: tuple[Any, Path], tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg, lut_path = cfg_lut
    from latopt.latency.lut import load_lut

    lut = load_lut(lut_path)
    timer = FakeTimer(lut, 1.15)

    @contextlib.contextmanager
    def fake_timer(lut_: Any, profile: Any) -> Iterator[FakeTimer]:
        yield timer

    monkeypatch.setattr(bl, "device_timer", fake_timer)
    plan = plan_only(cfg, lut_path, budget=0.55, importance="uniform", progress=False)
    loop = plan.budget_loop
    assert loop is not None
    assert loop.device == "cpu" and loop.asked == 0.55 and loop.rounds_max == cfg.dp.budget_rounds == 3
    assert len(loop.rounds) == len(timer.calls) >= 1
    assert loop.chosen is not None
    kept = loop.rounds[loop.chosen]
    assert {str(k): v for k, v in plan.changed.items()} == kept.plan
    assert plan.selection.budget == kept.budget and plan.budget == 0.55
    assert plan.predicted.ratio == pytest.approx(kept.predicted_ratio)
    path = write_plan(tmp_path / "plan.json", plan)
    back = read_plan(path)
    assert back == plan and back.budget_loop == loop
    for r in loop.rounds:   # budget used, LUT prediction, measurement with quartiles
        m = r.measured
        assert m.ratio_q1 <= m.ratio <= m.ratio_q3 and r.predicted_ratio <= r.budget
    # a plan written before the loop (no budget_loop) reads as it did
    old = plan_only(cfg, lut_path, budget=0.55, importance="uniform", progress=False, budget_rounds=0).to_json()
    old.pop("budget_loop")
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert read_plan(tmp_path / "old.json").budget_loop is None
    # a record that does not hold together is refused in one line
    for edit, message in ((lambda p: p["budget_loop"].update(asked=0.7), "budget_loop.asked"),
                          (lambda p: p["budget_loop"].update(chosen=7), "chosen"),
                          (lambda p: p["selection"].update(budget=0.9), "selection.budget"),
                          (lambda p: p["budget_loop"].update(status="off"), "status")):
        bad = json.loads(path.read_text())
        edit(bad)
        (tmp_path / "bad.json").write_text(json.dumps(bad))
        with pytest.raises(LatoptError, match=message):
            read_plan(tmp_path / "bad.json")


def test_cli_plan_only_times_the_plan_for_real(cfg_lut: tuple[Any, Path], tmp_path: Path, fast_cpu_device: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    """ONNX Runtime times the tiny network and its plan (random weights, the fast test profile): the rounds are
    recorded and printed; no assertion on the times themselves."""
    cfg, _ = cfg_lut
    lut = save_lut(_lut_for(MODEL, 16).model_copy(update={"device": "cpu-test", "backend": "onnxruntime",
                                                          "precision": "fp32"}), tmp_path / "lut.json")
    write_config(cfg.with_overrides({"device": fast_cpu_device}), tmp_path / "tiny.yaml")
    args = ["plan", "--config", str(tmp_path / "tiny.yaml"), "--plan-only", "--budget", "0.55",
            "--lut", str(lut), "--importance", "uniform"]
    assert main([*args, "--budget-rounds", "2", "--out", str(tmp_path / "plan.json")]) == 0
    out, err = capsys.readouterr()
    loop = read_plan(tmp_path / "plan.json").budget_loop
    assert loop is not None and loop.chosen is not None
    assert loop.device == "cpu-test" and 1 <= len(loop.rounds) <= 2 and loop.status in ("met", "under", "over", "noisy")
    assert "budget loop round 1/2" in err and f"in round {loop.chosen + 1}/{len(loop.rounds)}" in out
    assert main([*args, "--budget-rounds", "0", "--out", str(tmp_path / "off.json"), "-q"]) == 0
    off = read_plan(tmp_path / "off.json").budget_loop
    assert off is not None and off.status == "off"
    capsys.readouterr()
    assert main([*args, "--budget-rounds", "11", "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("latopt: error: budget_rounds 11") and err.count("\n") == 1, err
    assert main(["search", "--config", str(tmp_path / "tiny.yaml"), "--budget-rounds", "1", "-q"]) == 2
    err = capsys.readouterr().err
    assert "--budget-rounds" in err and "latopt plan" in err, err
