"""Download and prepare a language pair: cleaned text, joint SentencePiece BPE, binarized cache, meta.json.

en-vi / vi-en come from IWSLT'15 (Stanford release); any other pair of TED language codes (e.g. gl-en, sk-en)
from the TED talks corpus of Qi et al. 2018; --from-dir reads {train,dev,test}.{src,tgt} files instead. Every
download is checked against its published size and SHA-256 (nmt/data/catalog.py); mirrors come from --url, then
$NMT_MIRROR, then the original hosts. BPE size, max length and the TED filter come from configs/PAIR.yaml unless
given here.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nmt.commands import add_json, add_quiet
from nmt.config import DataConfig


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``nmt prepare``."""
    parser.add_argument("pair", help="language pair src-tgt, e.g. gl-en, en-vi")
    parser.add_argument("--data-dir", default=DataConfig.data_dir,
                        help="root of prepared data; writes DATA_DIR/PAIR/ (default: %(default)s)")
    parser.add_argument("--url", action="append",
                        help="mirror tried first (repeatable): archive URL (TED) or folder of the files (IWSLT'15)")
    parser.add_argument("--from-dir", metavar="DIR", help="use DIR/{train,dev,test}.{src,tgt} instead of downloading")
    parser.add_argument("--from-archive", metavar="FILE",
                        help="ted_talks.tar.gz fetched by other means (checked against its known size and sha256)")
    parser.add_argument("--bpe-size", type=int, help="SentencePiece BPE vocabulary size (default: the pair config's "
                        f"data.bpe_size, else {DataConfig.bpe_size})")
    parser.add_argument("--keep-partial", action="store_true", default=None,
                        help="TED: strip NULL markers and keep the rest of the pair (more data, not the papers' "
                        "split; default: the config's data.keep_partial, false)")
    parser.add_argument("--spm-model", metavar="FILE",
                        help="cut the text into this SentencePiece model's pieces instead of training one: an "
                             "spm.model, or a checkpoint (e.g. the parent model of a fine-tuning run)")
    parser.add_argument("--force", action="store_true", help="redo everything even if the prepared data is current")
    parser.add_argument("--moses", action="store_true",
                        help="Moses-tokenize the text first (off: the papers' corpora are tokenized already)")
    parser.add_argument("--max-len", type=int, metavar="N",
                        help="drop training pairs with more than N pieces on either side (default: the config's "
                        f"data.max_len, else {DataConfig.max_len})")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress output on stderr")
    add_quiet(parser)
    add_json(parser, "the summary (the prepared meta.json)")


def run(args: argparse.Namespace) -> int:
    """Prepare the pair and print the summary."""
    from nmt.checkpoint.files import sentencepiece_bytes
    from nmt.data.prepare import GivenModel, format_summary, prepare

    given = None if args.spm_model is None else GivenModel(sentencepiece_bytes(args.spm_model), args.spm_model)
    meta = prepare(args.pair, args.data_dir, url=args.url, from_dir=args.from_dir, from_archive=args.from_archive,
                   bpe_size=args.bpe_size, max_len=args.max_len, keep_partial=args.keep_partial, force=args.force,
                   moses=args.moses, progress=args.progress and not args.quiet, spm_model=given)
    print(json.dumps(meta, ensure_ascii=False) if args.json else format_summary(meta, Path(args.data_dir) / args.pair))
    return 0
