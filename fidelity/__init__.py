"""Differential checks of ``nmt`` against the papers' official code (a development tool, not shipped in the wheel).

Each check module in :data:`CHECK_MODULES` defines ``run(quick: bool = False) -> list[Row]``; :func:`run_all`
gathers their rows and ``scripts/check_reference`` prints them with :func:`format_table`. Modules not present yet
(merged from another branch later) are skipped and reported as such. See ``docs/fidelity.md``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

CHECK_MODULES = ("fidelity.model_checks", "fidelity.schedule_checks", "fidelity.search_checks")


@dataclasses.dataclass(frozen=True)
class Row:
    """One compared quantity.

    Attributes:
        check: what is compared (e.g. ``qknorm``, a system name, or ``schedule``).
        case: the setting (e.g. ``gl-en``).
        quantity: the compared quantity (e.g. ``logits``, ``grad``).
        error: the measured discrepancy (relative error, or a count of differing items); NaN means not finite.
        tolerance: the largest acceptable error.
        note: where the worst discrepancy is, or anything the reader needs.
    """

    check: str
    case: str
    quantity: str
    error: float
    tolerance: float
    note: str = ""

    @property
    def passed(self) -> bool:
        return math.isfinite(self.error) and self.error <= self.tolerance


def run_all(quick: bool = False) -> tuple[list[Row], list[str]]:
    """Rows of every available check module, and the names of the modules that are not available."""
    rows: list[Row] = []
    missing: list[str] = []
    for name in CHECK_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            missing.append(name)
            continue
        rows.extend(module.run(quick=quick))
    return rows, missing


def format_table(rows: list[Row]) -> str:
    """A fixed-width table: check, case, quantity, error, tolerance, PASS/FAIL, note."""
    header = ("check", "case", "quantity", "error", "tol", "result", "note")
    body = [(r.check, r.case, r.quantity, f"{r.error:.2e}", f"{r.tolerance:.0e}", "PASS" if r.passed else "FAIL",
             r.note) for r in rows]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip() for line in [header, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
