"""Upper bounds on the calls a compile would make, from its settings and the sizes of its example sets.

`estimate_run` spends nothing: it counts, for the worst case, what each phase of each step may call
(`tfgrpo_dspy.run.phases`), so a user sees the plan before paying for it (`TrainingFreeGRPO.estimate`).
"""

from __future__ import annotations

import math

from tfgrpo_dspy.reflection.induction import MIN_SET
from tfgrpo_dspy.run.results import RunEstimate
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings


def estimate_run(settings: TrainingFreeGRPOSettings, trainset: list, selection: list) -> RunEstimate:
    """The most calls of each kind a run of ``settings`` on these training and selection examples makes."""
    s = settings
    batch = min(s.batch_size or len(trainset), len(trainset))
    steps = s.epochs * math.ceil(len(trainset) / batch)
    rollouts = s.epochs * len(trainset) * s.group_size
    groups = s.epochs * len(trainset) if s.extraction else 0  # groups that may reach the per-group reflection
    proposals = groups * s.max_proposals
    # Every failed example is in at most one induction set of at least induction.MIN_SET.
    induction_sets = s.epochs * (len(trainset) // MIN_SET) if s.induction else 0
    inductions = induction_sets * s.num_candidates
    phrases = induction_sets if s.induction_phrases else 0  # one per set, written by code: no LM call
    # A proposal line holds one lesson of at most max_words words; a group may also name a misleading lesson.
    line_chars = 80 + 15 * s.max_words
    verified = s.verify and s.ground_truth
    update_calls = 0 if verified else steps * math.ceil(batch * (s.max_proposals + 1) * line_chars /
                                                        s.update_chunk_chars)
    # Each proposal and each update text may need one generalize and one shorten rewrite.
    rewrites = 2 * (proposals + inductions + phrases) + 2 * s.max_experiences * update_calls
    # Per step: the current library on every training example, then each candidate on its sources and a batch.
    candidates = proposals + inductions + phrases
    verification = (steps * len(trainset) + candidates * (s.induction_examples + s.verify_batch)
                    if verified else 0)
    # Per step: the candidate, single edits with the library they are tried on, the library kept.
    selection_runs = len(selection) * (1 + steps * (2 + 2 * s.gate_budget)) if selection else 0
    return RunEstimate(
        steps=steps, rollouts=rollouts, policy_calls_min=rollouts,
        max_summary_calls=groups * s.group_size if s.summarize else 0, max_extraction_calls=groups,
        max_update_calls=update_calls, max_rewrite_calls=rewrites, max_selection_calls=selection_runs,
        max_induction_calls=inductions, max_verification_calls=verification)
