"""`nmt bench` on a tiny synthetic corpus: valid JSON with the expected keys and positive numbers (no timings)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from nmt.cli import main
from nmt.experiments.paper_hours import estimate_paper_hours
from nmt.experiments.pipeline import RunSpec
from tests.synthetic import prepare_synthetic, tiny_config


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("bench"), {"train": 300, "dev": 10, "test": 10})


def write_config(data_dir: Path, path: Path) -> Path:
    path.write_text(yaml.safe_dump(tiny_config(data_dir, path.parent / "unused")), encoding="utf-8")
    return path


def positive(summary: dict) -> bool:
    return all(summary[k] > 0 for k in ("median", "min", "max")) and len(summary["runs"]) == 1


def test_bench_json(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(data_dir, tmp_path / "bench.yaml")
    status = main(["bench", str(config), "--steps", "2", "--repeats", "1", "--warmup", "1", "--sentences", "4",
                   "--json", "--device", "cpu", "--set", "decode.max_len_b=5"])
    assert status == 0
    result = json.loads(capsys.readouterr().out)
    for key in ("system", "device", "precision", "parameters", "train", "memory", "decode", "load_before",
                "load_after", "config"):
        assert key in result, key
    assert result["precision"] == "fp32" and result["precision_reason"] == "set by train.precision"
    assert result["machine"]["cpu"] and result["machine"]["torch"] and result["machine"]["threads"] >= 1
    assert result["decode"]["precision"] == "fp32"
    train = result["train"]
    assert train["steps"] == 2 and train["repeats"] == 1
    for key in ("src_tgt_tokens_per_s", "tgt_tokens_per_s", "sentences_per_s", "steps_per_s"):
        assert positive(train[key]), key
    assert train["src_tgt_tokens_per_s"]["median"] > train["tgt_tokens_per_s"]["median"]
    roof = train["roof"]  # the step's matmuls replayed alone: faster than the whole step
    assert roof["updates"] == 2 and roof["matmuls"] > 0 and roof["matmul_flop_share_by_dtype"] == {"float32": 1.0}
    assert 0 < roof["fraction_of_roof"] < 1 and roof["roof_gflops"] > roof["step_gflops"] > 0
    # the other operations' traffic at the copy bandwidth: a ceiling above where the step is, below the roof
    assert roof["other_ops"] > 0 and roof["other_gbytes"] > 0 and roof["bandwidth_gbytes_per_s"] > 0
    assert roof["fraction_of_roof"] < roof["memory_ceiling"] < 1
    assert result["memory"]["peak_rss_mb"] > 0
    for mode in ("beam4", "greedy"):
        decode = result["decode"][mode]
        assert decode["sentences"] == 4
        assert positive(decode["sentences_per_s"]) and positive(decode["tokens_per_s"])
    assert not (tmp_path / "unused").exists()  # bench writes no run directory


def test_bench_epoch_times_every_training_sentence_once(data_dir: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(data_dir, tmp_path / "bench.yaml")
    status = main(["bench", str(config), "--epoch", "--repeats", "1", "--warmup", "2", "--sentences", "0", "--json",
                   "--device", "cpu"])
    assert status == 0
    train = json.loads(capsys.readouterr().out)["train"]
    assert train["sentences"] == 300  # the warm-up updates come on top of the epoch, untimed
    assert train["steps"] > 2 and positive(train["sentences_per_s"])
    with pytest.raises(SystemExit) as exc:  # one or the other: argparse's usage error
        main(["bench", str(config), "--epoch", "--steps", "3"])
    assert exc.value.code == 2


def test_bench_table_and_option_errors(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write_config(data_dir, tmp_path / "bench.yaml")
    assert main(["bench", str(config), "--steps", "1", "--repeats", "1", "--warmup", "0", "--sentences", "0"]) == 0
    out = capsys.readouterr().out
    assert "tgt tokens/s" in out and "load average" in out and "sentences/s, " not in out
    assert "matmul roof" in out and "% of the roof" in out
    assert "memory ceiling" in out and "GB/s) that is" in out
    assert main(["bench", str(config), "--steps", "0"]) == 2
    assert "--steps 0 must be at least 1" in capsys.readouterr().err


def test_estimate_paper_hours(data_dir: Path, tmp_path: Path) -> None:
    configs = tmp_path / "configs"
    configs.mkdir()
    write_config(data_dir, configs / "xx-yy.yaml")
    spec = RunSpec("xx-yy", "qknorm", "paper", device="cpu", data_dir=str(data_dir), runs_dir=str(tmp_path / "runs"),
                   config_dir=str(configs))
    hours, detail = estimate_paper_hours(spec)
    assert hours > 0
    assert "updates/epoch" in detail and "epochs" in detail
    assert not (tmp_path / "runs").exists()
