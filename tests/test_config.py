"""Config loading: strict keys and types, overrides, presets, and the commented base config."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
import yaml

from nmt.config import SYSTEMS, Config, SystemName, config_from_dict, config_to_dict, load_config
from nmt.errors import NmtError

ROOT = Path(__file__).resolve().parents[1]


def test_base_yaml_documents_every_default() -> None:
    """configs/base.yaml lists every option with exactly the dataclass default."""
    tree = yaml.safe_load((ROOT / "configs" / "base.yaml").read_text())
    assert config_from_dict(tree) == Config()
    defaults = config_to_dict(Config())
    for section, values in defaults.items():
        if isinstance(values, dict):
            assert set(tree[section]) == set(values), section


@pytest.mark.parametrize("name", ["gl-en", "sk-en", "en-vi", "en-he", "ar-en", "gl-en-cpu"])
def test_pair_configs_load(name: str) -> None:
    cfg = load_config(ROOT / "configs" / f"{name}.yaml")
    assert cfg.data.pair == name.removesuffix("-cpu")


def test_system_names_match_presets() -> None:
    assert set(typing.get_args(SystemName)) == set(SYSTEMS)


def test_presets_set_model_and_explicit_keys_win() -> None:
    cfg = config_from_dict({"system": "prenorm_fixnorm_scalenorm"})
    assert (cfg.model.norm, cfg.model.fixnorm, cfg.model.attention) == ("scalenorm", True, "scaled_dot")
    cfg = config_from_dict({"system": "qknorm", "model": {"norm": "rmsnorm"}})
    assert (cfg.model.norm, cfg.model.attention) == ("rmsnorm", "qknorm")


def test_overrides_parse_values() -> None:
    cfg = config_from_dict({}, ["train.lr=5e-4", "train.adam_betas=[0.9, 0.98]", "system=qknorm",
                                "train.save_dir=runs/x"])
    assert cfg.train.lr == 5e-4 and cfg.train.adam_betas == (0.9, 0.98) and cfg.model.attention == "qknorm"
    assert cfg.train.save_dir == "runs/x"
    assert cfg.model.fixnorm is True  # the preset wins over a default...
    cfg = config_from_dict({"system": "qknorm"}, ["model.fixnorm=false"])
    assert cfg.model.fixnorm is False  # ...and an explicit override wins over the preset


@pytest.mark.parametrize(("tree", "overrides", "message"), [
    ({"model": {"nrm": "x"}}, [], "unknown config key 'model.nrm'"),
    ({"modle": {}}, [], "unknown config key 'modle'"),
    ({"model": {"norm": "batchnorm"}}, [], "'model.norm': 'batchnorm' is not one of layernorm, scalenorm, rmsnorm"),
    ({"train": {"max_steps": 1.5}}, [], "'train.max_steps'"),
    ({"train": {"progress": "yes"}}, [], "'train.progress'"),
    ({"system": "best"}, [], "'system'"),
    ({}, ["model.d_model=30"], "not divisible"),
    ({}, ["model.dropout=1.5"], "'model.dropout'"),
    ({}, ["train"], "section.key=value"),
    ({"model": 3}, [], "'model'"),
    ({"train": {"schedule": "linear_decay"}}, [], "'train.schedule': linear_decay decays to zero"),
])
def test_config_errors_name_the_key(tree: dict, overrides: list[str], message: str) -> None:
    with pytest.raises(NmtError, match=message.replace("(", r"\(").replace(")", r"\)")):
        config_from_dict(tree, overrides)


def test_yaml_errors_name_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  d_model: 32\n  norm: [unclosed\n")
    with pytest.raises(NmtError, match=r"bad.yaml line \d+: YAML syntax error"):
        load_config(bad)
    with pytest.raises(NmtError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("model:\n  n_layers: 3\n")
    with pytest.raises(NmtError, match=r"wrong.yaml: unknown config key 'model.n_layers'"):
        load_config(wrong)


def test_config_round_trips_through_dict() -> None:
    cfg = config_from_dict({"system": "qknorm"}, ["train.adam_betas=[0.9,0.98]"])
    assert config_from_dict(config_to_dict(cfg)) == cfg
