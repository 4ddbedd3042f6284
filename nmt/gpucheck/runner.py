"""The driver of ``scripts/gpu_check``: resolves the data, writes the run configs, runs each phase in a child process
under its wall-clock limit and rewrites the report after every phase."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nmt.errors import NmtError
from nmt.gpucheck.report import write_report

ROOT = Path(__file__).resolve().parents[2]
TOTAL_MINUTES = 8.0
# Per-phase wall-clock limits in seconds (GPU run, dry run); "glen" gets what is left of the total, minus a margin.
BUDGETS: dict[str, tuple[float, float]] = {
    "env": (30, 30), "tests": (90, 90), "resume": (90, 240), "torchrun": (75, 180), "throughput": (100, 90),
    "glen": (0, 0),
}
PHASES = list(BUDGETS)
MARGIN = 15.0  # seconds kept free at the end for the last report
GLEN_RESERVE = 75.0  # seconds of the glen phase not spent training: start-up, final evaluation, test decoding
GLEN_MINIMUM = 240.0 + GLEN_RESERVE  # kept for the glen phase on a GPU: at least 4 minutes of training


@dataclass(frozen=True)
class Settings:
    """What every phase needs to know (written as JSON for the phase processes)."""

    device: str  # cuda | cpu
    dry_run: bool
    work: str  # scratch directory for data, runs and configs
    data_dir: str  # root of the prepared data
    pair: str
    paper_config: str  # the gl-en (and throughput) configuration
    paper_overrides: list[str]
    throughput_overrides: list[str]  # on top of paper_overrides: the papers' 6+6-layer d512 model
    tiny_config: str  # a small model for the resume and torchrun phases
    eval_every: int
    glen_seconds: float = 0.0  # set when the glen phase starts
    env: dict[str, str] = field(default_factory=dict)


def child_env() -> dict[str, str]:
    """The environment of every child process: the repository importable, output unbuffered."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def resolve_data(arg: str | None, pair: str, work: Path, bpe_size: int) -> tuple[Path, str]:
    """``(data_dir, pair)`` of prepared data: ``arg`` (prepared pair dir or raw ``{train,dev,test}.{src,tgt}``
    folder), else the first of ``data/PAIR``, ``shared/data/PAIR``, ``../shared/data/PAIR`` that exists."""
    candidates = [Path(arg)] if arg else [ROOT / "data" / pair, ROOT / "shared" / "data" / pair,
                                          ROOT.parent / "shared" / "data" / pair]
    found = next((c for c in candidates if c.is_dir()), None)
    if found is None:
        where = ", ".join(str(c) for c in candidates)
        raise NmtError(f"no {pair} data at {where}; pass --data DIR (a prepared pair directory or a folder of "
                       "{train,dev,test}.{src,tgt} files)")
    meta = found / "meta.json"
    if meta.is_file():
        return found.parent, str(json.loads(meta.read_text(encoding="utf-8"))["pair"])
    from nmt.data.prepare import prepare

    prepare(pair, work / "data", from_dir=found, bpe_size=bpe_size, progress=False)
    return work / "data", pair


def tiny_tree(data_dir: Path, pair: str, device: str, dry_run: bool) -> dict[str, Any]:
    """A small model trained for a few hundred updates (resume and torchrun phases)."""
    d_model = 32 if dry_run else 128
    return {
        "system": "qknorm",
        "data": {"pair": pair, "data_dir": str(data_dir), "max_len": 100},
        "model": {"enc_layers": 2, "dec_layers": 2, "d_model": d_model, "d_ff": 2 * d_model, "n_heads": 4,
                  "dropout": 0.1, "word_dropout": 0.1},
        "train": {"device": device, "precision": "auto" if device == "cuda" else "fp32",
                  "max_tokens": 400 if dry_run else 2048, "schedule": "inverse_sqrt", "lr": 1e-3,
                  "warmup_steps": 50, "adam_betas": [0.9, 0.98], "max_steps": 30 if dry_run else 400,
                  "eval_every": 10 if dry_run else 100, "eval_sentences": 4 if dry_run else 20, "eval_beam": 1,
                  "log_every": 5, "progress": False, "tensorboard": False},
        "decode": {"beam": 2, "max_len_b": 10},
    }


def make_settings(args: argparse.Namespace, device: str, work: Path) -> Settings:
    paper = ROOT / "configs" / f"{args.pair}.yaml"
    bpe_size = int((yaml.safe_load(paper.read_text(encoding="utf-8")) or {}).get("data", {}).get("bpe_size", 8000)) \
        if paper.is_file() else 8000
    data_dir, pair = resolve_data(args.data, args.pair, work, bpe_size)
    # the runs train on what was prepared: nmt train refuses a config whose BPE size differs from the data's
    prepared = json.loads((data_dir / pair / "meta.json").read_text(encoding="utf-8"))["bpe_size"]
    tree = tiny_tree(data_dir, pair, device, args.dry_run)
    tree["data"]["bpe_size"] = prepared
    tiny = work / "tiny.yaml"
    tiny.write_text(yaml.safe_dump(tree), encoding="utf-8")
    common = [f"data.data_dir={data_dir}", f"data.pair={pair}", f"data.bpe_size={prepared}", f"train.device={device}",
              "train.progress=false", "train.tensorboard=false"]
    if args.dry_run or not paper.is_file():
        return Settings(device, args.dry_run, str(work), str(data_dir), pair, str(tiny), common, [], str(tiny),
                        args.eval_every or 20)
    return Settings(device, False, str(work), str(data_dir), pair, str(paper), ["system=qknorm", *common],
                    ["model.enc_layers=6", "model.dec_layers=6", "model.n_heads=8", "model.d_model=512",
                     "model.d_ff=2048"], str(tiny), args.eval_every or 500)


def run_phase(name: str, settings: Settings, limit: float, log: Path) -> dict[str, Any]:
    """Run one phase in a child process (its own process group, killed whole at ``limit`` seconds)."""
    work = Path(settings.work)
    settings_path, result_path = work / f"settings-{name}.json", work / f"result-{name}.json"
    settings_path.write_text(json.dumps(asdict(settings)), encoding="utf-8")
    result_path.unlink(missing_ok=True)
    started = time.time()
    with open(log, "a", encoding="utf-8") as handle:
        handle.write(f"\n===== phase {name} (limit {limit:.0f} s) =====\n")
        handle.flush()
        child = subprocess.Popen([sys.executable, "-m", "nmt.gpucheck.phase", name, str(settings_path),
                                  str(result_path)], stdout=handle, stderr=subprocess.STDOUT, env=child_env(),
                                 cwd=ROOT, start_new_session=True)
        try:
            code = child.wait(timeout=max(limit, 1.0))
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
    seconds = time.time() - started
    if result_path.is_file():
        result = dict(json.loads(result_path.read_text(encoding="utf-8")))
    elif code is None:
        result = {"status": "timeout", "summary": f"stopped at its {limit:.0f} s limit"}
    else:
        result = {"status": "error", "summary": f"the phase process exited with status {code}; see gpu_check.log"}
    if code is None and result.get("status") not in ("timeout",):
        result["status"], result["summary"] = "timeout", f"{result.get('summary', '')} (then stopped at {limit:.0f} s)"
    result["seconds"] = round(seconds, 1)
    return result


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/gpu_check", description=__doc__)
    parser.add_argument("--out", required=True, help="folder for gpu_check.md, gpu_check.json and gpu_check.log")
    parser.add_argument("--data", default=None, help="prepared pair directory (data/gl-en) or a folder of raw "
                        "{train,dev,test}.{src,tgt} files; default: data/PAIR, shared/data/PAIR or ../shared/data/PAIR")
    parser.add_argument("--pair", default="gl-en")
    parser.add_argument("--dry-run", action="store_true", help="every phase on the CPU, tiny model, reduced budgets")
    parser.add_argument("--minutes", type=float, default=TOTAL_MINUTES, help="total wall-clock budget")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated subset of {','.join(PHASES)}")
    parser.add_argument("--eval-every", type=int, default=0, help="gl-en dev BLEU interval (default 500; dry 20)")
    parser.add_argument("--work", default=None, help="scratch directory (default: a new temporary one)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.time()
    deadline = started + 60 * args.minutes - MARGIN
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    unknown = [p for p in phases if p not in BUDGETS]
    if unknown:
        print(f"error: unknown phase {unknown[0]!r} (phases: {', '.join(PHASES)})", file=sys.stderr)
        return 2
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(f"error: scripts/gpu_check needs CUDA, and torch {torch.__version__} sees no GPU here (--dry-run runs "
              "it on the CPU with a tiny model)", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="nmt-gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    log = out / "gpu_check.log"
    log.write_text("", encoding="utf-8")
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started)),
                              "dry_run": args.dry_run, "minutes": args.minutes, "phases": {}}
    try:
        settings = make_settings(args, "cpu" if args.dry_run else "cuda", work)
    except NmtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report["data"] = {"data_dir": settings.data_dir, "pair": settings.pair, "paper_config": settings.paper_config}
    for name in phases:
        left = deadline - time.time()
        keep = GLEN_MINIMUM if "glen" in phases and not args.dry_run else 0.0
        limit = left if name == "glen" else min(BUDGETS[name][1 if args.dry_run else 0], left - keep)
        if limit < 5:
            report["phases"][name] = {"status": "skipped", "summary": "no time left in the budget"}
            continue
        if name == "glen":  # a dry run trains a few seconds only
            seconds = min(limit - GLEN_RESERVE, 15.0) if args.dry_run else limit - GLEN_RESERVE
            settings = Settings(**{**asdict(settings), "glen_seconds": max(seconds, 10.0)})
        print(f"gpu_check: phase {name} (limit {limit:.0f} s)", file=sys.stderr, flush=True)
        report["phases"][name] = result = run_phase(name, settings, limit, log)
        print(f"gpu_check: {name}: {result['status']}: {result.get('summary', '')}", file=sys.stderr, flush=True)
        report["seconds"] = round(time.time() - started, 1)
        write_report(out, report)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    report["seconds"] = round(time.time() - started, 1)
    write_report(out, report)
    failed = [n for n, r in report["phases"].items() if r["status"] not in ("pass", "skipped")]
    print(f"gpu_check: {'all phases passed' if not failed else 'not passed: ' + ', '.join(failed)}; report in "
          f"{out / 'gpu_check.md'}", file=sys.stderr)
    return 1 if failed else 0
