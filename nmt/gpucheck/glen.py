"""The ``glen`` phase of ``scripts/gpu_check``: the papers' gl-en configuration trained for what the budget leaves,
then the test set decoded with beam 4 and scored with the papers' tokenized BLEU.

Training runs as a real ``nmt train`` process with ``train.max_minutes`` set to the time left; dev BLEU (beam 4, all
dev sentences) is evaluated every ``--eval-every`` updates. The time to the papers' stop rule is extrapolated from
the measured seconds per update (evaluations included) and the typical run of
:func:`nmt.experiments.typical_run.typical_run`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nmt.gpucheck.runner import ROOT, Settings, child_env

DRY_RUN_SENTENCES = 20
PAPER_BLEU = {"gl-en": 20.91}  # TwT baseline, tokenized test BLEU (Nguyen & Salazar 2019, Table 3)


def train(settings: Settings, save_dir: Path) -> tuple[int, str]:
    minutes = settings.glen_seconds / 60
    command = [sys.executable, "-m", "nmt", "train", settings.paper_config]
    for override in [*settings.paper_overrides, f"train.save_dir={save_dir}", f"train.max_minutes={minutes:.3f}",
                     f"train.eval_every={settings.eval_every}", "train.log_every=100"]:
        command += ["--set", override]
    print("$ " + " ".join(command), flush=True)
    done = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=settings.glen_seconds + 120)
    print(done.stderr[-8000:], flush=True)
    return done.returncode, done.stderr


def score_test(settings: Settings, best: Path) -> dict[str, Any]:
    """Beam-4 translation of the test set with ``best``; tokenized BLEU (and sacreBLEU where sacremoses exists)."""
    from nmt.data.text import read_lines
    from nmt.inference.translator import Translator
    from nmt.metrics import corpus_scores, tokenized_bleu

    src, tgt = settings.pair.split("-")
    raw = Path(settings.data_dir) / settings.pair / "raw"
    sources, references = read_lines(raw / f"test.{src}"), read_lines(raw / f"test.{tgt}")
    if settings.dry_run:  # the CPU dry run decodes a sample only
        sources, references = sources[:DRY_RUN_SENTENCES], references[:DRY_RUN_SENTENCES]
    translator = Translator.from_checkpoint(best, device=settings.device)
    started = time.time()
    hypotheses = [nbest[0][0] for nbest in translator.translate(sources, beam=4, pretokenized=True)]
    result: dict[str, Any] = {"test_sentences": len(sources), "decode_seconds": time.time() - started,
                              "beam": 4, "test_bleu_tokenized": tokenized_bleu(hypotheses, references)}
    try:
        scores = corpus_scores(hypotheses, references, tokenized=True, lang=tgt)
        result.update(test_sacrebleu=scores["bleu"], sacrebleu_signature=scores["bleu_signature"])
    except ImportError as exc:  # sacremoses (Moses detokenization) is not on every GPU image
        result["test_sacrebleu"] = f"not computed ({exc})"
    return result


def extrapolate(settings: Settings, seconds_per_update: float) -> dict[str, Any]:
    """Hours to the stop rule at the measured rate, for the typical run of
    :func:`nmt.experiments.typical_run.typical_run`."""
    from nmt.config import load_config
    from nmt.experiments.typical_run import typical_run_of

    per_epoch, epochs, updates = typical_run_of(load_config(settings.paper_config, settings.paper_overrides))
    return {"updates_per_epoch": per_epoch, "assumed_epochs": epochs, "assumed_updates": updates,
            "extrapolated_hours": updates * seconds_per_update / 3600}


def glen_phase(settings: Settings) -> dict[str, Any]:
    from nmt.checkpoint.files import load_checkpoint

    save_dir = Path(settings.work) / "glen"
    code, stderr = train(settings, save_dir)
    last, best = save_dir / "checkpoint_last.pt", save_dir / "checkpoint_best.pt"
    if code != 0 or not best.is_file():
        lines = [line for line in stderr.splitlines() if line.strip()]
        return {"status": "fail", "summary": f"training exited {code}: {(lines or [''])[-1][:300]}"}
    progress = load_checkpoint(last)["progress"]
    records = [json.loads(line) for line in (save_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    curve = [[r["step"], round(r["bleu"], 2)] for r in records]
    seconds_per_update = progress["train_seconds"] / max(progress["step"], 1)
    result: dict[str, Any] = {"updates": progress["step"], "epochs": progress["epoch"],
                              "train_seconds": progress["train_seconds"], "seconds_per_update": seconds_per_update,
                              "dev_bleu_curve": curve, "best_dev_bleu": progress["best_bleu"],
                              "best_step": progress["best_step"], "skipped_fp16_steps": progress["skipped_steps"],
                              "config": settings.paper_config, "eval_every": settings.eval_every,
                              "paper_test_bleu": PAPER_BLEU.get(settings.pair)}
    result.update(score_test(settings, best))
    result.update(extrapolate(settings, seconds_per_update))
    summary = (f"{result['updates']} updates in {result['train_seconds']:.0f} s ({1 / seconds_per_update:.1f}/s), "
               f"best dev BLEU {result['best_dev_bleu']:.2f} at {result['best_step']}, test BLEU "
               f"{result['test_bleu_tokenized']:.2f} (beam 4, tokenized); stop rule in about "
               f"{result['extrapolated_hours']:.1f} h ({result['assumed_updates']} updates assumed)")
    return {"status": "pass", "summary": summary, **result}
