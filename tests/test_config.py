"""Run-config loading and validation (latopt.config)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from latopt.config import (
    RunConfig,
    config_from_dict,
    dump_config,
    load_config,
    validate_fold_params,
    write_config,
)
from latopt.errors import LatoptError

pytestmark = pytest.mark.floor   # .ci/run's lower-bounds run selects these tests

REPO = Path(__file__).resolve().parents[1]


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    return p


def test_defaults_and_name_from_file(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, "train: {epochs: 3}\n"))
    assert cfg.name == "cfg" and cfg.train.epochs == 3
    assert cfg.fold == RunConfig().fold and cfg.lut is None and cfg.device == "cpu"
    assert load_config(None) == RunConfig()


def test_resolved_yaml_round_trip(tmp_path: Path) -> None:
    cfg = load_config(None, {"fold.lambda_c": 0.25, "search.granularity": ["block", "activation"],
                             "data.task": "digits-clutter", "lut": "x.json"})
    out = write_config(cfg, tmp_path / "resolved.yaml")
    raw = yaml.safe_load(out.read_text())
    assert raw["fold"]["lambda_c"] == 0.25 and raw["search"]["granularity"] == ["block", "activation"]
    assert load_config(out) == cfg
    assert config_from_dict(dump_config(cfg)) == cfg


@pytest.mark.parametrize("name", sorted(p.stem for p in (REPO / "latopt" / "configs").glob("*.yaml")))
def test_shipped_configs_are_valid(name: str) -> None:
    cfg = load_config(name)  # shipped inside the package (latopt/configs/), found by name
    assert cfg.name == name and load_config(REPO / "latopt" / "configs" / f"{name}.yaml") == cfg


def test_overrides_are_validated_and_none_ignored() -> None:
    cfg = load_config(None, {"fold.tau": 1.0, "fold.p": None})
    assert cfg.fold.tau == 1.0 and cfg.fold.p == 2.0
    assert cfg.with_overrides({"train.epochs": 7}).train.epochs == 7
    with pytest.raises(LatoptError, match="unknown config key 'fold.lamda_c'"):
        load_config(None, {"fold.lamda_c": 1.0})


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("fold: {lambda_c: -0.1}\n", "config key 'fold.lambda_c' must be >= 0, got -0.1"),
        ("fold: {tau: 0}\n", r"config key 'fold.tau' must be in \(0, 1\], got 0"),
        ("fold: {tau: 1.5}\n", r"'fold.tau' must be in \(0, 1\], got 1.5"),
        ("fold: {p: 1.0}\n", "'fold.p' must be > 1, got 1.0"),
        ("fold: {granularity: layer}\n", "'fold.granularity' is 'layer'; choose one of block, activation"),
        ("fold: {mode: approx}\n", "fold.mode"),
        ("train: {optimizer: adam}\n", "train.optimizer"),
        ("train: {schedule: linear}\n", "train.schedule"),
        ("train: {epochs: ten}\n", "'train.epochs' must be an integer"),
        ("train: {epochs: true}\n", "'train.epochs' must be an integer"),
        ("train: {lr: .nan}\n", "'train.lr' must be a finite number"),
        ("data: {resolution: 4}\n", r"'data.resolution' must be in \[8, 1024\], got 4"),
        ("data: {batch_size: 0}\n", "data.batch_size"),
        ("data: {augment: 1}\n", "must be true or false"),
        ("modle: {name: x}\n", "unknown config key 'modle'; known: name, model, data"),
        ("model: {name: x, widht: 1}\n", "unknown config key 'model.widht'"),
        ("model: [1, 2]\n", "config key 'model' must be a mapping"),
        ("search: {lambda_c: [0, 1]}\n", r"'search.lambda_c\[0\]' must be > 0, got 0"),
        ("search: {lambda_c: [1.0]}\n", "must have 2 values"),
        ("search: {tau: [0.5, 1.2]}\n", r"'search.tau\[1\]' must be in \(0, 1\], got 1.2"),
        ("search: {tau: [0.9, 0.5]}\n", r"'search.tau' = \[0.9, 0.5\] has lo > hi"),
        ("search: {p: [1.0, 3.0]}\n", r"'search.p\[0\]' must be > 1"),
        ("search: {granularity: []}\n", "'search.granularity' must not be empty"),
        ("search: {granularity: [layer]}\n", r"'search.granularity\[0\]' is 'layer'; choose one of block"),
        ("search: {sampler: cmaes}\n", "'search.sampler' is 'cmaes'; choose one of auto, tpe, nsga2, random, grid"),
        ("threads: 0\n", r"'threads' must be in \[1, 1024\], got 0"),
        ("data: {task: ''}\n", "'data.task' must be a non-empty string"),
        ("lut: 3\n", "'lut' must be a string, got 3"),
        ("- a\n- b\n", "must be a YAML mapping"),
        ("fold: {tau: [\n", "not valid YAML"),
        ("name: ../../x\n", "config key 'name' = '../../x' is not a valid name: .*not a path"),  # runs/<name>/
        ("name: a/b\n", "config key 'name' = 'a/b' is not a valid name"),
        ("name: .hidden\n", "config key 'name' = '.hidden' is not a valid name"),
    ],
)
def test_invalid_configs_raise_one_line(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(LatoptError, match=match) as e:
        load_config(_write(tmp_path, text))
    assert "\n" not in str(e.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(LatoptError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")


def test_config_named_after_an_unusable_file_name_says_to_add_name(tmp_path) -> None:
    p = tmp_path / "my config.yaml"
    p.write_text("train: {epochs: 1}\n")
    with pytest.raises(LatoptError, match=r"no 'name:' key.*'my config'"):
        load_config(p)
    p.write_text("name: mine\ntrain: {epochs: 1}\n")
    assert load_config(p).name == "mine"


def test_yaml_quirks(tmp_path: Path) -> None:
    """Floats take integers (and hold floats), a section left empty is all defaults, null where optional,
    ranges are lists (tuples in the config, lists again when dumped)."""
    cfg = load_config(_write(tmp_path, "fold:\ntrain: {lr: 1}\ndata: {max_samples: null}\nsearch: {tau: [1, 1]}\n"))
    assert cfg.fold == RunConfig().fold and cfg.data.max_samples is None
    assert cfg.train.lr == 1.0 and type(cfg.train.lr) is float and cfg.search.tau == (1.0, 1.0)
    assert dump_config(cfg)["search"]["tau"] == [1.0, 1.0] and config_from_dict(dump_config(cfg)) == cfg
    with pytest.raises(ValidationError, match="frozen"):
        cfg.fold.tau = 0.5  # type: ignore[misc]


def test_fold_params_share_the_config_bounds() -> None:
    validate_fold_params(0.0, 1.0, 1.5)
    with pytest.raises(LatoptError, match=r"'tau' .*\(0, 1\].*1\.5"):
        validate_fold_params(1.0, 1.5, 2.0)
    with pytest.raises(LatoptError, match=r"^fold parameter 'p' must be > 1, got 1$"):
        validate_fold_params(1.0, 0.5, 1)
