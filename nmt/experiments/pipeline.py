"""Prepare → train → test for one pair and system: what ``make train`` and ``make reproduce`` run.

Each stage is resumable: prepared data is reused, training continues from ``checkpoint_last.pt``, a run that finished
with the same resolved config (the checkpoint records both) is not trained again, and a tested run
(``test_scores.json`` of the same checkpoint and newer than it) is not decoded again. (``nmt train --resume`` on a
finished run stops at once by itself too: every stopping condition, the training clock included, is saved in the
checkpoint.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nmt.atomic import atomic_write_text
from nmt.config import load_config
from nmt.errors import NmtError
from nmt.experiments.published import PUBLISHED, reference_score
from nmt.presets import cpu_overrides, is_cpu_preset, pair_config

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

@dataclass(frozen=True)
class RunSpec:
    """One pair × system × scale run."""

    pair: str
    system: str
    scale: str  # paper | cpu
    device: str = "auto"
    data_dir: str = "data"
    from_dir: str | None = None
    runs_dir: str = "runs"
    config_dir: str | None = None  # default: the packaged configs (nmt/configs)
    seed: int | None = None  # train.seed; None: the config's (and no -sSEED in the run's name)
    extra: tuple[str, ...] = ()  # further overrides every run of a campaign shares (e.g. train.max_steps=1200)

    @property
    def config_path(self) -> Path | Traversable:
        """``PAIR.yaml``, or at CPU scale ``PAIR-cpu.yaml`` when that preset exists (else ``PAIR.yaml``, which
        :attr:`overrides` then turns into a CPU recipe)."""
        return pair_config(self.pair, self.scale, self.config_dir)

    @property
    def name(self) -> str:
        """``PAIR-SYSTEM`` or ``PAIR-SYSTEM-sSEED``: the run's record folder (:mod:`nmt.experiments.records`)."""
        return f"{self.pair}-{self.system}" + (f"-s{self.seed}" if self.seed is not None else "")

    @property
    def save_dir(self) -> Path:
        suffix = "-cpu" if self.scale == "cpu" else ""
        seed = f"-s{self.seed}" if self.seed is not None else ""
        return Path(self.runs_dir) / f"{self.pair}{suffix}-{self.system}{seed}"

    @property
    def overrides(self) -> list[str]:
        derived = cpu_overrides(self.pair) if self.scale == "cpu" and not is_cpu_preset(self.config_path) else []
        seed = [f"train.seed={self.seed}"] if self.seed is not None else []
        return [*derived, f"system={self.system}", f"train.device={self.device}", f"train.save_dir={self.save_dir}",
                f"data.data_dir={self.data_dir}", *seed, *self.extra]


def resolve_scale(scale: str) -> str:
    """``auto``: the papers' configuration on a GPU, the CPU preset otherwise."""
    if scale != "auto":
        return scale
    import torch

    return "paper" if torch.cuda.is_available() else "cpu"


def ensure_prepared(spec: RunSpec) -> dict[str, Any]:
    """Prepare ``data_dir/pair`` unless it is already there (downloading, or from ``from_dir``)."""
    from nmt.data.prepare import format_summary, prepare

    cfg = load_config(spec.config_path, spec.overrides)
    meta = prepare(spec.pair, spec.data_dir, from_dir=spec.from_dir, bpe_size=cfg.data.bpe_size,
                   max_len=cfg.data.max_len, keep_partial=cfg.data.keep_partial)
    print(format_summary(meta, Path(spec.data_dir) / spec.pair), file=sys.stderr)
    return meta


def training_progress(save_dir: Path) -> dict[str, Any] | None:
    """Where the run in ``save_dir`` stands (``checkpoint_last.pt``'s progress without its history), or None."""
    from nmt.checkpoint.files import load_checkpoint

    last = save_dir / "checkpoint_last.pt"
    if not last.is_file():
        return None
    progress = dict(load_checkpoint(last).get("progress") or {})
    progress.pop("history", None)
    return progress


def finished(save_dir: Path, config: dict[str, Any]) -> bool:
    """Whether the run in ``save_dir`` stopped by itself (not interrupted) with the resolved config ``config``:
    ``checkpoint_last.pt`` records both (``progress.stopped``, ``config``)."""
    from nmt.checkpoint.files import load_checkpoint

    last = save_dir / "checkpoint_last.pt"
    if not (last.is_file() and (save_dir / "checkpoint_best.pt").is_file()):
        return False
    payload = load_checkpoint(last)
    if not (payload.get("progress") or {}).get("stopped"):
        return False
    return same_config(payload["config"], config)


# Config keys that change what a run prints or which checkpoint is tested, not what it trains: a finished run is
# finished whatever they say.
COSMETIC = {"train": ("progress", "tensorboard", "log_every", "test_average")}


def same_config(saved: dict[str, Any], config: dict[str, Any]) -> bool:
    """Whether a checkpoint's saved config is ``config``, apart from :data:`COSMETIC` keys and after filling the
    keys a newer toolkit added with their defaults (so a campaign's finished runs stay finished across an upgrade
    that adds a config key)."""
    from nmt.config import config_from_dict, config_to_dict

    def training(tree: dict[str, Any]) -> dict[str, Any]:
        return {section: ({k: v for k, v in values.items() if k not in COSMETIC.get(section, ())}
                          if isinstance(values, dict) else values) for section, values in tree.items()}

    try:
        filled = config_to_dict(config_from_dict(saved))
    except NmtError:
        return False
    return training(filled) == training(config)


# how `nmt train` ends when SIGINT or SIGTERM stops it (128 + the signal, nmt/commands/train.py), and how a
# process ends that such a signal killed (minus the signal)
STOPPED_BY_SIGNAL = frozenset({128 + signal.SIGINT, 128 + signal.SIGTERM, -signal.SIGINT, -signal.SIGTERM})


def train_run(spec: RunSpec) -> None:
    """Train (or continue training) in a child process so a crash or Ctrl-C there leaves this driver in charge.

    A run that already finished with the same resolved config returns at once. A trainer stopped by SIGINT or
    SIGTERM raises KeyboardInterrupt here (the driver stops, :func:`interrupted`); any other failure NmtError.
    """
    from nmt.config import config_to_dict

    config = config_to_dict(load_config(spec.config_path, spec.overrides))
    if finished(spec.save_dir, config):
        print(f"{spec.save_dir}: training finished already", file=sys.stderr)
        return
    command = [sys.executable, "-m", "nmt", "train", str(spec.config_path), "--resume"]
    for override in spec.overrides:
        command += ["--set", override]
    print("$ " + " ".join(command), file=sys.stderr, flush=True)
    child = subprocess.Popen(command, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        returncode = child.wait()
    except KeyboardInterrupt:
        # Ctrl-C reached the child too: let it finish writing checkpoint_last.pt before this driver stops
        child.wait()
        raise
    if returncode in STOPPED_BY_SIGNAL:
        # the trainer was told to stop (a Ctrl-C that reached only it, or a kill -INT / -TERM of it) and wrote
        # checkpoint_last.pt: the driver stops too, rather than count a failure and start the next run
        raise KeyboardInterrupt
    if returncode != 0:
        raise NmtError(f"training {spec.save_dir} exited with status {returncode}; rerun to resume it")


def interrupted() -> int:
    """What a driver does on Ctrl-C: one line instead of a traceback (the training child has already written its
    checkpoint_last.pt, :func:`train_run`), and the shell's exit status for SIGINT."""
    print("error: interrupted; rerun the same command to resume from checkpoint_last.pt", file=sys.stderr)
    return 130


def checkpoint_to_test(spec: RunSpec) -> Path:
    """``checkpoint_best.pt``; with ``train.test_average`` N > 0, ``checkpoint_avg.pt``: the average of the run's N
    newest ``checkpoint_<step>.pt`` (fairseq's ``average_checkpoints.py --num-update-checkpoints N``), rebuilt when
    an input is newer than it."""
    from nmt.checkpoint.average import average_checkpoints, last_checkpoints
    from nmt.checkpoint.files import save_checkpoint

    count = load_config(spec.config_path, spec.overrides).train.test_average
    if count <= 0:
        return spec.save_dir / "checkpoint_best.pt"
    inputs = last_checkpoints(spec.save_dir, count)
    averaged = spec.save_dir / "checkpoint_avg.pt"
    if not averaged.is_file() or averaged.stat().st_mtime < max(path.stat().st_mtime for path in inputs):
        save_checkpoint(averaged, average_checkpoints(inputs))
    return averaged


def test_run(spec: RunSpec, force: bool = False) -> dict[str, Any]:
    """Translate the test set with the best checkpoint (or the average, :func:`checkpoint_to_test`) and score it;
    cached in ``save_dir/test_scores.json``."""
    from nmt.data.text import read_lines, write_lines_atomic
    from nmt.inference.translator import Translator
    from nmt.metrics import corpus_scores

    best = checkpoint_to_test(spec)
    scores_path = spec.save_dir / "test_scores.json"
    if not force and scores_path.is_file() and scores_path.stat().st_mtime >= best.stat().st_mtime:
        cached = dict(json.loads(scores_path.read_text(encoding="utf-8")))
        if cached.get("checkpoint") == str(best):  # not the scores of the other choice (train.test_average)
            return cached
    src_lang, tgt_lang = spec.pair.split("-")
    pair_dir = Path(spec.data_dir) / spec.pair
    sources = read_lines(pair_dir / "raw" / f"test.{src_lang}")
    references = read_lines(pair_dir / "raw" / f"test.{tgt_lang}")
    translator = Translator.from_checkpoint(best, device=spec.device)
    started = time.time()
    hypotheses = [nbest[0][0] for nbest in translator.translate(sources, pretokenized=True)]
    seconds = time.time() - started
    write_lines_atomic(spec.save_dir / "test.hyp", hypotheses)
    scores = corpus_scores(hypotheses, references, tokenized=True, lang=tgt_lang)
    result: dict[str, Any] = {
        "pair": spec.pair, "system": spec.system, "scale": spec.scale, "checkpoint": str(best),
        "tokenized_bleu": scores["tokenized_bleu"], "sacrebleu": scores["bleu"],
        "sacrebleu_signature": scores["bleu_signature"], "tokenized_signature": scores["tokenized_bleu_signature"],
        "published": PUBLISHED.get((spec.pair, spec.system)), "test_sentences": len(sources),
        "decode_seconds": seconds,
    }
    atomic_write_text(scores_path, json.dumps(result, indent=2) + "\n")
    return result


def test_references(pair: str, data_dir: str, from_dir_root: str | None = None) -> tuple[Path, list[str]] | None:
    """The tokenized test references of ``pair``: the prepared ``data_dir/PAIR/raw/test.TGT``, else the local
    source folder's ``FROM_DIR_ROOT/PAIR/test.TGT``; None when neither exists."""
    from nmt.data.text import read_lines

    target = pair.split("-")[1]
    candidates = [Path(data_dir) / pair / "raw" / f"test.{target}"]
    if from_dir_root:
        candidates.append(Path(from_dir_root) / pair / f"test.{target}")
    for path in candidates:
        if path.is_file():
            return path, read_lines(path)
    return None


def record_run(spec: RunSpec, results_dir: Path) -> Path:
    """Write the record of a trained and tested run (:mod:`nmt.experiments.records`) under ``results_dir``."""
    from nmt.checkpoint.files import load_checkpoint
    from nmt.experiments.records import record_from_run, write_record

    payload = load_checkpoint(spec.save_dir / "checkpoint_last.pt")
    progress = dict(payload.get("progress") or {})
    progress.pop("history", None)
    test = json.loads((spec.save_dir / "test_scores.json").read_text(encoding="utf-8"))
    found = test_references(spec.pair, spec.data_dir)
    if found is None:
        raise NmtError(f"{spec.name}: no test references in {spec.data_dir}/{spec.pair}/raw")
    fields = {"name": spec.name, "pair": spec.pair, "system": spec.system, "seed": spec.seed, "scale": spec.scale,
              "config": payload["config"]}
    record = record_from_run(spec.save_dir, fields, progress, test, found[1])
    hypotheses = (spec.save_dir / "test.hyp").read_text(encoding="utf-8").split("\n")[:-1]  # as test_run wrote them
    return write_record(results_dir, record, hypotheses)


def format_result(result: dict[str, Any]) -> str:
    ref = reference_score(result["pair"], result["system"])
    beside = (f" | {ref['kind']} {ref['value']:.2f} ({result['tokenized_bleu'] - ref['value']:+.2f})"
              if ref["value"] is not None else " | published: not reported for this pair/system")
    return (f"{result['pair']} {result['system']} ({result['scale']}): test BLEU {result['tokenized_bleu']:.2f} "
            f"tokenized, {result['sacrebleu']:.2f} sacreBLEU{beside}")
