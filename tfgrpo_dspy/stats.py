"""Paired comparisons of two programs on the same examples: the only kind of claim this project makes.

Both programs are scored on the same examples with the same decoding; the comparison reports the
difference of means with a paired bootstrap interval, the wins and losses (examples one gets right
and the other wrong), and the exact two-sided sign test on them (McNemar's exact test when scores
are 0/1). A change is called "better" or "worse" only when both agree: the interval excludes zero AND the
sign test gives p < 0.05. The percentile bootstrap alone is too eager on few discordant examples (4 won /
0 lost on 100 gives the interval [+1, +8] but p = 0.125), so otherwise the verdict is "no measurable change".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairedComparison:
    """``other`` against ``base`` on the same ``n`` examples (scores in [0, 1])."""

    n: int
    base_mean: float
    other_mean: float
    wins: int  # examples where other scored higher
    losses: int  # examples where base scored higher
    ci_low: float  # bootstrap interval of other_mean - base_mean
    ci_high: float
    p_value: float  # exact two-sided sign test on wins vs losses
    confidence: float = 0.95
    alpha: float = 0.05  # the sign test's level for a verdict other than "no measurable change"

    @property
    def delta(self) -> float:
        return self.other_mean - self.base_mean

    @property
    def net_wins(self) -> int:
        return self.wins - self.losses

    @property
    def interval_excludes_zero(self) -> bool:
        return self.ci_low > 0 or self.ci_high < 0

    @property
    def significant(self) -> bool:
        """Both tests agree: the interval excludes zero and the exact sign test is below ``alpha``."""
        return self.interval_excludes_zero and self.p_value < self.alpha

    def verdict(self, unit: str = "points") -> str:
        """One honest line: the change with its interval, or "no measurable change"."""
        interval = f"{100 * self.delta:+.1f} {unit}, {100 * self.confidence:.0f}% CI [{100 * self.ci_low:+.1f}, " \
                   f"{100 * self.ci_high:+.1f}], {self.wins} won / {self.losses} lost, sign test p={self.p_value:.3f}"
        if not self.significant:
            return f"no measurable change ({interval})"
        return f"{'better' if self.delta > 0 else 'worse'}: {interval}"

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta": self.delta, "net_wins": self.net_wins, "significant": self.significant}


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided p-value of ``wins`` against ``losses`` under a fair coin (1.0 with no discordant pair)."""
    if wins + losses == 0:
        return 1.0
    return float(stats.binomtest(wins, wins + losses, 0.5).pvalue)


def one_sided_sign_test(wins: int, losses: int) -> float:
    """P(at least ``wins`` of ``wins + losses`` fair coin flips): how surprising the wins are by chance."""
    if wins + losses == 0:
        return 1.0
    return float(stats.binomtest(wins, wins + losses, 0.5, alternative="greater").pvalue)


def compare_paired(
    base: Sequence[float],
    other: Sequence[float],
    *,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedComparison:
    """Compare per-example scores of two programs on the same examples, in the same order."""
    if len(base) != len(other):
        raise ValueError(f"paired scores need the same examples: got {len(base)} and {len(other)} scores")
    if not base:
        raise ValueError("paired scores need at least one example")
    left, right = np.asarray(base, dtype=float), np.asarray(other, dtype=float)
    diffs = right - left
    if np.all(diffs == diffs[0]):  # no spread: the bootstrap is degenerate, the interval is the point
        low = high = float(diffs[0])
    else:
        result = stats.bootstrap((diffs,), np.mean, confidence_level=confidence, n_resamples=resamples,
                                 method="percentile", rng=np.random.default_rng(seed))
        low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    wins, losses = int(np.sum(diffs > 0)), int(np.sum(diffs < 0))
    return PairedComparison(n=len(diffs), base_mean=float(left.mean()), other_mean=float(right.mean()), wins=wins,
                            losses=losses, ci_low=low, ci_high=high, p_value=sign_test(wins, losses),
                            confidence=confidence)


def flip_rate(first: Sequence[Any], second: Sequence[Any]) -> float:
    """Share of positions where two runs of the same evaluation disagree."""
    if len(first) != len(second) or not first:
        raise ValueError("flip_rate needs two non-empty runs of the same length")
    return sum(a != b for a, b in zip(first, second, strict=True)) / len(first)
