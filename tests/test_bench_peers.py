"""scripts/bench_peers' decoding report puts every decoder (ours in each precision, fairseq, CTranslate2's compute
types, Marian) side by side with its BLEU, and its ratios come from the same run's records; Marian's options mirror
the bench config, its batch budget gives the updates its batch generator makes, and its log yields the records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from nmt.config import load_config
from tests.test_precision import load_bench_peers

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "bench.yaml"


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


def test_ctranslate2_is_measured_with_both_backends_off_intel_and_its_best_counts() -> None:
    peers = load_bench_peers()
    assert peers.ct2_backends("GenuineIntel") == [("", {})]  # its default there is MKL already
    assert peers.ct2_backends("AuthenticAMD") == [("", {"CT2_USE_MKL": "0"}), ("-mkl", {"CT2_USE_MKL": "1"})]
    assert peers.ct2_backends("") == peers.ct2_backends("AuthenticAMD")
    trained = {"minutes": 30, "updates": {"ours": 900, "fairseq": 900}, "fairseq": record(1000, 7.3),
               "ours": record(1500, 7.1), "ct2-float32": record(1200, 7.3), "ct2-float32-mkl": record(1250, 7.3),
               "ct2-int8-mkl-inter": record(3000, 7.1)}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in peers.decode_table(trained, 100)
            if line.startswith("| ") and "---" not in line}
    assert "| 1.50x | 0.50x |" in rows["nmt (ours), fp32"]  # against the best CTranslate2 row, MKL's int8 workers
    assert "CTranslate2 4.8.5, float32, MKL forced (CT2_USE_MKL=1)" in rows
    assert "CTranslate2 4.8.5, int8, MKL forced (CT2_USE_MKL=1), inter_threads (one batch per thread)" in rows


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


# --- Marian -------------------------------------------------------------------------------------------------------

def marian_flags(options: list[str]) -> dict[str, list[str]]:
    """``--flag value ...`` -> {flag: [values]} (a bare flag maps to [])."""
    flags: dict[str, list[str]] = {}
    for option in options:
        if option.startswith("--"):
            flags[option] = []
            last = option
        else:
            flags[last].append(option)
    return flags


def test_marian_options_mirror_the_bench_config() -> None:
    peers = load_bench_peers()
    cfg = load_config(CONFIG)
    options = peers.marian_train_options(cfg, (Path("/w/train.gl"), Path("/w/train.en")), Path("/w/v.txt"),
                                         Path("/w/m"), 3334, 11232, 2, ["--after-epochs", "1"])
    flags = marian_flags(options)
    expected = {"--type": ["transformer"], "--enc-depth": ["3"], "--dec-depth": ["3"], "--dim-emb": ["256"],
                "--transformer-dim-ffn": ["1024"], "--transformer-heads": ["4"],
                "--transformer-ffn-activation": ["relu"], "--transformer-preprocess": ["n"],
                "--transformer-postprocess": ["da"], "--transformer-postprocess-top": ["n"],
                "--tied-embeddings-all": [], "--transformer-dropout": ["0.3"], "--label-smoothing": ["0.1"],
                "--optimizer-params": ["0.9", "0.98", "1e-08"], "--learn-rate": ["0.001"], "--lr-warmup": ["1000"],
                "--lr-decay-inv-sqrt": ["1000"], "--clip-norm": ["1.0"], "--normalize-gradient": [], "--sync-sgd": [],
                "--cpu-threads": ["2"], "--mini-batch-words": ["3334"], "--maxi-batch": ["1000"],
                "--disp-freq": ["1"], "--after-epochs": ["1"], "--train-sets": ["/w/train.gl", "/w/train.en"],
                "--vocabs": ["/w/v.txt", "/w/v.txt"], "--model": ["/w/m/model.npz"], "--log": ["/w/m/train.log"]}
    assert {flag: flags.get(flag) for flag in expected} == expected
    assert len(flags) == len([o for o in options if o.startswith("--")])  # no flag given twice

    changed = load_config(CONFIG, ["model.norm_position=post", "model.enc_layers=6", "model.d_model=512",
                                   "train.warmup_steps=4000", "train.lr=5e-4", "train.seed=7"])
    flags = marian_flags(peers.marian_train_options(changed, (Path("a"), Path("b")), Path("v"), Path("m"), 100,
                                                    200_000, 1, ["--after-batches", "45"]))
    assert flags["--transformer-postprocess"] == ["dan"] and "--transformer-preprocess" not in flags
    assert "--transformer-postprocess-top" not in flags and flags["--after-batches"] == ["45"]
    assert (flags["--enc-depth"], flags["--dim-emb"], flags["--lr-warmup"], flags["--lr-decay-inv-sqrt"],
            flags["--learn-rate"], flags["--seed"], flags["--cpu-threads"]) == (
        ["6"], ["512"], ["4000"], ["4000"], ["0.0005"], ["7"], ["1"])
    assert flags["--maxi-batch"] == ["3125"]  # 200,000 pairs in one pool of 64-sentence batches


def test_marian_options_refuse_what_they_cannot_mirror() -> None:
    peers = load_bench_peers()
    with pytest.raises(SystemExit, match="inverse-sqrt schedule only"):
        peers.marian_train_options(load_config(CONFIG, ["train.schedule=warmup_plateau"]), (Path("a"), Path("b")),
                                   Path("v"), Path("m"), 100, 10, 1, [])
    with pytest.raises(SystemExit, match="'/my runs/m/model.npz' has whitespace"):
        peers.marian_train_options(load_config(CONFIG), (Path("a"), Path("b")), Path("v"), Path("/my runs/m"), 100,
                                   10, 1, [])


# Marian 1.12.42's lines with --disp-freq 1 (captured from a run), the second epoch starting at update 4
MARIAN_LOG = """\
[2026-12-06 20:48:39] [marian] Marian v1.12.42 b7be0e964 2025-05-24 22:34:42 -0700
[2026-12-06 20:48:39] [config] disp-freq: 1
[2026-12-06 20:48:39] Training started
[2026-12-06 20:48:40] Ep. 1 : Up. 1 : Sen. 18 : Cost 8.80245113 * 625 @ 625 after 625 : Time 0.17s : 3614.69 words/s : gNorm 0.5903
[2026-12-06 20:48:40] Ep. 1 : Up. 2 : Sen. 36 : Cost 8.72919369 * 575 @ 575 after 1,200 : Time 0.06s : 10255.14 words/s : gNorm 0.6099
[2026-12-06 20:48:41] Ep. 1 : Up. 3 : Sen. 1,067 : Cost 8.72437954 * 1,518 @ 1,518 after 2,718 : Time 1.25s : 1214.40 words/s : gNorm 0.6810
[2026-12-06 20:48:41] Seen 1,067 samples
[2026-12-06 20:48:41] Starting epoch 2
[2026-12-06 20:48:41] Ep. 2 : Up. 4 : Sen. 24 : Cost 8.74950790 * 611 @ 611 after 3,329 : Time 0.50s : 1222.00 words/s : gNorm 0.6590
[2026-12-06 20:48:42] Ep. 2 : Up. 5 : Sen. 77 : Cost 8.58884907 * 492 @ 492 after 3,821 : Time 0.02s : 9601.54 words/s : gNorm 0.7750
[2026-12-06 20:48:42] Training finished
"""  # noqa: E501


def test_marian_records_come_from_its_update_lines() -> None:
    peers = load_bench_peers()
    records = peers.marian_records(MARIAN_LOG)
    expected = [(0.0, 0.17, 18, 625), (0.17, 0.23, 18, 575), (0.23, 1.48, 1031, 1518), (1.48, 1.98, 24, 611),
                (1.98, 2.0, 53, 492)]
    assert len(records) == len(expected)
    for record, (start, end, sentences, tokens) in zip(records, expected):
        assert record[:2] == pytest.approx([start, end], abs=1e-9) and record[2:] == [sentences, tokens]
    speed = peers.throughput(records, 2)  # the 3 updates after 2 warm-up ones: 1.77 s
    assert speed["updates"] == 3 and speed["seconds"] == pytest.approx(1.77)
    assert speed["sentences_per_s"] == pytest.approx(1108 / 1.77)
    assert speed["tgt_tokens_per_s"] == pytest.approx(2621 / 1.77)


def test_marian_records_need_every_update_logged() -> None:
    peers = load_bench_peers()
    sparse = "\n".join(line for line in MARIAN_LOG.splitlines() if "Up. 2 " not in line)
    with pytest.raises(SystemExit, match="logged update 3 after 1"):
        peers.marian_records(sparse)
    with pytest.raises(SystemExit, match="no update lines"):
        peers.marian_records("[2026-12-06 20:48:39] Training started\n")


def test_marian_batches_cut_after_the_pair_that_passes_the_budget() -> None:
    peers = load_bench_peers()
    assert peers.marian_batches([3, 3, 3, 3], [3, 3, 3, 3], 5) == 2  # 3, 6 > 5: two pairs a batch
    assert peers.marian_batches([3, 3, 3, 3], [3, 3, 3, 3], 6) == 2  # 3, 6, 9 > 6: three, then the remainder
    assert peers.marian_batches([3, 3, 3], [3, 3, 3], 6) == 1  # reaching the budget does not close a batch
    assert peers.marian_batches([3, 3, 3, 3], [3, 3, 3, 3], 2) == 4
    assert peers.marian_batches([3, 3, 3, 3], [3, 3, 3, 3], 12) == 1  # never past it: the remainder is a batch
    # popped longest target first: sources 1, 10, 1, 10 make two batches at 5 (source order would make three)
    assert peers.marian_batches([1, 10, 1, 10], [4, 3, 2, 1], 5) == 2
    assert peers.marian_batches([10, 1, 10, 1], [4, 3, 2, 1], 5) == 3


def test_marian_words_is_the_smallest_budget_with_that_many_updates() -> None:
    peers = load_bench_peers()
    src = [1 + (7 * i) % 23 for i in range(300)]
    tgt = [1 + (5 * i) % 19 for i in range(300)]
    for updates in (1, 7, 30, 91, 300):
        words = peers.marian_words(src, tgt, updates)
        assert peers.marian_batches(src, tgt, words) <= updates < peers.marian_batches(src, tgt, words - 1) or \
            words == 1
    assert peers.marian_batches(src, tgt, peers.marian_words(src, tgt, 30)) == 30


def test_decode_table_puts_marian_beside_the_others_with_its_updates() -> None:
    peers = load_bench_peers()
    trained = {"minutes": 30, "updates": {"ours": 900, "fairseq": 1800, "marian": 900}, "fairseq": record(1000, 7.3),
               "ours": record(1500, 7.1), "marian-fp32": record(1250, 6.9), "marian-int8": record(1600, 6.8),
               "marian_train": {"threads": 2, "minutes": 80.5, "updates": 900, "mini_batch_words": 3334,
                                "updates_per_epoch": {"ours": 91, "marian": 91}}}
    lines = peers.decode_table(trained, 1112)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in lines if line.startswith("| ") and "---" not in line}
    assert "| 900 | 6.90 | 41.7 | 1,250 | 30.0 | 500 | 1.25x |" in \
        rows["Marian 1.12.42, fp32, --cpu-threads (one batch per thread)"]
    assert "| 900 | 6.80 |" in rows["Marian 1.12.42, int8 (intgemm8), --cpu-threads (one batch per thread)"]
    text = "\n".join(lines)
    assert "trained afterwards alone on 2 threads (80.5 minutes) to 900 updates (ours reached 900)" in text
    assert "`--mini-batch-words 3334` (91 updates per epoch, ours 91)" in text
    assert "Marian" not in "\n".join(peers.decode_table({k: v for k, v in trained.items() if "marian" not in k},
                                                        1112))


def test_training_table_has_marians_row_and_budget() -> None:
    peers = load_bench_peers()
    train = {"updates": 86, "sentences_per_s": 59.5, "tgt_tokens_per_s": 1829.0, "updates_per_s": 0.48,
             "sentences_per_update": 124.0}
    marian = {"train": train, "peak_rss_mb": 2198.0, "load_before": [2.0], "load_after": [2.1],
              "mini_batch_words": 3334, "updates_per_epoch": {"ours": 91, "marian": 91}, "threads": 2}
    fairseq = {"train": {**train, "sentences_per_s": 47.6}, "peak_rss_mb": 1421.0, "load_before": [2.0],
               "load_after": [2.0]}
    machine = {"cpu": "x", "isa": ["avx2"], "bf16_native": False, "threads": 2, "cpu_count": 2, "torch": "2.13"}
    results = {"meta": {"date": "d", "command": "c", "machine": machine, "ours_precisions": "p"},
               "marian": marian, "fairseq": fairseq}
    text = peers.markdown(results, SimpleNamespace(epoch=True, updates=40, warmup=5, sentences=0))
    assert "| Marian 1.12.42, fp32 | 59.5 | 1,829 | 0.48 | 124 | 2,198 | 1.25x | 2.0 → 2.1 |" in text
    assert ("Marian: `--mini-batch-words 3334` (unpadded source tokens per update, split over its `--cpu-threads 2` "
            "synchronous workers) gives 91 updates per epoch, ours 91;") in text


def test_marian_options_without_train_minutes_are_one_line(tmp_path: Path) -> None:
    script = Path(__file__).resolve().parents[1] / "scripts" / "bench_peers"
    run = subprocess.run([sys.executable, str(script), "--tools", "", "--marian", "--peers-dir",
                          str(tmp_path / "peers")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert run.stderr.strip() == "error: --marian and --marian-updates choose the decode models of --train-minutes"
    run = subprocess.run([sys.executable, str(script), "--tools", "ours,marain", "--peers-dir",
                          str(tmp_path / "peers")], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and run.stderr.strip() == \
        "error: unknown tool 'marain' (ours, fairseq, joeynmt, marian)"


def peers_python() -> Path | None:
    """The peers' python when Marian is installed there (scripts/bench_peers --tools marian installs it)."""
    python = Path(os.environ.get("PEERS_DIR", "/tmp/nmt-peers")) / "venv" / "bin" / "python"
    if not python.exists():
        return None
    found = subprocess.run([str(python), "-c", "import _pymarian"], capture_output=True)
    return python if found.returncode == 0 else None


def test_real_marian_trains_the_batches_predicted_and_logs_what_records_read(tmp_path: Path) -> None:
    """Marian itself (skipped where the peers' venv has no pymarian): one epoch of a tiny model on a synthetic
    corpus takes as many updates as marian_batches predicts, the records add up to the corpus, and the decoding
    options translate every line."""
    python = peers_python()
    if python is None:
        pytest.skip("no pymarian in the peers' venv (scripts/bench_peers --tools marian installs it)")
    peers = load_bench_peers()
    words = [f"w{i}" for i in range(12)]
    src = [" ".join(words[(i * k) % 12] for k in range(1 + i % 9)) for i in range(80)]
    tgt = [" ".join(words[(i + k) % 12] for k in range(1 + (3 * i) % 7)) for i in range(80)]
    sp = tmp_path / "sp"
    sp.mkdir()
    (sp / "train.gl").write_text("\n".join(src) + "\n")
    (sp / "train.en").write_text("\n".join(tgt) + "\n")
    (sp / "marian-vocab.txt").write_text("\n".join(["</s>", "<unk>", *words]) + "\n")
    src_lens, tgt_lens = peers.piece_lengths(sp / "train.gl"), peers.piece_lengths(sp / "train.en")
    budget = peers.marian_words(src_lens, tgt_lens, 9)
    tiny = load_config(CONFIG, ["model.enc_layers=1", "model.dec_layers=1", "model.d_model=32", "model.d_ff=64",
                                "model.n_heads=2"])
    marian = peers.Marian(tiny, budget, len(src), {"ours": 9, "marian": peers.marian_batches(src_lens, tgt_lens,
                                                                                          budget)})
    trained = peers.marian_train(python.parents[1], sp, "gl", "en", marian, tmp_path / "model", 1,
                                 ["--after-epochs", "1"])
    records = trained["records"]
    assert len(records) == marian.updates_per_epoch["marian"] == 9
    assert sum(r[2] for r in records) == 80 and sum(r[3] for r in records) == sum(tgt_lens)
    assert trained["peak_rss_mb"] > 0
    (tmp_path / "decode.py").write_text(peers.MARIAN_DECODE)
    options = peers.marian_decode_options(tmp_path / "model" / "model.npz", sp / "marian-vocab.txt", 2)
    out = tmp_path / "out.json"
    subprocess.run([str(python), str(tmp_path / "decode.py"), options, str(sp / "train.gl"), str(out)], check=True,
                   capture_output=True, timeout=300)
    decoded = json.loads(out.read_text())
    assert len(decoded["hypotheses"]) == 80 and decoded["seconds"] > 0
    assert set(" ".join(decoded["hypotheses"]).split()) <= set(words)
