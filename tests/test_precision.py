"""Precision follows the hardware: ``auto`` picks bf16 only on CPUs with native bf16, says why, and an explicit bf16
on an emulating CPU warns once; the hardware probe and the machine record are sane on this machine."""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch
import yaml

from nmt.config import config_from_dict
from nmt.errors import NmtError
from nmt.inference import precision
from nmt.machine import hardware, runtime
from nmt.machine.hardware import NATIVE_BF16_FLAGS, Bf16Support
from nmt.machine.runtime import choose_precision, resolve_precision, setup
from nmt.training.loop import train
from tests.scripts import load_script
from tests.synthetic import prepare_synthetic, tiny_config
from tests.test_translate import run_cli, tiny_checkpoint

CPU = torch.device("cpu")
# the two classes of CPU this project meets: Sapphire Rapids-like (AVX-512 BF16, AMX) and AVX2-only AMD EPYC
NATIVE = Bf16Support(native=True, onednn=True, flags=("avx512_bf16", "amx_bf16"), slowdown=0.4)
EMULATED = Bf16Support(native=False, onednn=False, flags=(), slowdown=48.0)


@pytest.fixture()
def cpu_class(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Lets a test choose the CPU class the probe reports; resets the once-per-process warning."""
    runtime.warn_emulated_bf16.cache_clear()
    monkeypatch.setattr(hardware, "bf16_support", lambda: NATIVE)
    yield monkeypatch
    runtime.warn_emulated_bf16.cache_clear()


def test_auto_is_bf16_on_a_cpu_with_native_bf16(cpu_class: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    chosen = choose_precision("auto", CPU)
    assert chosen.name == "bf16"
    assert chosen.reason == "auto: CPU has native bf16 (avx512_bf16, amx_bf16): bf16 matmul 2.5x faster than fp32"
    assert choose_precision("bf16", CPU).name == "bf16"
    assert capsys.readouterr().err == ""  # native bf16 asked for explicitly: nothing to warn about


def test_auto_is_fp32_on_a_cpu_without_native_bf16(cpu_class: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    cpu_class.setattr(hardware, "bf16_support", lambda: EMULATED)
    chosen = choose_precision("auto", CPU, "decode.precision")
    assert chosen.name == "fp32"
    assert chosen.reason == ("auto: no native bf16 on this CPU (oneDNN has no bf16 kernels for it): bf16 matmul 48x "
                             "slower than fp32")
    assert capsys.readouterr().err == ""


def test_explicit_bf16_without_native_support_runs_and_warns_once(cpu_class: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    cpu_class.setattr(hardware, "bf16_support", lambda: EMULATED)
    assert [resolve_precision("bf16", CPU) for _ in range(3)] == ["bf16"] * 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("warning: train.precision is bf16, but no native bf16")
    assert "bf16 matmul 48x slower than fp32" in err


def test_emulated_bf16_that_onednn_accepts_is_not_native() -> None:
    """AVX-512 without BF16 instructions: oneDNN says yes, the timing says no."""
    emulated = Bf16Support(native=False, onednn=True, flags=(), slowdown=2.3)
    assert emulated.reason == "no native bf16 on this CPU (emulated): bf16 matmul 2.3x slower than fp32"


def test_fp32_and_gpu_choices_do_not_probe_the_cpu(cpu_class: pytest.MonkeyPatch) -> None:
    def no_probe() -> Bf16Support:
        raise AssertionError("probed")

    cpu_class.setattr(hardware, "bf16_support", no_probe)
    assert choose_precision("fp32", CPU).reason == "set by train.precision"
    cuda = torch.device("cuda", 0)
    cpu_class.setattr(torch.cuda, "is_bf16_supported", lambda: True)
    assert choose_precision("auto", cuda).name == "bf16"
    cpu_class.setattr(torch.cuda, "is_bf16_supported", lambda: False)
    assert choose_precision("auto", cuda).name == "fp16"
    assert choose_precision("fp32", cuda).name == "fp32"
    assert choose_precision("auto", torch.device("mps")).name == "fp32"  # other accelerators: no CPU probe either


@pytest.mark.parametrize(("name", "message"), [("fp16", "'fp16' needs CUDA"), ("half", "not one of auto")])
def test_bad_precisions_are_errors(name: str, message: str, cpu_class: pytest.MonkeyPatch) -> None:
    with pytest.raises(NmtError, match=message):
        choose_precision(name, CPU, "train.precision")


def test_setup_keeps_the_reason(cpu_class: pytest.MonkeyPatch) -> None:
    cpu_class.setattr(hardware, "bf16_support", lambda: EMULATED)
    rt = setup("cpu", "auto")
    assert rt.precision == "fp32"
    assert rt.describe_precision().startswith("fp32 (auto: no native bf16 on this CPU")


def test_first_training_log_line_names_precision_and_why(cpu_class: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cpu_class.setattr(hardware, "bf16_support", lambda: EMULATED)
    data_dir = prepare_synthetic(tmp_path, {"train": 60, "dev": 4, "test": 4})
    train(config_from_dict(tiny_config(data_dir, tmp_path / "run", precision="auto", max_steps=2, eval_every=2)))
    first, second = (tmp_path / "run" / "train.log").read_text(encoding="utf-8").splitlines()[:2]
    assert "precision fp32 (auto: no native bf16 on this CPU" in first and "48x slower than fp32" in first
    assert second.endswith(f"machine: {hardware.describe_machine(hardware.machine_info())}")


def test_translate_says_its_precision(cpu_class: pytest.MonkeyPatch, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    checkpoint = tiny_checkpoint(tmp_path)
    source = tmp_path / "in.txt"
    source.write_text("the cat sat .\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(checkpoint), "--input", str(source), "--device", "cpu"]
    # decoding's auto is the fastest arithmetic by nmt.inference.precision's decoder-step probe (bf16 here)
    speeds = precision.DecodeSpeeds({"fp32": 1.0, "bf16": 0.4, "int8": 0.5})
    cpu_class.setattr(precision, "decode_speeds", lambda model, vocab: speeds)
    assert run_cli([*args, "--precision", "auto"], cpu_class) == 0
    assert "precision bf16 (auto: decoder-step probe, time relative to fp32: fp32 1.00, bf16 0.40, int8 0.50)" in \
        capsys.readouterr().err
    assert run_cli(args, cpu_class) == 0
    assert "precision fp32 (set by decode.precision)" in capsys.readouterr().err


def test_cpu_presets_choose_precision_by_hardware() -> None:
    root = Path(__file__).resolve().parents[1]
    for name in ("gl-en-cpu.yaml", "bench.yaml"):
        path = next(p for p in (root / "configs" / name, root / "nmt" / "configs" / name) if p.is_file())
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert tree["train"]["precision"] == "auto", name


def test_probe_is_sane_on_this_machine() -> None:
    hardware.bf16_support.cache_clear()
    rng = torch.get_rng_state()
    support = hardware.bf16_support()
    assert torch.equal(torch.get_rng_state(), rng)  # the probe leaves the global random numbers alone
    assert math.isfinite(support.slowdown) and support.slowdown > 0
    assert set(support.flags) <= set(NATIVE_BF16_FLAGS) and set(support.flags) <= hardware.cpu_flags()
    assert support.onednn in (True, False, None)
    assert not support.native or (support.onednn is not False and support.slowdown < 1)
    assert hardware.bf16_support() is support  # measured once per process


def test_machine_info_names_the_machine() -> None:
    info = hardware.machine_info()
    assert info["cpu"] and info["torch"] == torch.__version__ and info["threads"] == torch.get_num_threads()
    assert set(info["isa"]) <= set(hardware.ISA_FLAGS) and set(info["isa"]) <= hardware.cpu_flags()
    assert info["bf16_native"] == hardware.bf16_support().native
    line = hardware.describe_machine(info)
    assert line.startswith(info["cpu"]) and f"torch {torch.__version__}" in line
    yaml.safe_dump(info)  # plain data, ready for JSON and YAML reports


def load_bench_peers() -> ModuleType:
    return load_script("bench_peers")


def test_bench_peers_runs_ours_in_bf16_only_where_native(cpu_class: pytest.MonkeyPatch) -> None:
    peers = load_bench_peers()
    precisions, note = peers.ours_precisions()
    assert precisions == ["bf16", "fp32"] and "auto: CPU has native bf16" in note
    cpu_class.setattr(hardware, "bf16_support", lambda: EMULATED)
    precisions, note = peers.ours_precisions()
    assert precisions == ["fp32"] and "bf16 runs skipped" in note and "48x slower than fp32" in note
    meta = {"date": "today", "command": "scripts/bench_peers", "machine": hardware.machine_info(),
            "ours_precisions": note}
    args = argparse.Namespace(epoch=False, updates=2, warmup=1, sentences=0)
    report = peers.markdown({"meta": meta}, args)
    assert f"Machine: {hardware.describe_machine(meta['machine'])}" in report and "bf16 runs skipped" in report
