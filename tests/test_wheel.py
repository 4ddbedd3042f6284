"""The built wheel, installed in a fresh virtual environment, runs the whole chain from an empty directory:
``nmt --version``, ``nmt prepare`` from local files, ``nmt train`` by a packaged config's NAME (and again from the
run's saved config.yaml), ``nmt translate`` and ``nmt evaluate`` in a pipe. Nothing may come from the checkout.

To stay fast and offline the fresh environment reuses the installed dependencies (torch, ...) through ``.pth`` lines
naming the test interpreter's site-packages folders; the package itself comes only from the wheel.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import nmt
from tests.synthetic import write_corpus

ROOT = Path(__file__).resolve().parents[1]
TINY = ["system=qknorm", "data.pair=xx-yy", "data.bpe_size=48", "model.enc_layers=2", "model.dec_layers=2",
        "model.d_model=32",
        "model.d_ff=64", "model.n_heads=4", "model.dropout=0.1", "model.word_dropout=0.0", "model.max_positions=128",
        "train.device=cpu", "train.precision=fp32", "train.max_tokens=400", "train.lr=5e-3", "train.warmup_steps=20",
        "train.max_steps=40", "train.eval_every=40", "train.eval_sentences=20", "train.tensorboard=false",
        "decode.beam=2", "decode.max_len_b=10"]

pytestmark = pytest.mark.slow


def _run(argv: list[str], cwd: Path, env: dict[str, str], stdin: str | None = None) -> str:
    result = subprocess.run(argv, cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{argv}\n{result.stderr[-3000:]}"
    return result.stdout


def _checkout_only(directory: str, names: list[str]) -> set[str]:
    """What a wheel build must not see: the checkout's own data, runs, caches and build leftovers."""
    top = {".git", ".venv", "data", "runs", "results", "bench", "build", "dist"} if Path(directory) == ROOT else set()
    return {n for n in names if n in top or n == "__pycache__" or n.endswith((".egg-info", "_cache"))}


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A fresh venv with the wheel installed (no pip inside; the test's pip installs into it)."""
    base = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # build from a copy: an in-tree build would leave build/ and an .egg-info in the checkout
    source = base / "source"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_checkout_only)
    dist = base / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist),
                    str(source)], check=True, capture_output=True, timeout=300, env=env)
    (wheel,) = dist.glob("qknorm_nmt-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "nmt/configs/gl-en-cpu.yaml" in names and "nmt/configs/base.yaml" in names
    assert any(n.endswith("licenses/LICENSE") for n in names) and not any(n.startswith("tests/") for n in names)
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--disable-pip-version-check", str(wheel)], check=True, capture_output=True, timeout=300, env=env)
    purelib = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  check=True, capture_output=True, text=True).stdout.strip())
    # plain path lines: the dependencies are found, but those folders' .pth files (an editable nmt) are not run
    deps = [p for p in sys.path if p.endswith("-packages") and Path(p).is_dir()]
    (purelib / "deps.pth").write_text("".join(p + "\n" for p in deps), encoding="utf-8")
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", OMP_NUM_THREADS="1")
    return venv, env


def test_wheel_runs_the_chain_from_an_empty_directory(installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    venv, env = installed
    work = tmp_path / "work"
    work.mkdir()
    corpus = write_corpus(tmp_path / "corpus", {"train": 600, "dev": 20, "test": 30})
    where = _run([str(venv / "bin" / "python"), "-c", "import nmt; print(nmt.__file__)"], work, env)
    assert where.startswith(str(venv)), where  # the wheel's package, not the checkout's
    assert _run(["nmt", "--version"], work, env) == f"nmt {nmt.__version__} (qknorm-nmt)\n"

    _run(["nmt", "prepare", "xx-yy", "--from-dir", str(corpus), "--bpe-size", "48", "--quiet"], work, env)
    sets = [arg for item in TINY for arg in ("--set", item)]
    summary = json.loads(_run(["nmt", "train", "gl-en-cpu", *sets, "--json", "--quiet"], work, env))
    run_dir = work / "runs" / "gl-en-cpu"  # the packaged preset's save_dir, relative to where nmt runs
    assert summary["step"] == 40 and (run_dir / "checkpoint_last.pt").is_file()
    # the run's saved config.yaml (with its `resolved` section) trains again as it is
    again = json.loads(_run(["nmt", "train", str(run_dir / "config.yaml"), "--resume", "--set",
                             "train.max_steps=45", "--json", "--quiet"], work, env))
    assert again["step"] == 45

    source = (work / "data" / "xx-yy" / "raw" / "test.xx").read_text(encoding="utf-8")
    hyps = _run(["nmt", "translate", "--path", str(run_dir / "checkpoint_last.pt"), "--pretokenized", "--input", "-",
                 "--output", "-", "--quiet"], work, env, stdin=source)
    assert len(hyps.splitlines()) == len(source.splitlines()) == 30
    scores = json.loads(_run(["nmt", "evaluate", "--hyp", "-", "--ref", "data/xx-yy/raw/test.yy", "--tokenized",
                              "--json"], work, env, stdin=hyps))
    assert 0 <= scores["tokenized_bleu"] <= 100 and scores["hyp"] == "-"
    assert sorted(p.name for p in work.iterdir()) == ["data", "runs"]  # nothing else written where it ran
