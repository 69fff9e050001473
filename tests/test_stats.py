"""The paired verdict: "better" / "worse" only when the interval and the exact sign test agree."""

import re
from pathlib import Path

import pytest

from tfgrpo_dspy.stats import compare_paired, sign_test

ROOT = Path(__file__).resolve().parent.parent


def paired(won: int, lost: int, n: int = 100) -> tuple[list[float], list[float]]:
    """``n`` examples; ``won`` right only in the second run, ``lost`` right only in the first, the rest tied."""
    base = [0.0] * won + [1.0] * lost + [0.5] * (n - won - lost)
    other = [1.0] * won + [0.0] * lost + [0.5] * (n - won - lost)
    return base, other


@pytest.mark.parametrize(("won", "lost"), [(4, 0), (5, 0), (0, 5)])
def test_a_bootstrap_interval_that_excludes_zero_is_not_enough(won, lost):
    comparison = compare_paired(*paired(won, lost))
    assert comparison.interval_excludes_zero  # the percentile bootstrap alone would call it a change
    assert comparison.p_value == pytest.approx(sign_test(won, lost)) and comparison.p_value > 0.05
    assert not comparison.significant
    assert comparison.verdict().startswith("no measurable change")
    assert comparison.to_dict()["significant"] is False


def test_a_change_both_tests_see_is_named():
    better = compare_paired(*paired(10, 0))
    assert better.p_value == pytest.approx(2 * 0.5**10) and better.significant
    assert better.verdict().startswith("better: +10.0 points")
    worse = compare_paired(*paired(1, 12))
    assert worse.significant and worse.verdict().startswith("worse:")


def test_the_declared_scipy_has_the_bootstrap_rng_argument():
    """compare_paired calls scipy.stats.bootstrap(..., rng=...), which scipy added in 1.15."""
    assert "rng=" in (ROOT / "tfgrpo_dspy" / "stats.py").read_text()
    (bound,) = re.findall(r'"scipy>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert tuple(int(part) for part in bound.split(".")) >= (1, 15), bound
