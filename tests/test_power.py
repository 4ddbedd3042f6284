"""The minimum detectable difference of a seed study: Student's t quantiles against tabulated values, Welch's degrees
of freedom and the formula by hand, and its behaviour with more seeds and more spread."""

from __future__ import annotations

import math
import random

import pytest

from nmt.experiments.power import detectable_difference, incomplete_beta, t_cdf, t_quantile, welch_df


@pytest.mark.parametrize(("p", "df", "table"), [
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 5, 2.571), (0.975, 10, 2.228), (0.975, 30, 2.042),
    (0.8, 5, 0.920), (0.8, 10, 0.879), (0.8, 30, 0.854), (0.995, 4, 4.604), (0.975, 1e6, 1.960),
])
def test_t_quantiles_match_the_tables(p: float, df: float, table: float) -> None:
    assert t_quantile(p, df) == pytest.approx(table, abs=1e-3)
    assert t_quantile(1 - p, df) == pytest.approx(-table, abs=1e-3)


def test_incomplete_beta_known_values() -> None:
    assert incomplete_beta(1, 1, 0.3) == pytest.approx(0.3)  # uniform
    assert incomplete_beta(2, 3, 0.4) == pytest.approx(0.5248)  # 1 - sum_{k<2} C(4,k) .4^k .6^(4-k)
    assert incomplete_beta(0.5, 0.5, 0.5) == pytest.approx(0.5)
    assert t_cdf(0.0, 7) == pytest.approx(0.5)
    assert t_cdf(1.0, 1) == pytest.approx(0.75)  # Cauchy


def test_detectable_difference_by_hand() -> None:
    base, system = [10.0, 10.5, 9.5, 10.2, 9.8, 10.0], [11.0, 10.0, 10.6, 10.4, 9.9, 10.7]
    result = detectable_difference(base, system)
    assert result is not None

    def var(v: list[float]) -> float:
        m = sum(v) / len(v)
        return sum((x - m) ** 2 for x in v) / (len(v) - 1)

    se = math.sqrt(var(base) / 6 + var(system) / 6)
    df = (var(base) / 6 + var(system) / 6) ** 2 / ((var(base) / 6) ** 2 / 5 + (var(system) / 6) ** 2 / 5)
    assert result["standard_error"] == pytest.approx(se) and result["df"] == pytest.approx(df)
    assert result["difference"] == pytest.approx((t_quantile(0.975, df) + t_quantile(0.8, df)) * se)
    assert welch_df(1.0, 6, 1.0, 6) == pytest.approx(10.0)  # equal spreads and sizes: n1 + n2 - 2


def test_more_seeds_detect_less_and_too_few_give_none() -> None:
    rng = random.Random(3)
    three = [rng.gauss(10, 0.5) for _ in range(3)]
    many = three + [rng.gauss(10, 0.5) for _ in range(9)]
    other = [rng.gauss(10, 0.5) for _ in range(12)]
    small, large = detectable_difference(three, other[:3]), detectable_difference(many, other)
    assert small is not None and large is not None and large["difference"] < small["difference"]
    assert detectable_difference([10.0], [10.0, 11.0]) is None


def test_at_the_detectable_difference_the_t_test_finds_it_about_four_times_in_five() -> None:
    rng = random.Random(0)
    n, sd, trials = 8, 1.0, 2000
    # with the true spread known, the detectable difference of the formula; then simulate studies at that shift
    se = math.sqrt(2 * sd * sd / n)
    shift = (t_quantile(0.975, 2 * n - 2) + t_quantile(0.8, 2 * n - 2)) * se
    found = 0
    for _ in range(trials):
        a = [rng.gauss(0, sd) for _ in range(n)]
        b = [rng.gauss(shift, sd) for _ in range(n)]
        ma, mb = sum(a) / n, sum(b) / n
        va = sum((x - ma) ** 2 for x in a) / (n - 1)
        vb = sum((x - mb) ** 2 for x in b) / (n - 1)
        t = (mb - ma) / math.sqrt(va / n + vb / n)
        df = welch_df(math.sqrt(va), n, math.sqrt(vb), n)
        found += 2 * (1 - t_cdf(abs(t), df)) < 0.05
    assert 0.75 < found / trials < 0.85
