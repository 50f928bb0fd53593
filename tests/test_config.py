"""Run-config loading and validation (latopt.config)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from latopt.config import RunConfig, config_from_dict, dump_config, load_config, write_config
from latopt.errors import LatoptError

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


@pytest.mark.parametrize("name", ["quickstart", "digits_clutter", "mobilenetv2_100", "efficientnet_lite0"])
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
        ("fold: {lambda_c: -0.1}\n", "lambda_c must be >= 0"),
        ("fold: {tau: 0}\n", r"tau must be in \(0, 1\]"),
        ("fold: {tau: 1.5}\n", r"tau must be in \(0, 1\]"),
        ("fold: {p: 1.0}\n", "p must be > 1"),
        ("fold: {granularity: layer}\n", "fold.granularity"),
        ("fold: {mode: approx}\n", "fold.mode"),
        ("train: {optimizer: adam}\n", "train.optimizer"),
        ("train: {schedule: linear}\n", "train.schedule"),
        ("train: {epochs: ten}\n", "'train.epochs' must be an integer"),
        ("train: {epochs: true}\n", "'train.epochs' must be an integer"),
        ("train: {lr: .nan}\n", "'train.lr' must be finite"),
        ("data: {resolution: 4}\n", "data.resolution"),
        ("data: {batch_size: 0}\n", "data.batch_size"),
        ("data: {augment: 1}\n", "must be true or false"),
        ("modle: {name: x}\n", "unknown config key 'modle'"),
        ("model: {name: x, widht: 1}\n", "unknown config key 'model.widht'"),
        ("model: [1, 2]\n", "section 'model' must be a mapping"),
        ("search: {lambda_c: [0, 1]}\n", "search.lambda_c"),
        ("search: {lambda_c: [1.0]}\n", "must have 2 values"),
        ("search: {tau: [0.5, 1.2]}\n", "search.tau"),
        ("search: {p: [1.0, 3.0]}\n", "search.p"),
        ("search: {granularity: []}\n", "must not be empty"),
        ("search: {sampler: grid}\n", "search.sampler"),
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
    with pytest.raises(LatoptError, match="has no 'name:' key, and its file name 'my config' is not a valid name"):
        load_config(p)
    p.write_text("name: mine\ntrain: {epochs: 1}\n")
    assert load_config(p).name == "mine"
