"""Medians and ranges of sampler_ab.out and sampler_ab_rotated.out: sentences/s by sampler, and each round's ratio of
a sampler's rate to the rate without one (python summary.py > summary.out)."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
LINE = re.compile(r"round (\d+) (serve 64 clients|translate --workers 1)\s+(\S+)\s+([\d.]+) sentences/s"
                  r".*?(?:client ([\d.]+))?  peak")


def rates() -> dict[tuple[str, str], dict[tuple[str, int], float]]:
    """(side, sampler) -> {(file, round): sentences/s}; client CPU seconds under (side + ' client cpu', sampler)."""
    table: dict[tuple[str, str], dict[tuple[str, int], float]] = defaultdict(dict)
    for name in ("sampler_ab.out", "sampler_ab_rotated.out"):
        for line in (HERE / name).read_text(encoding="utf-8").splitlines():
            match = LINE.match(line)
            if match:
                number, side, sampler, rate, client = match.groups()
                table[side, sampler][name, int(number)] = float(rate)
                if client is not None:
                    table[side + " client cpu", sampler][name, int(number)] = float(client)
    return table


def spread(values: list[float], digits: int) -> str:
    return (f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f}, "
            f"n = {len(values)})")


def main() -> None:
    table = rates()
    for side in ("serve 64 clients", "translate --workers 1", "serve 64 clients client cpu"):
        unit = "CPU s of the client process" if side.endswith("cpu") else "sentences/s"
        for sampler in ("none", "walk-every-sample", "tree-cached"):
            runs = table[side, sampler]
            line = f"{side:28s} {sampler:18s} {unit} {spread(list(runs.values()), 1)}"
            if sampler != "none" and not side.endswith("cpu"):
                ratios = [runs[key] / table[side, "none"][key] for key in runs]
                line += f"; of no sampler, same round: {spread(ratios, 2)}"
            print(line)


if __name__ == "__main__":
    main()
