"""Packaged configs: found by name from any directory, by path, per pair; a run's saved config.yaml trains again."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nmt.config import RESOLVED_KEY, config_to_dict, load_config
from nmt.errors import NmtError
from nmt.experiments.pipeline import RunSpec
from nmt.presets import config_names, cpu_overrides, find_config, pair_config

ROOT = Path(__file__).resolve().parents[1]


def test_names_resolve_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert {"base", "bench", "gl-en", "gl-en-cpu", "sk-en", "en-vi", "en-he", "ar-en"} <= set(config_names())
    cfg = load_config("gl-en-cpu", ["train.max_steps=5"])
    assert cfg.data.pair == "gl-en" and cfg.model.d_model == 256 and cfg.train.max_steps == 5
    assert load_config("sk-en").data.pair == "sk-en"


def test_checkout_symlink_is_the_packaged_folder() -> None:
    """``configs/`` at the top of a checkout keeps working: it is the package's folder, not a copy."""
    assert (ROOT / "configs").resolve() == (ROOT / "nmt" / "configs").resolve()
    assert load_config(ROOT / "configs" / "gl-en.yaml") == load_config("gl-en")


def test_path_wins_over_name_and_missing_ones_are_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("mine.yaml").write_text("data:\n  pair: ab-cd\n", encoding="utf-8")
    assert load_config("mine.yaml").data.pair == "ab-cd"
    assert find_config("./mine.yaml") == Path("mine.yaml")
    with pytest.raises(NmtError, match=r"config file not found: nope\.yaml$"):
        find_config("nope.yaml")
    with pytest.raises(NmtError, match=r"no packaged config named 'gl-xx' \(packaged: .*gl-en-cpu"):
        load_config("gl-xx")


def test_saved_run_config_with_resolved_section_loads_again(tmp_path: Path) -> None:
    """A run's config.yaml carries a ``resolved`` section (measured L, vocab size); nmt train accepts the file."""
    cfg = load_config("gl-en-cpu")
    tree = config_to_dict(cfg)
    tree[RESOLVED_KEY] = {"qknorm_length": 88.0, "qknorm_length_source": "data", "vocab_size": 3000}
    saved = tmp_path / "config.yaml"
    saved.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    assert load_config(saved) == cfg
    tree["other"] = 1  # any other unknown key is still refused
    saved.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    with pytest.raises(NmtError, match="unknown config key 'other'"):
        load_config(saved)


def test_pair_config_prefers_cpu_preset_and_derives_one_otherwise() -> None:
    assert pair_config("gl-en", "cpu").name == "gl-en-cpu.yaml"
    assert pair_config("sk-en", "cpu").name == "sk-en.yaml" and pair_config("sk-en").name == "sk-en.yaml"
    with pytest.raises(NmtError, match="no config for pair zz-yy"):
        pair_config("zz-yy")
    spec = RunSpec("sk-en", "qknorm", "cpu", "cpu")
    cfg = load_config(spec.config_path, spec.overrides)
    reference = load_config("gl-en-cpu")
    assert cfg.data == load_config("sk-en").data  # the pair's data section: its pair and BPE size
    assert cfg.model == reference.model and cfg.train.schedule == reference.train.schedule
    assert cfg.train.max_minutes == reference.train.max_minutes and cfg.train.adam_betas == (0.9, 0.98)
    assert cfg.train.save_dir == str(spec.save_dir) and cfg.train.device == "cpu"
    assert "train.save_dir=runs/sk-en-cpu" in cpu_overrides("sk-en")
    preset = RunSpec("gl-en", "qknorm", "cpu", "cpu")
    assert not any(o.startswith("model.") for o in preset.overrides)  # a real preset is used as it is
