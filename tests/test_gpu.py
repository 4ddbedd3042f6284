"""CUDA-only behaviour (marked ``gpu``, skipped without a GPU; ``scripts/gpu_check`` runs them): fp16 with a gradient
scaler learns, bf16 and fp32 agree, SDPA's flash and memory-efficient kernels equal the explicit path, cached beam
search equals uncached, and a training step never waits for the device."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor
from torch.nn.attention import SDPBackend, sdpa_kernel

from nmt.config import config_from_dict
from nmt.data.batching import collate
from nmt.machine.runtime import Runtime
from nmt.model.transformer import Transformer
from nmt.modules.attention import ATTENTIONS, MultiHeadAttention
from nmt.search import beam_search
from nmt.training.loop import Trainer, train
from tests.synthetic import prepare_synthetic, tiny_config
from tests.test_attention import _key_mask
from tests.test_model import _batch, _model

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]
CUDA = torch.device("cuda", 0)
D_KERNEL = 64


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return prepare_synthetic(tmp_path_factory.mktemp("gpu"))


def records(save_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (save_dir / "metrics.jsonl").read_text().splitlines()]


def test_fp16_with_scaler_learns(data_dir: Path, tmp_path: Path) -> None:
    tree = tiny_config(data_dir, tmp_path / "run", device="cuda", precision="fp16", max_steps=300, eval_every=100)
    train(config_from_dict(tree))
    evals = records(tmp_path / "run")
    assert evals[-1]["dev_loss"] < evals[0]["dev_loss"] - 0.3
    assert evals[-1]["bleu"] > 40.0


def test_bf16_and_fp32_losses_agree_over_50_steps(data_dir: Path, tmp_path: Path) -> None:
    losses = {}
    for precision in ("bf16", "fp32"):
        tree = tiny_config(data_dir, tmp_path / precision, device="cuda", precision=precision, max_steps=50,
                           eval_every=50)
        train(config_from_dict(tree))
        losses[precision] = records(tmp_path / precision)[-1]["dev_loss"]
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=0.05)


@pytest.mark.parametrize("name", sorted(ATTENTIONS))
@pytest.mark.parametrize("backend", [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION])
def test_sdpa_kernels_equal_explicit_path(name: str, backend: SDPBackend) -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(D_KERNEL, 4, ATTENTIONS[name](D_KERNEL // 4, 20.0))  # heads of 16: the kernels need % 8
    with torch.no_grad():
        for p in attn.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    attn = attn.to(CUDA).eval()
    x, memory = torch.randn(3, 9, D_KERNEL, device=CUDA), torch.randn(3, 7, D_KERNEL, device=CUDA)
    cases: list[tuple[Any, Tensor | None, bool]] = [(attn.project_self(x), None, True)]
    if backend == SDPBackend.EFFICIENT_ATTENTION:  # flash takes no explicit mask
        mask = _key_mask([7, 4, 1], 7).to(CUDA)
        cases += [(attn.project_self(x), _key_mask([9, 3, 5], 9).to(CUDA), False),
                  ((attn.project_queries(x), *attn.project_memory(memory)), mask, False)]
    for (q, k, v), mask, causal in cases:
        q, k, v = (t.detach() for t in (q, k, v))
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            with sdpa_kernel([backend]):
                fused = attn.attend(q, k, v, mask, causal)  # raises if the kernel cannot take these inputs
            explicit, _ = attn.attend_with_weights(q, k, v, mask, causal)
        torch.testing.assert_close(fused.float(), explicit.float(), atol=3e-2, rtol=3e-2)


@dataclass
class FullState:
    """Decoder state of :class:`Uncached`: the sources and every token fed so far."""

    src: Tensor
    prefix: Tensor

    def select(self, index: Tensor) -> FullState:
        return FullState(self.src[index], self.prefix[index])


class Uncached:
    """A model decoded without any cache: each step runs the full forward pass over the whole prefix."""

    def __init__(self, model: Transformer) -> None:
        self.model = model

    def start(self, src: Tensor) -> FullState:
        return FullState(src, src.new_empty(src.size(0), 0))

    def step(self, prev: Tensor, state: FullState) -> tuple[Tensor, FullState]:
        prefix = torch.cat([state.prefix, prev[:, None]], 1)
        return self.model(state.src, prefix)[:, -1].float().log_softmax(-1), FullState(state.src, prefix)


@pytest.mark.parametrize("variant", ["qknorm", "prenorm_fixnorm_scalenorm", "qk_rmsnorm"])
def test_cached_beam_search_equals_uncached_on_cuda(variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)  # same arithmetic on both paths
    model = _model(variant).to(CUDA).eval()
    torch.manual_seed(2)
    src = _batch([7, 4, 9, 2, 6]).to(CUDA)
    with torch.no_grad():
        cached = beam_search(model, src, beam=4, lenpen=0.6, max_len_b=12, nbest=4)
        uncached = beam_search(Uncached(model), src, beam=4, lenpen=0.6, max_len_b=12, nbest=4)
    for a, b in zip(cached, uncached, strict=True):
        assert [h.tokens for h in a] == [h.tokens for h in b]
        assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-4)


@pytest.mark.parametrize("precision", ["bf16", "fp16", "fp32"])
def test_training_step_never_waits_for_the_device(data_dir: Path, tmp_path: Path, precision: str) -> None:
    cfg = config_from_dict(tiny_config(data_dir, tmp_path / "run", device="cuda", precision=precision))
    trainer = Trainer(cfg, Runtime(CUDA, precision))
    batches = [collate(trainer.epoch_data(1), ix).pin_memory().to(CUDA) for ix in trainer.epoch_batches(1)[:4]]
    trainer.train_step(batches[:1])  # first step: lazy initialisation (scaler, optimizer state) may synchronise
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for batch in batches[1:]:
            trainer.train_step([batch])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    settled = trainer.settle()
    assert settled is not None and trainer.progress.step == 4 and settled["loss"] > 0
