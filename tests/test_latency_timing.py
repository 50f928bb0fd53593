"""timing.compare: interleaving, repeat policy, statistics, clocks. No assertion on wall-clock values."""

from __future__ import annotations

import statistics

import pytest

from latopt.errors import LatoptError
from latopt.files.records import validated
from latopt.latency.timing import TimingPolicy, TimingStats, compare, environment_info


class Recorder:
    def __init__(self, name: str, log: list[str]) -> None:
        self.name, self.log = name, log

    def __call__(self) -> None:
        self.log.append(self.name)


class DeviceTimed(Recorder):
    """A runner with its own timer (like CUDA events): compare must use it, not the host clock."""

    def __init__(self, name: str, log: list[str], values: list[float]) -> None:
        super().__init__(name, log)
        self.values = values

    def time_ms(self) -> float:
        self()
        return self.values[(len(self.log) - 1) % len(self.values)]


def test_interleaved_rounds_and_warmup() -> None:
    log: list[str] = []
    runners = {k: Recorder(k, log) for k in "ABC"}
    pol = TimingPolicy(warmup=2, min_repeats=6, max_repeats=6, budget_s=60, stable_rel=0.5, warm_calls=0)
    stats = compare(runners, pol)
    assert set(stats) == {"A", "B", "C"} and all(s.n == 6 for s in stats.values())
    warm, timed = log[:6], log[6:]
    assert warm == list("ABC") * 2
    rounds = [timed[i:i + 3] for i in range(0, len(timed), 3)]
    assert len(rounds) == 6 and all(sorted(r) == list("ABC") for r in rounds)  # each runner once per round
    assert [r[0] for r in rounds[:3]] == list("ABC")  # the start rotates
    for s in stats.values():
        assert s.q1_ms <= s.median_ms <= s.q3_ms and s.iqr_ms == pytest.approx(s.q3_ms - s.q1_ms)
        assert len(s.samples_ms) == s.n


def test_warm_calls_precede_each_timed_call() -> None:
    log: list[str] = []
    runners = {k: Recorder(k, log) for k in "AB"}
    compare(runners, TimingPolicy(warmup=0, min_repeats=4, max_repeats=4, budget_s=60, stable_rel=0.5, warm_calls=2))
    rounds = [log[i:i + 6] for i in range(0, len(log), 6)]
    assert len(rounds) == 4
    # each runner: 2 untimed calls then its timed call, back to back; still one runner after the other
    assert rounds[0] == list("AAABBB") and rounds[1] == list("BBBAAA")


def test_device_timer_is_used_and_statistics_exact() -> None:
    log: list[str] = []
    vals = [1.0, 2.0, 3.0, 4.0, 5.0]
    stats = compare({"gpu": DeviceTimed("gpu", log, vals)}, TimingPolicy(warmup=0, min_repeats=10,
                                                                         max_repeats=10, budget_s=60))
    s = stats["gpu"]
    assert s.n == 10 and s.median_ms == pytest.approx(3.0)
    assert (s.q1_ms, s.q3_ms) == pytest.approx(tuple(statistics.quantiles(vals * 2, n=4, method="inclusive"))[::2])
    assert s.wall_median_ms is not None  # the host clock is recorded next to the device timer


def test_adaptive_stop_and_limits() -> None:
    log: list[str] = []
    # constant device times: the medians are stable at the first check after min_repeats
    stats = compare({"a": DeviceTimed("a", log, [1.0]), "b": DeviceTimed("b", log, [2.0])},
                    TimingPolicy(warmup=0, min_repeats=10, max_repeats=500, budget_s=60, stable_rel=0.01))
    assert 10 <= stats["a"].n < 500
    # a budget of ~0 s stops after the minimum of 5 rounds
    stats = compare({"a": Recorder("a", [])}, TimingPolicy(warmup=0, min_repeats=100, max_repeats=1000,
                                                              budget_s=1e-9))
    assert stats["a"].n == 5


def test_thread_clock_and_policy_validation() -> None:
    def work() -> None:
        sum(i * i for i in range(2000))

    s = compare({"w": work}, TimingPolicy(warmup=1, min_repeats=5, max_repeats=5, budget_s=60, clock="thread"))["w"]
    assert s.n == 5 and s.median_ms > 0 and s.wall_median_ms is not None
    with pytest.raises(LatoptError, match="'clock' is 'tsc'.*wall, thread"):
        validated(TimingPolicy, {"clock": "tsc"}, key="key")
    with pytest.raises(LatoptError, match=r"min_repeats > max_repeats \(6 > 5\)"):
        validated(TimingPolicy, {"min_repeats": 6, "max_repeats": 5})
    with pytest.raises(LatoptError, match="nothing to time"):
        compare({}, TimingPolicy())


def test_thread_clock_times_again_a_call_it_did_not_see(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call over which the thread's CPU time reads 0 is timed again, so no sample is 0 (a per-round ratio
    divides by it); a clock that never advances is one line naming the fix."""
    import latopt.latency.timing as timing

    reads = iter([100, 100, 100, 100, 200, 250])      # two calls unseen by the clock, then one of 50 µs
    monkeypatch.setattr(timing.time, "thread_time_ns", lambda: next(reads) * 1000)
    log: list[str] = []
    s = compare({"w": Recorder("w", log)}, TimingPolicy(warmup=0, min_repeats=1, max_repeats=1, budget_s=60,
                                                         warm_calls=0, clock="thread"))["w"]
    assert s.samples_ms == (0.05,) and len(log) == 3
    monkeypatch.setattr(timing.time, "thread_time_ns", lambda: 7)
    with pytest.raises(LatoptError, match=f"did not advance over {timing.THREAD_CLOCK_TRIES} calls.*clock: wall"):
        compare({"w": Recorder("w", [])}, TimingPolicy(warmup=0, min_repeats=1, max_repeats=1, budget_s=60,
                                                       clock="thread"))


def test_stats_round_trip_and_environment() -> None:
    s = TimingStats.from_samples([1.0, 2.0, 4.0], wall=[3.0, 3.0, 3.0])
    assert TimingStats.from_dict(s.to_dict()) == s
    assert TimingStats.from_samples([2.5]).iqr_ms == 0.0
    env = environment_info()
    assert env["cpu_count"] >= 1 and env["cpu"] and "onnxruntime" in env["versions"]


def test_environment_probes_only_the_gpu_a_profile_names(stand_in_torch_cuda: list) -> None:
    """A CPU profile's environment makes no CUDA call at all; a GPU profile's names the GPU it times (its
    cuda_device), never the current device."""
    calls = stand_in_torch_cuda
    env = environment_info()
    assert calls == [] and "gpu" not in env and env["cpu_count"] >= 1
    env = environment_info(cuda_device=1)
    assert env["gpu"] == "GPU 1" and env["gpu_capability"] == [8, 0]
    assert "current_device" not in calls and ("name", 1) in calls and ("capability", 1) in calls
