"""One source of truth for a pair's data settings: its config file, the expected line counts, and the check
``nmt train`` makes before it trains on prepared data.

``nmt prepare PAIR`` takes ``data.bpe_size``, ``data.max_len`` and ``data.keep_partial`` from the pair's config
(:func:`pair_config_path`) unless overridden on the command line, and writes them into ``meta.json``;
:func:`check_prepared` refuses prepared data whose pair, BPE size or filtering rule differs from a run's config.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nmt.config import DataConfig, load_config
from nmt.data.text import iter_lines
from nmt.errors import NmtError

EXPECTED_LINES = "expected_lines.tsv"  # beside the configs: pair, split, lines, tolerance, counted, origin


def config_dir() -> Path:
    """Where the pairs' configs live: the packaged configs folder (:func:`nmt.presets.config_dir`)."""
    from nmt.presets import config_dir as packaged

    return Path(str(packaged()))  # a real directory for any ordinary install


def pair_config_path(pair: str) -> Path | None:
    """``configs/PAIR.yaml`` when it exists, else None (a pair without a config uses the defaults)."""
    path = config_dir() / f"{pair}.yaml"
    return path if path.is_file() else None


def pair_data_config(pair: str) -> DataConfig:
    """The ``data`` section of the pair's config, or :class:`DataConfig` defaults for a pair without one."""
    path = pair_config_path(pair)
    return load_config(path).data if path is not None else DataConfig(pair=pair)


def filter_name(keep_partial: bool) -> str:
    """The name of a TED filtering rule as written in ``meta.json`` (``nmt.data.corpora.FILTERS``)."""
    return "keep_partial" if keep_partial else "official"


def _prepared_filter(meta: dict[str, Any]) -> str | None:
    """The rule the prepared data was filtered with; None where it does not apply (local files, IWSLT'15)."""
    if "filter" in meta:
        return None if meta["filter"] is None else str(meta["filter"])
    return "keep_partial" if meta.get("source") == "ted" else None  # format 1 stripped NULL markers


def check_prepared(meta: dict[str, Any], data: DataConfig, where: Path) -> None:
    """Refuse prepared data that does not match the run's config.

    Raises:
        NmtError: one line naming the key, the prepared value and the config's value.
    """
    fix = f"rerun `nmt prepare {data.pair} --data-dir {where.parent} --force` or change the config"
    if meta.get("pair") != data.pair:
        raise NmtError(f"{where}/meta.json: prepared pair {meta.get('pair')!r} differs from the config's "
                       f"data.pair {data.pair!r}")
    given = "spm_model" in (meta.get("options") or {})  # pieces of a given model (e.g. a parent's): its own size
    if meta.get("bpe_size") != data.bpe_size and not given:
        raise NmtError(f"{where}/meta.json: prepared with bpe_size {meta.get('bpe_size')} but the config's "
                       f"data.bpe_size is {data.bpe_size}; {fix}")
    rule = _prepared_filter(meta)
    if rule is not None and rule != filter_name(data.keep_partial):
        raise NmtError(f"{where}/meta.json: prepared with the {rule} filter but the config's data.keep_partial "
                       f"is {str(data.keep_partial).lower()} ({filter_name(data.keep_partial)}); {fix}")


@dataclass(frozen=True)
class ExpectedLines:
    """How many pairs a split should have after filtering, within ``tolerance``, and where the figure is from."""

    lines: int
    tolerance: int
    counted: str  # kept: pairs left after filtering | read: pairs read before dropping empty ones
    origin: str


def expected_lines(pair: str, path: Path | None = None) -> dict[str, ExpectedLines]:
    """The rows of ``expected_lines.tsv`` for ``pair`` or its reverse, by split (empty for a pair nobody recorded)."""
    path = path or config_dir() / EXPECTED_LINES
    if not path.is_file():
        return {}
    out: dict[str, ExpectedLines] = {}
    for number, line in enumerate(iter_lines(path), start=1):
        if number == 1 or not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) != 6 or not fields[2].isdigit() or not fields[3].isdigit() or fields[4] not in ("kept", "read"):
            raise NmtError(f"{path} line {number}: expected pair, split, lines, tolerance, kept|read, origin")
        if fields[0] in (pair, "-".join(reversed(pair.split("-")))):  # a pair's counts hold in both directions
            out[fields[1]] = ExpectedLines(int(fields[2]), int(fields[3]), fields[4], fields[5])
    return out


def count_warnings(meta: dict[str, Any], expected: dict[str, ExpectedLines]) -> list[str]:
    """One line per split whose prepared line count is not the recorded one."""
    warnings = []
    for split, want in expected.items():
        info = meta["splits"].get(split)
        if info is None:
            continue
        got = info["lines"] + (sum(info["dropped"].values()) if want.counted == "read" else 0)
        if abs(got - want.lines) > want.tolerance:
            around = f" ± {want.tolerance:,}" if want.tolerance else ""
            warnings.append(f"warning: {meta['pair']} {split} has {got:,} pairs ({want.counted}), expected "
                            f"{want.lines:,}{around} ({want.origin})")
    return warnings


def warn_counts(meta: dict[str, Any]) -> None:
    """Print :func:`count_warnings` for a downloaded corpus to stderr (local files are the user's own)."""
    if meta.get("source") == "dir":
        return
    if meta.get("filter") == "keep_partial":  # the recorded counts are those of the official rule
        return
    for line in count_warnings(meta, expected_lines(meta["pair"])):
        print(line, file=sys.stderr)
