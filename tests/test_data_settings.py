"""One source of truth for data settings: ``nmt train`` refuses prepared data that its config does not describe."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nmt import cli
from nmt.config import DataConfig, config_from_dict
from nmt.data import settings
from nmt.errors import NmtError
from nmt.training.data import load_training_data
from tests.synthetic import prepare_synthetic, tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("settings"), {"train": 60, "dev": 6, "test": 6})


def test_matching_config_loads(data_dir: Path, tmp_path: Path) -> None:
    data = load_training_data(config_from_dict(tiny_config(data_dir, tmp_path)))
    assert data.spec.vocab_size == 48


def test_train_refuses_another_bpe_size_in_one_line(data_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    tree = tiny_config(data_dir, tmp_path / "run")
    tree["data"]["bpe_size"] = 3000
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tree), encoding="utf-8")
    assert cli.main(["train", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ")
    assert "bpe_size 48" in err[0] and "data.bpe_size is 3000" in err[0] and "meta.json" in err[0]


def test_check_prepared_pair_and_rule() -> None:
    meta = {"pair": "gl-en", "source": "ted", "bpe_size": 3000, "filter": "official"}
    where = Path("data/gl-en")
    settings.check_prepared(meta, DataConfig(pair="gl-en", bpe_size=3000), where)
    with pytest.raises(NmtError, match=r"prepared pair 'gl-en' differs from the config's data.pair 'sk-en'"):
        settings.check_prepared(meta, DataConfig(pair="sk-en", bpe_size=3000), where)
    with pytest.raises(NmtError, match=r"prepared with the official filter but the config's data.keep_partial is "
                                       r"true \(keep_partial\)"):
        settings.check_prepared(meta, DataConfig(pair="gl-en", bpe_size=3000, keep_partial=True), where)
    old = {"pair": "gl-en", "source": "ted", "bpe_size": 3000}  # format 1 stripped the markers
    with pytest.raises(NmtError, match="prepared with the keep_partial filter"):
        settings.check_prepared(old, DataConfig(pair="gl-en", bpe_size=3000), where)
    local = {"pair": "gl-en", "source": "dir", "bpe_size": 3000, "filter": None}  # --from-dir: files as given
    settings.check_prepared(local, DataConfig(pair="gl-en", bpe_size=3000, keep_partial=True), where)


def test_repository_configs_are_the_pairs_settings() -> None:
    for pair in ("gl-en", "sk-en", "en-vi", "en-he", "ar-en"):
        path = settings.pair_config_path(pair)
        assert path is not None and path.name == f"{pair}.yaml"
        data = settings.pair_data_config(pair)
        assert data.pair == pair and data.keep_partial is False
    assert settings.pair_config_path("xx-yy") is None
    assert settings.pair_data_config("xx-yy") == DataConfig(pair="xx-yy")


def test_configs_of_one_pair_agree_on_the_data_settings() -> None:
    """gl-en-cpu and bench train on data/gl-en as prepared from configs/gl-en.yaml: the same settings, or refusal."""
    from nmt.config import load_config

    gl_en = settings.pair_data_config("gl-en")
    for name in ("gl-en-cpu", "bench"):
        data = load_config(settings.config_dir() / f"{name}.yaml").data
        assert (data.pair, data.bpe_size, data.keep_partial) == (gl_en.pair, gl_en.bpe_size, gl_en.keep_partial)
