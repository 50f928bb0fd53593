"""One logging setup: results on stdout, progress and warnings on stderr (``[stage] message``,
``latopt: warning: ...``), ``-q`` / ``-v``, progress bars only on a terminal, plots without pyplot."""

from __future__ import annotations

import ast
import io
import logging
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from latopt import log
from latopt.cli import build_parser, main
from latopt.files.checkpoint import CheckpointMeta, make_arch, save_checkpoint
from latopt.latency.devices import load_device
from latopt.nets.models import build_model
from latopt.run import latency_chart
from latopt.training.loop import Report, Step, cross_entropy_loss, fit

LATOPT = Path(__file__).resolve().parents[1] / "latopt"


@pytest.fixture(autouse=True)
def _default_verbosity():
    log.setup(log.DEFAULT)
    yield
    log.setup(log.DEFAULT)


def _fit(progress: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    data = TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,)))
    fit(model, DataLoader(data, batch_size=8), 2, Step(cross_entropy_loss(), torch.optim.SGD(model.parameters(), lr=0.1)),
        report=Report(progress, "tiny"))


def test_a_library_call_never_prints_to_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    _fit(progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert [re.sub(r": loss .*", "", s) for s in err.splitlines()] == ["[train] tiny epoch 1/2", "[train] tiny epoch 2/2"]
    _fit(progress=False)
    assert capsys.readouterr() == ("", "")
    log.setup(log.QUIET)
    _fit(progress=True)
    assert capsys.readouterr() == ("", "")


def test_cli_results_on_stdout_progress_on_stderr_and_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["inspect", "mobilenetv2_035", "--resolution", "32", "--num-classes", "10"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "blocks.0.0" in out and "[" not in "".join(s[:1] for s in out.splitlines())   # the table, no log line
    assert re.fullmatch(r"\[inspect\] done in \d+\.\d s\n", err), err
    for quiet in ("-q", "--quiet"):
        assert main([*argv, quiet]) == 0
        q_out, q_err = capsys.readouterr()
        assert q_out == out and q_err == "", quiet


def test_export_progress_on_stderr_files_on_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    m = build_model("mobilenetv2_035", num_classes=10)
    ckpt = save_checkpoint(tmp_path / "base.pt", m, make_arch(m, "mobilenetv2_035", 10), CheckpointMeta(resolution=16))
    out_dir = tmp_path / "out"
    assert main(["export", "--no-accuracy-gate", "--checkpoint", str(ckpt), "--fold", "all", "--samples", "4", "--no-measure",
                 "--out", str(out_dir)]) == 0
    out, err = capsys.readouterr()
    assert out == f"wrote {out_dir}/export.json, REPORT.md and model.onnx\n"
    lines = err.splitlines()
    assert lines[0] == f"[export] loading {ckpt}" and all(s.startswith("[export] ") for s in lines), err
    assert any("ONNX Runtime" in s and s.endswith(" ok") for s in lines), err


def test_verbose_shows_debug_lines_and_errors_stay_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.pt"
    argv = ["export", "--checkpoint", str(missing), "--device", "cpu", "--no-measure", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == f"latopt: error: checkpoint {missing} does not exist\n"
    assert main([*argv, "-v"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert re.fullmatch(r"\[profile\] device profile 'cpu': .*cpu\.yaml", lines[0]), lines
    assert lines[-1] == f"latopt: error: checkpoint {missing} does not exist"


def test_verbosity_flags_are_common_and_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for cmd in (["inspect", "m"], ["profile", "--device", "cpu", "--model", "m"], ["train", "--config", "c"],
                ["fold", "--config", "c", "--checkpoint", "x"], ["search"], ["export", "--checkpoint", "x"],
                ["run"], ["regions", "x"]):
        assert parser.parse_args(cmd).verbosity == log.DEFAULT, cmd
        assert parser.parse_args([*cmd, "-v"]).verbosity == log.VERBOSE, cmd
        assert parser.parse_args([*cmd, "-q"]).verbosity == log.QUIET, cmd
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["inspect", "m", "-q", "-v"])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_logger_records_and_format(caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]) -> None:
    with caplog.at_level(logging.DEBUG, logger="latopt"):
        load_device("cpu")
        log.get_logger("run").info("two\nlines")
        log.get_logger("models").warning("checkpoint x is old")
    assert [(r.name, r.levelno) for r in caplog.records] == [
        ("latopt.profile", logging.DEBUG), ("latopt.run", logging.INFO), ("latopt.models", logging.WARNING)]
    err = capsys.readouterr().err.splitlines()
    assert err[1:] == ["[run] two", "[run] lines", "latopt: warning: checkpoint x is old"]


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize("tty, enabled, verbosity, drawn", [
    (True, True, log.DEFAULT, True), (False, True, log.DEFAULT, False), (True, False, log.DEFAULT, False),
    (True, True, log.QUIET, False), (True, True, log.VERBOSE, True)])
def test_progress_bars_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch, tty: bool, enabled: bool,
                                          verbosity: int, drawn: bool) -> None:
    stream = _Stream(tty)
    monkeypatch.setattr("sys.stderr", stream)
    log.setup(verbosity)
    assert list(log.progress_bar(range(5), desc="bar", enabled=enabled)) == [0, 1, 2, 3, 4]
    assert ("bar" in stream.getvalue()) == drawn, stream.getvalue()


def test_plots_use_no_pyplot_and_are_written_atomically(tmp_path: Path) -> None:
    for path in LATOPT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = node.module if isinstance(node, ast.ImportFrom) else None
            assert "matplotlib.pyplot" not in names and module != "matplotlib.pyplot", path
            assert not (isinstance(node, ast.Attribute) and node.attr == "use"
                        and isinstance(node.value, ast.Name) and node.value.id == "matplotlib"), path
    blocks = [SimpleNamespace(index=i, ms={"none": 1.0 + i, "full": 0.5}) for i in range(3)]
    lut = SimpleNamespace(blocks=blocks, model="m", resolution=16, device="cpu")
    out = latency_chart(lut, {1: "full"}, tmp_path / "chart" / "latency_blocks.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.parent.iterdir()] == ["latency_blocks.png"]    # no temporary file left


def test_library_warnings_are_debug_lines(capsys: pytest.CaptureFixture[str]) -> None:
    import warnings

    from latopt.log import DEFAULT, QUIET, VERBOSE, setup

    old = warnings.showwarning
    try:
        for level, shown in ((QUIET, False), (DEFAULT, False), (VERBOSE, True)):
            setup(level)
            warnings.warn_explicit("Glyph 8594 missing from font(s) DejaVu Sans.\n  more", UserWarning,
                                   "matplotlib/backend_agg.py", 1)
            err = capsys.readouterr().err
            assert ("Glyph 8594 missing" in err) == shown and "\n  more" not in err
    finally:
        warnings.showwarning = old
        setup(DEFAULT)


def test_time_left_is_the_mean_unit_times_the_units_to_go() -> None:
    assert log.time_left([10.0, 20.0], 3) == "45 s"
    assert log.time_left([60.0, 120.0], 10) == "15 min"
    assert log.time_left([], 4) == "0 s" and log.time_left([5.0], 0) == "0 s"


def test_each_epoch_line_estimates_the_time_left(caplog: pytest.LogCaptureFixture) -> None:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 3, (16,))), batch_size=8)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with caplog.at_level("INFO", logger="latopt"):
        fit(net, loader, 3, Step(cross_entropy_loss(), opt), report=Report(desc="base"))
    lines = [r.getMessage() for r in caplog.records if "epoch" in r.getMessage()]
    assert len(lines) == 3 and all(re.search(r"; about \d+ (s|min) left$", ln) for ln in lines[:2])
    assert "left" not in lines[2]
