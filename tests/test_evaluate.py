"""Evaluation wrappers: equal to sacreBLEU's own numbers; tokenized BLEU equal to a multi-bleu.perl computation."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu

from nmt import cli
from nmt.data.tokenize import moses_detokenize
from nmt.errors import NmtError
from nmt.metrics import corpus_scores, paired_bootstrap, tokenized_bleu


def run_cli(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    """``nmt.cli.main`` as the console script runs it."""
    return cli.main(argv)


REFS = [
    "The cat sat on the mat .",
    "There is a cat on the mat .",
    "A quick brown fox jumps over the lazy dog .",
    "I do n't know what you mean .",
    "We have been there , done that .",
]
HYPS = [
    "The cat sat on a mat .",
    "There is one cat on the mat .",
    "The quick brown fox jumped over the lazy dog .",
    "I don 't know what you mean .",
    "We were there , done that .",
]
WORSE = [
    "cat on mat .",
    "a cat is there .",
    "fox jumps dog .",
    "I know .",
    "there done .",
]


def multi_bleu(hyps: list[str], refs: list[str]) -> float:
    """Independent multi-bleu.perl: whitespace tokens, clipped n-gram counts up to 4, no smoothing, one reference."""
    correct, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for hyp, ref in zip(hyps, refs):
        h, r = hyp.split(), ref.split()
        hyp_len, ref_len = hyp_len + len(h), ref_len + len(r)
        for n in range(1, 5):
            h_ngrams = Counter(tuple(h[i : i + n]) for i in range(len(h) - n + 1))
            r_ngrams = Counter(tuple(r[i : i + n]) for i in range(len(r) - n + 1))
            correct[n - 1] += sum(min(c, r_ngrams[g]) for g, c in h_ngrams.items())
            total[n - 1] += max(len(h) - n + 1, 0)
    if min(correct) == 0:
        return 0.0
    log_precision = sum(math.log(c / t) for c, t in zip(correct, total)) / 4
    bp = 1.0 if hyp_len > ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * bp * math.exp(log_precision)


def test_bleu_and_chrf_equal_sacrebleu() -> None:
    scores = corpus_scores(HYPS, REFS)
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert "tok:13a" in scores["bleu_signature"] and "nrefs:1" in scores["bleu_signature"]
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(HYPS, [REFS]).score)
    assert scores["chrf_signature"].startswith("nrefs:1")


def test_tokenized_bleu_matches_multi_bleu() -> None:
    assert round(tokenized_bleu(HYPS, REFS), 2) == round(multi_bleu(HYPS, REFS), 2)
    assert round(tokenized_bleu(WORSE, REFS), 2) == round(multi_bleu(WORSE, REFS), 2)
    assert tokenized_bleu(REFS, REFS) == pytest.approx(100.0)


def test_tokenized_bleu_hand_computed() -> None:
    # 1-4gram matches 5/6, 3/5, 1/4, 0/3 -> 0 without smoothing (multi-bleu.perl); a full match is 100.
    assert tokenized_bleu(["a b c d x y"], ["a b c y d x"]) == 0.0
    # precisions 4/4, 2/3, 1/2, 0/1 ... use a case without zero: hyp == ref minus last token -> bp < 1.
    hyp, ref = "a b c d e", "a b c d e f"
    expected = 100 * math.exp(1 - 6 / 5)  # all precisions 1, brevity penalty exp(1 - r/c)
    assert tokenized_bleu([hyp], [ref]) == pytest.approx(expected, abs=0.005)


def test_corpus_scores_fields() -> None:
    scores = corpus_scores(HYPS, REFS, tokenized=True)
    assert scores["lines"] == 5
    # tokenized input: sacreBLEU and chrF score the Moses-detokenized text, as sacreBLEU expects
    detok_h, detok_r = moses_detokenize(HYPS, "en"), moses_detokenize(REFS, "en")
    assert scores["bleu"] == pytest.approx(sacrebleu.corpus_bleu(detok_h, [detok_r]).score)
    assert scores["chrf"] == pytest.approx(sacrebleu.corpus_chrf(detok_h, [detok_r]).score)
    assert corpus_scores(HYPS, REFS)["bleu"] == pytest.approx(sacrebleu.corpus_bleu(HYPS, [REFS]).score)
    assert scores["tokenized_bleu"] == pytest.approx(tokenized_bleu(HYPS, REFS))
    assert "tok:none" in scores["tokenized_bleu_signature"]
    assert len(scores["bleu_detail"]["precisions"]) == 4
    assert "tokenized_bleu" not in corpus_scores(HYPS, REFS)


def test_mismatched_line_counts_name_both_counts() -> None:
    with pytest.raises(NmtError, match="4 lines.*5"):
        corpus_scores(HYPS[:4], REFS)


def test_paired_bootstrap_prefers_the_better_system() -> None:
    result = paired_bootstrap(WORSE * 4, HYPS * 4, REFS * 4, n_samples=200)
    assert result["system"]["score"] > result["baseline"]["score"]
    assert 0.0 < result["p_value"] < 0.05
    nearly_same = HYPS * 4
    nearly_same[0] = "The cat sat on the mat ."
    close = paired_bootstrap(HYPS * 4, nearly_same, REFS * 4, n_samples=200)
    assert close["p_value"] > 0.05


def write(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_cli_json_and_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              monkeypatch: pytest.MonkeyPatch) -> None:
    hyp, ref, other = write(tmp_path / "h", HYPS), write(tmp_path / "r", REFS), write(tmp_path / "o", WORSE)
    code = run_cli(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tokenized", "--compare", str(other),
                    "--bootstrap-samples", "100", "--json"], monkeypatch)
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    detok = sacrebleu.corpus_bleu(moses_detokenize(HYPS, "en"), [moses_detokenize(REFS, "en")]).score
    assert result["bleu"] == pytest.approx(detok)
    assert result["tokenized_bleu"] == pytest.approx(multi_bleu(HYPS, REFS), abs=0.005)
    assert 0.0 < result["compare"]["bootstrap"]["p_value"] <= 1.0
    assert run_cli(["evaluate", "--hyp", str(hyp), "--ref", str(ref), "--tokenized"], monkeypatch) == 0
    text = capsys.readouterr().out
    assert "BLEU = " in text and "chrF = " in text and "tokenized BLEU = " in text


def test_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    hyp, ref = write(tmp_path / "h", HYPS[:3]), write(tmp_path / "r", REFS)
    assert run_cli(["evaluate", "--hyp", str(hyp), "--ref", str(ref)], monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "3 lines" in err and "5" in err
    assert run_cli(["evaluate", "--hyp", str(tmp_path / "missing"), "--ref", str(ref)], monkeypatch) == 2
    assert "missing" in capsys.readouterr().err
    (tmp_path / "bad").write_bytes(b"ok\n\xff\xfe\n")
    assert run_cli(["evaluate", "--hyp", str(tmp_path / "bad"), "--ref", str(ref)], monkeypatch) == 2
    assert "line 2" in capsys.readouterr().err
