"""scripts/bench_peers' decoding report puts every decoder (ours in each precision, fairseq, CTranslate2's compute
types) side by side with its BLEU, and its ratios come from the same run's records."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.test_precision import load_bench_peers


def record(pieces_per_s: float, bleu: float) -> dict[str, object]:
    return {"sentences_per_s": pieces_per_s / 30, "tokens_per_s": pieces_per_s, "mean_output_tokens": 30.0,
            "bleu_tokenized": bleu, "peak_rss_mb": 500.0, "load_before": [1.0, 1.0, 1.0], "load_after": [2.0, 1, 1]}


def test_decode_table_lists_every_decoder_with_bleu_and_ratios() -> None:
    peers = load_bench_peers()
    trained = {"minutes": 30, "fairseq_minutes": 60, "updates": {"ours": 900, "fairseq": 1800},
               "ours_train_precision": "bf16", "fairseq": record(1000, 7.3), "ours": record(1500, 7.1),
               "ours-bf16": record(2000, 7.2), "ours-int8": record(2500, 7.0), "ct2-float32": record(1250, 7.3),
               "ct2-int8": record(2000, 7.2)}
    lines = peers.decode_table(trained, 1112)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ") and "---" not in line}
    assert set(rows) == {"tool", "nmt (ours), fp32", "nmt (ours), bf16 autocast", "nmt (ours), int8",
                         "fairseq 0.12.3.1, fp32", "CTranslate2 4.8.5, float32", "CTranslate2 4.8.5, int8"}
    assert "| 7.00 | 83.3 | 2,500 | 30.0 | 500 | 2.50x | 1.25x | 1.0 → 2.0 |" in rows["nmt (ours), int8"]
    assert "| 1800 | 7.30 |" in rows["fairseq 0.12.3.1, fp32"] and "| 0.50x |" in rows["fairseq 0.12.3.1, fp32"]
    assert "first 1112 test sentences" in "\n".join(lines)


def test_training_table_puts_our_matmul_roof_beside_the_speeds() -> None:
    import argparse

    peers = load_bench_peers()
    train = {"updates": 95, "sentences_per_s": 136.0, "tgt_tokens_per_s": 4372.0, "updates_per_s": 1.15,
             "sentences_per_update": 118.0}
    ours = {"train": train, "peak_rss_mb": 2000.0, "load_before": [2.0], "load_after": [2.0],
            "roof": {"fraction_of_roof": 0.47, "step_gflops": 292.0, "roof_gflops": 619.0}}
    fairseq = {"train": {**train, "sentences_per_s": 63.5}, "peak_rss_mb": 1387.0, "load_before": [2.0],
               "load_after": [2.0]}
    machine = {"cpu": "x", "isa": ["amx_bf16"], "bf16_native": True, "threads": 2, "cpu_count": 2, "torch": "2.13"}
    results = {"meta": {"date": "d", "command": "c", "machine": machine, "ours_precisions": "p"},
               "ours-bf16": ours, "fairseq": fairseq}
    text = peers.markdown(results, argparse.Namespace(epoch=True, updates=40, warmup=5, sentences=0))
    assert "| nmt (ours), bf16 autocast | 136.0 |" in text and "| 2.14x |" in text
    assert "- nmt (ours), bf16 autocast: 47% of the roof (292 of 619 GFLOP/s)\n" in text  # no ceiling recorded
    ours["roof"].update(memory_ceiling=0.58, other_gbytes=9.7, updates=2, bandwidth_gbytes_per_s=20.0)
    text = peers.markdown(results, argparse.Namespace(epoch=True, updates=40, warmup=5, sentences=0))
    assert ("47% of the roof (292 of 619 GFLOP/s); memory ceiling 58% (its other operations move 4.85 GB per "
            "update, 20 GB/s copy bandwidth)") in text


def test_an_unprepared_pair_is_one_line_naming_the_missing_file(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_peers"
    run = subprocess.run([sys.executable, str(script), "--tools", "", "--data-dir", str(tmp_path / "data"),
                          "--peers-dir", str(tmp_path / "peers"), "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith(f"error: {tmp_path / 'data' / 'gl-en' / 'meta.json'} not found") and "Traceback" not in \
        run.stderr


def test_decode_rounds_keep_each_decoders_fastest_round() -> None:
    peers = load_bench_peers()
    result: dict[str, object] = {"minutes": 30}
    rounds = [{"fairseq": {**record(1000, 7.3), "seconds": 30.0}, "ours": {**record(1500, 7.1), "seconds": 20.0}},
              {"fairseq": {**record(1200, 7.3), "seconds": 25.0}, "ours": {**record(1400, 7.1), "seconds": 21.0}},
              {"fairseq": {**record(900, 7.3), "seconds": 33.0}, "ours": {**record(1600, 7.1), "seconds": 19.0}}]
    for decoded in rounds:
        peers.keep_fastest(result, decoded)
    assert result["fairseq"]["tokens_per_s"] == 1200 and result["ours"]["tokens_per_s"] == 1600  # type: ignore
    assert result["fairseq"]["tokens_per_s_rounds"] == [1000, 1200, 900]  # type: ignore[index]
    assert result["ours"]["tokens_per_s_rounds"] == [1500, 1400, 1600]  # type: ignore[index]
    trained = {**result, "fairseq_minutes": 60, "rounds": 3, "updates": {"ours": 900, "fairseq": 1800}}
    text = "\n".join(peers.decode_table(trained, 1112))
    assert "every tool 3 times in rotation, its fastest round shown" in text and "| 1.33x |" in text


def test_decode_rounds_below_one_is_one_line(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_peers"
    run = subprocess.run([sys.executable, str(script), "--tools", "", "--decode-rounds", "0", "--peers-dir",
                          str(tmp_path / "peers")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and run.stderr.strip() == "error: --decode-rounds 0 must be at least 1"
