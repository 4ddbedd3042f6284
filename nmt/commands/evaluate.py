"""Score a system output against references: detokenized sacreBLEU (13a) with its signature and chrF.

With --tokenized (Moses-tokenized files, as the papers' corpora are) also the papers' tokenized BLEU
(multi-bleu.perl) on the files as given, while sacreBLEU and chrF score their Moses-detokenized form. With
--compare, sacreBLEU's paired bootstrap test between --hyp (the baseline) and the compared system, with its p-value.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from nmt.metrics import check_lengths, corpus_scores, paired_bootstrap
from nmt.stdio import input_lines, one_stdin


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hyp", required=True, help="system output, one sentence per line (UTF-8); - is stdin")
    parser.add_argument("--ref", required=True, help="reference, one sentence per line (UTF-8); - is stdin")
    parser.add_argument("--tokenized", action="store_true",
                        help="also report tokenized BLEU (multi-bleu.perl) for Moses-tokenized text")
    parser.add_argument("--lang", default=None,
                        help="language of the text, for Moses detokenization with --tokenized (default: the --ref "
                             "file's extension when it is a language code, else en)")
    parser.add_argument("--compare", metavar="FILE2",
                        help="second system: paired bootstrap test of BLEU against --hyp on the same --ref "
                             "(- is stdin)")
    parser.add_argument("--bootstrap-samples", type=int, default=1000, help="resamples for --compare")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")


def run(args: argparse.Namespace) -> int:
    one_stdin(hyp=args.hyp, ref=args.ref, compare=args.compare)
    hyps = list(input_lines(args.hyp))
    refs = list(input_lines(args.ref))
    check_lengths(hyps, refs, args.hyp, args.ref)
    suffix = Path(args.ref).suffix.lstrip(".")
    lang = args.lang or (suffix if suffix.isalpha() and 2 <= len(suffix) <= 3 else "en")
    result = {"hyp": args.hyp, "ref": args.ref,
              **corpus_scores(hyps, refs, tokenized=args.tokenized, lang=lang)}
    if args.compare:
        other = list(input_lines(args.compare))
        check_lengths(other, refs, args.compare, args.ref)
        result["compare"] = {"file": args.compare, **corpus_scores(other, refs, tokenized=args.tokenized, lang=lang),
                             "bootstrap": paired_bootstrap(hyps, other, refs, tokenized=args.tokenized,
                                                           n_samples=args.bootstrap_samples)}
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_text(result)
    return 0


def _print_text(result: dict[str, Any]) -> None:
    def block(name: str, scores: dict[str, Any]) -> None:
        print(f"{name}: BLEU = {scores['bleu']:.2f}  ({scores['bleu_signature']})")
        print(f"{name}: chrF = {scores['chrf']:.2f}  ({scores['chrf_signature']})")
        if "tokenized_bleu" in scores:
            print(f"{name}: tokenized BLEU = {scores['tokenized_bleu']:.2f}  ({scores['tokenized_bleu_signature']})")

    block(result["hyp"], result)
    compare = result.get("compare")
    if compare:
        block(compare["file"], compare)
        boot = compare["bootstrap"]
        base, system = boot["baseline"], boot["system"]
        print(f"paired bootstrap ({boot['metric']}, {boot['n_samples']} resamples): "
              f"{result['hyp']} {base['score']:.2f} ({base['mean']:.2f} ± {base['ci']:.2f}) vs "
              f"{compare['file']} {system['score']:.2f} ({system['mean']:.2f} ± {system['ci']:.2f}), "
              f"p = {boot['p_value']:.4f}")
