"""The files ``nmt prepare`` downloads: where they are published, their known sizes and SHA-256, and mirrors.

Every figure below is copied from a public record, cited next to it; none was computed here (this machine cannot
reach the hosts). A download is accepted only when its size and hash match (:func:`nmt.data.download.fetch`), so
a mirror that serves something else (an HTML error page, a truncated or different file) is refused and the next
one is tried. Mirrors are tried in this order: ``--url``, then every entry of :data:`MIRROR_ENV` (a directory or
base URL laid out like the download cache: ``BASE/ted_talks.tar.gz``, ``BASE/iwslt15.en-vi/train.en``), then the
defaults listed here.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MIRROR_ENV = "NMT_MIRROR"  # whitespace-separated directories or base URLs, tried before the default hosts


@dataclass(frozen=True)
class Expected:
    """What a published file must be: its size in bytes, its SHA-256 and where both figures come from."""

    size: int
    sha256: str
    origin: str

    def describe(self) -> str:
        return f"{self.size:,} bytes, sha256 {self.sha256}"


_TFDS_TED_MULTI = "TensorFlow Datasets tensorflow_datasets/url_checksums/ted_multi_translate.txt"
_TFDS_TED_HRLR = "TensorFlow Datasets tensorflow_datasets/datasets/ted_hrlr_translate/checksums.tsv"
_HF_EN_VI = "Hugging Face datasets datasets/mt_eng_vietnamese/dataset_infos.json (download_checksums)"

TED = "ted_talks.tar.gz"  # Qi et al. 2018: all_talks_{train,dev,test}.tsv, 60 languages
TED_HRLR = "qi18naacl-dataset.tar.gz"  # the papers' exact per-pair splits: datasets/{az,be,gl,pt,ru,tr}_to_en/...
IWSLT15 = "iwslt15.en-vi"  # folder of the Stanford release: train, tst2012 (dev), tst2013 (test)

# cache name (relative to DATA_DIR/downloads) -> the published file.
KNOWN: dict[str, Expected] = {
    TED: Expected(352_222_045, "03457b9ebc6d60839f1a48c5a03c940266aff78b81fcda4c6d9e2a5a7fb670ae", _TFDS_TED_MULTI),
    TED_HRLR: Expected(131_005_909, "216a86c3df4d4f522856fe9b920ff5be6b394d769cc88974ae8f9f5546953bbc",
                       _TFDS_TED_HRLR),
    f"{IWSLT15}/train.en": Expected(13_603_614, "c26dfeed74b6bf3752f5ca552f2412456f0de153f7c804df8717931fb3a5c78a",
                                    _HF_EN_VI),
    f"{IWSLT15}/train.vi": Expected(18_074_646, "707206edf2dc0280273952c7b70544ea8a1363aa69aaeb9d70514b888dc3067d",
                                    _HF_EN_VI),
    f"{IWSLT15}/tst2012.en": Expected(140_250, "b8fbcd0d4199d41276421d1f7228298df67dd9e2c5c134c2ee8cdf3ec27801e2",
                                      _HF_EN_VI),
    f"{IWSLT15}/tst2012.vi": Expected(188_396, "01004078b3f36b0c46e81b65fc6851230b3c823405c76d1d82ef3b786b512ff0",
                                      _HF_EN_VI),
    f"{IWSLT15}/tst2013.en": Expected(132_264, "3860ce60bc5b85d96cc2d3d580cf1bc9d62440e939c1b964676d3607c4e8f1df",
                                      _HF_EN_VI),
    f"{IWSLT15}/tst2013.vi": Expected(183_855, "29af16842808da2812b8fd4d47fc05d082ba870e60ab7755090ad04b380994cd",
                                      _HF_EN_VI),
}

# cache name -> default URLs, in order. The Wayback Machine copies are the ones other projects point to since the
# original host began answering with an HTML page (reported 2026-02); they are only tried, never trusted: the
# checksum above decides.
_WAYBACK = "https://web.archive.org/web/20240301220426if_/"
DEFAULT_URLS: dict[str, tuple[str, ...]] = {
    TED: ("http://phontron.com/data/ted_talks.tar.gz", f"{_WAYBACK}http://phontron.com/data/ted_talks.tar.gz"),
    TED_HRLR: ("http://www.phontron.com/data/qi18naacl-dataset.tar.gz",
               f"{_WAYBACK}http://www.phontron.com/data/qi18naacl-dataset.tar.gz"),
    **{name: (f"https://nlp.stanford.edu/projects/nmt/data/{name}",) for name in KNOWN if name.startswith(IWSLT15)},
}


def env_mirrors() -> list[str]:
    """The entries of ``$NMT_MIRROR`` (whitespace-separated), in order."""
    return os.environ.get(MIRROR_ENV, "").split()


def join(base: str, name: str) -> str:
    """``base`` (a URL or a local directory) joined with a cache name such as ``iwslt15.en-vi/train.en``."""
    return f"{base.rstrip('/')}/{name}" if "://" in base else os.path.join(base, *name.split("/"))


def candidate_urls(name: str, explicit: list[str] | None = None) -> list[str]:
    """Where to look for ``name``: ``explicit`` URLs (``--url``), then ``$NMT_MIRROR`` mirrors, then the defaults."""
    urls = list(explicit or [])
    urls += [join(base, name) for base in env_mirrors()]
    urls += [u for u in DEFAULT_URLS.get(name, ()) if u not in urls]
    return urls
