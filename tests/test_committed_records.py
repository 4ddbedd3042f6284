"""The run records committed under ``docs/results/*/runs/`` (issue 27): each reads as a record whose hypotheses are
the ones it recorded, and its tokenized test BLEU recomputes from those hypotheses and the test references wherever
the corpus it was scored on sits beside the checkout (``../shared/data/PAIR/test.TGT``, as on CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nmt.experiments.records import RECORD, check_references, read_record
from nmt.metrics import tokenized_bleu

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = sorted(path.parent for path in (ROOT / "docs" / "results").glob(f"*/runs/*/{RECORD}"))
SHARED_DATA = ROOT.parent / "shared" / "data"


def test_there_are_committed_records() -> None:
    assert FOLDERS, "no run records under docs/results/*/runs/"


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: f"{folder.parents[1].name}/{folder.name}")
def test_a_committed_record_recomputes_from_its_hypotheses(folder: Path) -> None:
    record = read_record(folder)  # an error if test.hyp is not what the record says it is
    assert record["name"] == folder.name
    assert len(record["hypotheses"]) == record["test_sentences"]
    target = record["pair"].split("-")[1]
    references_path = SHARED_DATA / record["pair"] / f"test.{target}"
    if not references_path.is_file():
        pytest.skip(f"no {references_path} beside the checkout")
    references = references_path.read_text(encoding="utf-8").split("\n")[:-1]
    check_references(record, references, references_path)  # an error if these are other references
    score = tokenized_bleu(record["hypotheses"], references)
    assert score == pytest.approx(record["test"]["test_bleu_tokenized"], abs=1e-9)
