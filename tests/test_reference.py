"""Differential checks against the papers' official code (issue 17); they run whenever ../shared/reference exists.

Each system is compared at both paper shapes in float32 and float64 (narrow models, a few seconds per system); the
full-width table is ``scripts/check_reference``.
"""

from __future__ import annotations

import pytest
import torch

from fidelity import Row, format_table, run_all
from fidelity.official import reference_dir

pytestmark = [
    pytest.mark.reference,
    pytest.mark.skipif(reference_dir() is None, reason="official code not found (../shared/reference)"),
]


@pytest.mark.parametrize("system", ["postnorm_layernorm", "prenorm_layernorm", "prenorm_fixnorm_layernorm",
                                    "prenorm_fixnorm_scalenorm", "qknorm"])
def test_official_and_ours_agree(system: str) -> None:
    from fidelity import model_checks

    setting = model_checks.Setting(d_model=64, d_ff=64, vocab=48)
    rows: list[Row] = []
    for shape in model_checks.SHAPES:
        rows.append(model_checks.init_row(system, shape, setting))
        for dtype in (torch.float32, torch.float64):
            rows += model_checks.compare(system, shape, setting, dtype)
    quantities = {r.quantity for r in rows}
    assert {"init (std z-score)", "encoder output", "logits", "loss", "grad", "adam step", "adam update (own grads)",
            "sdpa logits", "cached log-probs"} <= quantities
    failed = [r for r in rows if not r.passed]
    assert not failed, "\n" + format_table(failed)


def test_a_wrong_conversion_is_caught() -> None:
    """The check can fail: swapping two layers' feed-forward weights in our copy breaks every downstream row."""
    from fidelity import model_checks
    from fidelity.convert import convert_model

    setting = model_checks.Setting(d_model=64, d_ff=64, vocab=48)

    def swapped(official: torch.nn.Module, ours: torch.nn.Module, logit_mask: torch.Tensor | None = None) -> None:
        convert_model(official, ours, logit_mask)
        with torch.no_grad():
            a, b = ours.encoder.layers[0].ffn.up.weight, ours.encoder.layers[1].ffn.up.weight
            a_copy = a.clone()
            a.copy_(b)
            b.copy_(a_copy)

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(model_checks, "convert_model", swapped)
    try:
        rows = model_checks.compare("qknorm", "gl-en", setting)
    finally:
        monkeypatch.undo()
    by_quantity = {r.quantity: r for r in rows}
    assert not by_quantity["encoder output"].passed and not by_quantity["grad"].passed


def test_a_wrong_initialization_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from fidelity import model_checks
    from nmt.model.transformer import INITS, build_model

    def xavier(*args: object, **kwargs: object) -> torch.nn.Module:
        model = build_model(*args, **kwargs)  # type: ignore[arg-type]
        INITS["xavier"](model)
        return model

    monkeypatch.setattr(model_checks, "build_model", xavier)
    setting = model_checks.Setting(d_model=64, d_ff=64, vocab=48)
    assert not model_checks.init_row("prenorm_layernorm", "gl-en", setting).passed


def test_run_all_reports_missing_modules_and_formats_rows() -> None:
    rows, missing = [Row("qknorm", "gl-en", "loss", 2e-6, 1e-5), Row("qknorm", "gl-en", "grad", 3e-5, 1e-5)], []
    table = format_table(rows)
    assert "PASS" in table.splitlines()[2] and "FAIL" in table.splitlines()[3]
    assert not Row("x", "y", "z", float("nan"), 1.0).passed
    assert callable(run_all) and not missing
