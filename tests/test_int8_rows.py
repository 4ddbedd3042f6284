"""int8 decoding quantizes activations row by row: a row's output, and so a sentence's translation, does not depend on
the batch it is decoded in (torch's per-tensor dynamic quantization made it depend on every other row)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import torch
from torch import Tensor, nn

from nmt.inference.int8 import NONNEGATIVE_INPUTS, is_quantized, quantize_for_decoding
from nmt.inference.int8_linear import RowInt8Linear
from nmt.inference.translator import Translator
from nmt.vocab import SPECIALS
from tests.test_quantize import copy_task_model

ENGINES = [engine for engine in ("x86", "onednn") if engine in torch.backends.quantized.supported_engines]


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = request.param
    yield request.param
    torch.backends.quantized.engine = before


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Translator:
    return copy_task_model(tmp_path_factory.mktemp("int8-rows"))


def _rows(nonnegative: bool, seed: int = 0) -> Tensor:
    """24 rows of 48 whose magnitudes span five orders (the last row zeros, like padding)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(24, 48, generator=generator) * torch.logspace(-3, 2, 24)[:, None]
    x[-1] = 0
    return x.relu() if nonnegative else x


def _layer(nonnegative: bool) -> tuple[nn.Linear, RowInt8Linear]:
    torch.manual_seed(1)
    linear = nn.Linear(48, 40)
    return linear, RowInt8Linear(linear.weight, linear.bias, nonnegative=nonnegative)


@pytest.mark.parametrize("nonnegative", [False, True])
def test_a_row_gives_the_same_output_alone_and_in_any_batch(engine: str, nonnegative: bool) -> None:
    linear, layer = _layer(nonnegative)
    x = _rows(nonnegative)
    with torch.no_grad():
        full = layer(x)
        assert all(torch.equal(layer(x[i: i + 1]), full[i: i + 1]) for i in range(x.size(0)))
        assert torch.equal(layer(x.flip(0)), full.flip(0))
        assert torch.equal(layer(x.view(4, 6, 48)), full.view(4, 6, 40))  # (B, T, D) inputs keep their shape
        # torch's per-tensor dynamic quantization, on the same rows, does depend on the batch
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dynamic = torch.ao.quantization.quantize_dynamic(nn.Sequential(linear), {"0"}, dtype=torch.qint8)[0]
        whole = dynamic(x)
        assert not all(torch.equal(dynamic(x[i: i + 1]), whole[i: i + 1]) for i in range(x.size(0)))


@pytest.mark.parametrize("nonnegative", [False, True])
def test_every_row_is_quantized_on_its_own_range(engine: str, nonnegative: bool) -> None:
    linear, layer = _layer(nonnegative)
    x = _rows(nonnegative, seed=2)
    with torch.no_grad():
        exact, approx = linear(x), layer(x)
        assert torch.equal(approx[-1], linear.bias)  # a zero row gives the bias
        # without the bias, each row's error is a small fraction of its own size, the smallest rows' included
        # (one scale for the whole tensor leaves rows 1e5 times smaller than the largest on its zero level)
        product = exact - linear.bias
        error = (approx - exact).norm(dim=1)[:-1] / product.norm(dim=1)[:-1]
        assert float(error.max()) < 0.05, error


def test_the_sentinel_row_pins_the_scale_the_fixed_scale_kernel_takes() -> None:
    if "x86" not in ENGINES:
        pytest.skip("no fbgemm engine in this build")
    before = torch.backends.quantized.engine
    torch.backends.quantized.engine = "x86"
    try:
        for nonnegative in (False, True):
            _, layer = _layer(nonnegative)
            assert layer._fixed_scale
            x = _rows(nonnegative, seed=3)
            with torch.no_grad():
                fixed = layer(x)
                layer._fixed_scale = False  # oneDNN's route: the kernel takes the range from the sentinel row
                pinned = layer(x)
            assert torch.equal(fixed, pinned)
    finally:
        torch.backends.quantized.engine = before


def test_only_the_layers_after_a_relu_take_unsigned_rows(trained: Translator) -> None:
    model = quantize_for_decoding(trained.model)  # type: ignore[arg-type]
    layers = {name: module for name, module in model.named_modules() if is_quantized(module)}
    assert layers and {name for name, m in layers.items() if m.nonnegative} == {
        name for name in layers if name.endswith(NONNEGATIVE_INPUTS)} != set()


def test_a_sentence_translates_the_same_alone_and_in_a_batch(trained: Translator) -> None:
    int8 = Translator(trained.model, trained.config, trained.tokenizer, torch.device("cpu"), precision="int8")
    generator = torch.Generator().manual_seed(7)
    vocab = trained.tokenizer.vocab_size
    src = [torch.randint(SPECIALS, vocab, (int(n),), generator=generator).tolist()
           for n in torch.randint(3, 9, (16,), generator=generator)]
    batch = int8.translate_ids(src, beam=3)
    alone = [int8.translate_ids([s], beam=3)[0] for s in src]
    assert [h[0].tokens for h in batch] == [h[0].tokens for h in alone]
    assert [h[0].score for h in batch] == pytest.approx([h[0].score for h in alone], abs=1e-4)
