"""Ratios of the A/B rounds (per-row / per-tensor, each pair of neighbouring runs) and the mean errors of act_err.out.

    python summary.py > summary.out
"""
import json
import statistics
from pathlib import Path

HERE = Path(__file__).parent


def pairs(name: str) -> list[tuple[dict, dict]]:
    """(per-row run, per-tensor run) of each neighbouring pair of ``name``'s JSON lines."""
    runs = [json.loads(line) for line in (HERE / name).read_text().splitlines() if line.startswith("{")]
    out = []
    for a, b in zip(runs[::2], runs[1::2]):
        new, old = (a, b) if a["code"].endswith("main") else (b, a)
        assert not old["code"].endswith("main") and new["code"].endswith("main")
        out.append((new, old))
    return out


def describe(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f}, n = {len(values)})"


def ratios(name: str, key: str) -> list[float]:
    return [new[key] / old[key] for new, old in pairs(name)]


def layer_errors() -> tuple[list[float], list[float]]:
    """Each layer's mean relative error with one scale per tensor and as this change quantizes (act_err.out)."""
    rows = [line.split() for line in (HERE / "act_err.out").read_text().splitlines()[1:]]
    return [float(r[2]) for r in rows], [float(r[4]) if r[4] != "nan" else float(r[3]) for r in rows]


def main() -> None:
    for name in ("ab_1thread.out", "ab_2threads.out"):
        runs = pairs(name)
        equal = sorted({(n["alone_equal_64"], o["alone_equal_64"]) for n, o in runs})
        digests = sorted({(n["digest"], o["digest"]) for n, o in runs})
        print(f"{name}: per-row / per-tensor sentences/s, whole test set {describe(ratios(name, 'sentences_per_s'))};"
              f" sorted batches of 21 {describe(ratios(name, 'sorted21_sentences_per_s'))}; lines translated alone as"
              f" in the batch, of 64 (per-row, per-tensor) {equal}; output digests {digests}")
    tensor, change = layer_errors()
    print(f"act_err.out: mean relative error of the {len(tensor)} layers' products, per tensor "
          f"{statistics.mean(tensor):.4f}, per row as this change quantizes {statistics.mean(change):.4f}")


if __name__ == "__main__":
    main()
