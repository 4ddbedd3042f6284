"""The figures of this folder's README from its raw files: the A/B speed ratios (3b5aad1's time / the change's, each
round's neighbouring pair) and the profiles' rows for the output projection, the zero fills and the copies.

    python summary.py > summary.out
"""
import re
import statistics
from pathlib import Path

HERE = Path(__file__).parent
CLEAN_FROM = {"ab_sorted21.out": 1, "ab_b64.out": 3}  # ab_b64's rounds 1-2 shared core 0 with another job (README)


def speedups(name: str) -> list[float]:
    """3b5aad1's seconds / the change's, per round from ``CLEAN_FROM[name]`` on."""
    rounds: dict[int, dict[str, float]] = {}
    for line in (HERE / name).read_text().splitlines():
        fields = line.split()
        rounds.setdefault(int(fields[1]), {})[fields[2]] = float(fields[5])
    return [r["base"] / r["main"] for k, r in sorted(rounds.items()) if k >= CLEAN_FROM[name]]


def describe(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, n = {len(values)})"


TIME = re.compile(r"([\d.]+)(ms|us|s)\b")
SCALE = {"s": 1000.0, "ms": 1.0, "us": 0.001}  # to milliseconds


def rows(name: str, grouped: bool) -> list[str]:
    """The rows of the profile's first table (by op) or its second (by op and input shapes)."""
    tables = (HERE / name).read_text().split("Self CPU time total")
    return [line for line in tables[1 if grouped else 0].splitlines() if "aten::" in line]


def profile_row(name: str, op: str, shapes: str = "") -> tuple[float, float, int] | None:
    """(self ms, average us a call, calls) of ``op`` (with ``shapes``: of its row for those input shapes), or
    None when it is not among the table's rows."""
    for line in rows(name, bool(shapes)):
        if line.split()[0] == op and shapes in line:
            times = [float(v) * SCALE[u] for v, u in TIME.findall(line)]
            calls = int(line.split()[6])
            return times[0], times[2] * 1000.0, calls
    return None


def smallest_listed(name: str) -> float:
    """The self time (ms) of the last row of the by-op table: an op not listed took less."""
    return [float(v) * SCALE[u] for v, u in TIME.findall(rows(name, False)[-1])][0]


def budget_rates(name: str) -> dict[int, list[float]]:
    """Sentences/s of each ``decode.max_tokens`` over the rounds of ``budget_{1,2}t.out``."""
    rates: dict[int, list[float]] = {}
    for line in (HERE / name).read_text().splitlines():
        match = re.match(r"threads \d+ round \d+ max_tokens +(\d+) +([\d.]+) sentences/s", line)
        if match:
            rates.setdefault(int(match[1]), []).append(float(match[2]))
    return rates


def step_ms(name: str) -> list[float]:
    """The ms/step of each round of ``overhead.py``'s output ``name``."""
    return [float(m) for m in re.findall(r"([\d.]+) ms/step", (HERE / name).read_text())]


def main() -> None:
    for name in CLEAN_FROM:
        print(f"{name}: speed of the change against 3b5aad1 {describe(speedups(name))}")
    before = profile_row("ops_before.out", "aten::addmm", "[[3900], [84, 256]")
    after = profile_row("ops_after.out", "aten::addmm", "[[3904], [84, 256]")
    assert before is not None and after is not None
    print(f"output projection at 84 rows: {before[1]:.0f} us a call over 3,900 columns ({before[2]} calls), "
          f"{after[1]:.0f} us over 3,904 ({after[2]} calls): {before[1] / after[1]:.2f}x")
    for op in ("aten::fill_", "aten::copy_"):
        found = [profile_row(f, op) for f in ("ops_before.out", "ops_after.out")]
        said = [f"{r[0]:.0f} ms" if r else f"under {smallest_listed(f):.0f} ms (not listed)"
                for r, f in zip(found, ("ops_before.out", "ops_after.out"))]
        print(f"{op} self time: {said[0]} before, {said[1]} after")
    total = [float(re.search(r"Self CPU time total: ([\d.]+)s", (HERE / f).read_text())[1])
             for f in ("ops_before.out", "ops_after.out")]
    print(f"profiled self CPU time: {total[0]:.2f} s before, {total[1]:.2f} s after")
    tiny, real = step_ms("overhead_tiny.out"), step_ms("overhead_real.out")
    print(f"a step at 84 rows, 4 rounds: tiny widths {min(tiny):.1f}-{max(tiny):.1f} ms, the preset's widths "
          f"{min(real):.1f}-{max(real):.1f} ms")
    for name in ("budget_2t.out", "budget_1t.out"):
        rates = budget_rates(name)
        print(f"{name}: sentences/s by decode.max_tokens, median (range, n): " + "; ".join(
            f"{budget} {statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f}, {len(v)})" for budget, v in rates.items()))


if __name__ == "__main__":
    main()
