"""Schedule, decay/stop rules and beam search against the papers' official code (``fidelity/``), plus the paper
configs' precision. The reference tests are skipped when ``../shared/reference`` (or ``$NMT_REFERENCE_DIR``) is
missing; ``scripts/check_reference`` runs the full-size versions."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from fidelity import Row
from fidelity.official import Official, load, reference_dir
from nmt.config import load_config

ROOT = Path(__file__).resolve().parents[1]
PAPER_CONFIGS = ("gl-en", "sk-en", "en-vi", "en-he", "ar-en")

reference = pytest.mark.skipif(reference_dir() is None, reason="official code (../shared/reference) not available")


@functools.cache
def controller() -> Official:
    return load("qknorm", ("all_constants", "utils", "configurations", "controller"))


def failures(rows: list[Row]) -> list[str]:
    return [f"{r.case} {r.quantity}: {r.error} > {r.tolerance} ({r.note})" for r in rows if not r.passed]


@pytest.mark.parametrize("pair", PAPER_CONFIGS)
def test_paper_configs_train_and_decode_in_fp32(pair: str) -> None:
    cfg = load_config(ROOT / "configs" / f"{pair}.yaml")
    assert (cfg.train.precision, cfg.decode.precision) == ("fp32", "fp32")
    assert cfg.decode.search == "official"


@reference
@pytest.mark.reference
@pytest.mark.parametrize("pair", PAPER_CONFIGS)
def test_paper_config_schedule_fields_equal_the_official(pair: str) -> None:
    from fidelity.schedule_checks import config_rows

    rows = config_rows(controller(), pair)
    assert rows and not failures(rows)


@reference
@pytest.mark.reference
def test_rates_decays_and_stop_equal_the_official_controller() -> None:
    # gl-en: every rate up to 3 x warmup, then three scripted BLEU sequences (zeros and ties in warmup, plateaus,
    # declines) run to the stop: decay decisions, stop step and every rate equal to the official Controller.train().
    from fidelity.schedule_checks import SEQUENCES, schedule_rows

    rows = schedule_rows(controller(), "gl-en", quick=False)
    assert len(rows) == 1 + 3 * len(SEQUENCES)
    assert not failures(rows)


@reference
@pytest.mark.reference
def test_beam_search_equals_the_official_decoder() -> None:
    # A briefly trained official model converted into ours: 200 sentences, beam 4, alpha 0.6, identical 1-best and
    # n-best lists; an untrained one whose hypotheses all run to the length limit; one that favours EOS (step 0).
    from fidelity.search_checks import EOS_PRONE, QUICK, Setting, compare

    official = load("qknorm")
    rows = (compare(QUICK, official, "trained") + compare(Setting(steps=0, sentences=20), official, "untrained")
            + compare(EOS_PRONE, official, "EOS-prone"))
    assert not failures(rows)
    assert rows[0].case.startswith("trained: 200 sentences") and rows[0].error == 0.0
