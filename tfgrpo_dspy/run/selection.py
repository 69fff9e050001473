"""The selection set: libraries earn their place by measured effect, not by being proposed.

Every library considered (the initial one, each step's candidate, single edits tried alone) runs the
same program with the same placement and decoding on the same selection examples, so two libraries
are compared pairwise, example by example. A candidate replaces the current library only when its
net wins (examples it gets right that the current library gets wrong, minus the reverse) reach
``gate_margin``: on a small model any change of the prompt moves answers both ways, so "not worse by
one example" is noise, not evidence. With ``gate_shift`` it must also beat its shift by that margin:
answering its most common answer to every selection example, scored from the labels with no model (a
library that moves most answers to one label can beat a weak current library and still teach nothing;
on a dev run one answered one queue to 87 of 100 held-out tickets and tied "always that queue").
Scores are kept in the run log by library fingerprint, so a resumed run never rescores a library.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dspy
import tqdm

from tfgrpo_dspy.inference.injection import with_experiences
from tfgrpo_dspy.inference.outputs import answer_text, final_outputs, jsonable
from tfgrpo_dspy.inference.rollouts import Rollout, run_rollout
from tfgrpo_dspy.inference.scoring import score_prediction
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.parallel import map_in_threads
from tfgrpo_dspy.reflection.formatting import SUCCESS
from tfgrpo_dspy.run.accounting import Ledger
from tfgrpo_dspy.run.runlog import RunLog
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings
from tfgrpo_dspy.stats import PairedComparison, compare_paired, one_sided_sign_test
from tfgrpo_dspy.usage import Usage

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LibraryScore:
    """One library's per-example scores on the selection set."""

    fingerprint: str
    scores: tuple[float, ...]
    usage: Usage
    outputs: tuple[dict[str, Any] | None, ...] | None = None  # final outputs; None in logs written before

    @property
    def mean(self) -> float:
        return sum(self.scores) / len(self.scores) if self.scores else 0.0


@dataclass(frozen=True)
class GateDecision:
    """A candidate against the current library: the paired comparison and whether it passes."""

    comparison: PairedComparison
    passed: bool
    reason: str


def library_fingerprint(library: ExperienceLibrary, settings: TrainingFreeGRPOSettings, temperature: float) -> str:
    """Same lessons, routes, placement and decoding -> same fingerprint (counters and audit do not matter)."""
    s = settings
    key = f"{library.render()}\n{s.placement}\n{s.top_k}\n{s.predictors}\n{temperature}"
    key += "".join(f"\n{r.input}\t{r.lessons}" for r in library.routes)  # nothing without routes: keys stay
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:16]  # an LM may write lone surrogates


class Selector:
    """Scores libraries on the selection examples and decides whether a candidate replaces the current one."""

    def __init__(
        self,
        program: dspy.Module,
        examples: Sequence[dspy.Example],
        metric: Callable,
        settings: TrainingFreeGRPOSettings,
        log: RunLog,
        ledger: Ledger,
    ):
        self.program = program
        self.examples = list(examples)
        self.metric = metric
        self.settings = settings
        self.log = log
        self.ledger = ledger
        self._scores: dict[str, LibraryScore] = {}

    def fingerprint(self, library: ExperienceLibrary) -> str:
        return library_fingerprint(library, self.settings, self.settings.selection_temperature)

    def score(self, library: ExperienceLibrary, label: str) -> LibraryScore:
        fingerprint = self.fingerprint(library)
        if fingerprint in self._scores:
            return self._scores[fingerprint]
        recorded = self.log.load_library_record("selection", fingerprint)
        if recorded is not None and len(recorded.get("scores", [])) == len(self.examples):
            outputs = recorded.get("outputs")
            result = LibraryScore(fingerprint, tuple(recorded["scores"]), Usage.from_dict(recorded.get("usage")),
                                  None if outputs is None else tuple(outputs))
            self.ledger.add("selection", result.usage)  # paid for in an earlier session
        else:
            result = self._run(library, fingerprint, label)
            # The whole library (ids included) too, so a candidate can be rebuilt exactly, e.g. to check the
            # gate's decision on held-out rows.
            self.log.save_library_record("selection", fingerprint, {"label": label, "library": library.texts,
                                                  "library_file": library.to_dict(include_audit=False),
                                                  "scores": list(result.scores), "usage": result.usage.to_dict(),
                                                  "outputs": list(result.outputs or ())})
        self._scores[fingerprint] = result
        logger.info("selection: %s scores %.3f on %d examples", label, result.mean, len(self.examples))
        return result

    def _run(self, library: ExperienceLibrary, fingerprint: str, label: str) -> LibraryScore:
        s = self.settings
        program = with_experiences(self.program, library, s.predictors, placement=s.placement, top_k=s.top_k)
        salt = int(fingerprint[:8], 16) * 10**4  # rollout ids unique per library when decoding samples

        def run(index: int) -> Rollout:
            return run_rollout(program, self.examples[index], example_index=index, sample_index=0,
                               rollout_id=salt + index, temperature=s.selection_temperature, metric=self.metric,
                               failure_score=s.failure_score, timeout=s.call_timeout)

        scores: dict[int, float] = {}
        outputs: dict[int, dict[str, Any] | None] = {}
        usage = Usage()
        with tqdm.tqdm(total=len(self.examples), desc=f"selection: {label}", disable=not s.progress,
                       leave=False) as bar:
            for index, rollout in map_in_threads(run, range(len(self.examples)), s.num_threads):
                bar.update(1)
                scores[index] = rollout.score if rollout.scored else s.failure_score
                outputs[index] = jsonable(final_outputs(rollout.outputs))
                usage = usage + rollout.usage
                self.ledger.record("selection", rollout.usage, rollout.error or rollout.metric_error, "selection")
        order = range(len(self.examples))
        return LibraryScore(fingerprint, tuple(scores[i] for i in order), usage, tuple(outputs[i] for i in order))

    def gate(self, current: LibraryScore, candidate: LibraryScore) -> GateDecision:
        comparison = compare_paired(current.scores, candidate.scores)
        margin = self.settings.gate_margin
        p = one_sided_sign_test(comparison.wins, comparison.losses)
        passed = comparison.net_wins >= margin
        reason = (f"{comparison.wins} won / {comparison.losses} lost on {comparison.n} selection examples "
                  f"(net {comparison.net_wins:+d}, needs {margin:+d}; one-sided sign test p={p:.3f})")
        shift = self.shift(candidate) if passed and self.settings.gate_shift else None
        if shift is not None:
            target, shift_scores = shift
            against = compare_paired(shift_scores, candidate.scores)
            passed = against.net_wins >= margin
            reason += (f"; against its shift (always {target!r}, right on {sum(v >= SUCCESS for v in shift_scores)}): "
                       f"{against.wins} won / {against.losses} lost (net {against.net_wins:+d}, needs {margin:+d})")
        return GateDecision(comparison, passed, reason)

    def shift(self, score: LibraryScore) -> tuple[str, list[float]] | None:
        """The library's most common answer on the selection set and the scores of answering it to every
        example; None without recorded outputs."""
        if not score.outputs or any(o is None for o in score.outputs):
            return None
        target = Counter(answer_text(o) for o in score.outputs).most_common(1)[0][0]
        outputs = next(o for o in score.outputs if answer_text(o) == target)
        return target, [score_prediction(self.metric, e, dspy.Prediction(**outputs), self.settings.failure_score).value
                        for e in self.examples]
