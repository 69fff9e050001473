"""The update phase of a step: the proposed lessons become edits of a candidate library.

Near-duplicate lessons are clustered across the step's groups (a cluster needs ``min_support``
examples); the clusters and the lessons named misleading go to the update call in context-sized chunks
(``update_chunk_chars``); an edit naming lesson ids that do not exist keeps the known ones or becomes an
add (`retarget`), then the edits pass the lesson guard and the delete rules (a delete needs a
proposal naming the lesson misleading or a harmful record, at most ``max_deletes`` per step) and are
applied to a copy of the library, each written lesson recording the examples it came from. Decisions
are logged per chunk and reused on resume.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tfgrpo_dspy.library.edits import APPLY_ORDER, ApplyReport, EditOp
from tfgrpo_dspy.library.library import ExperienceLibrary
from tfgrpo_dspy.reflection.lessons import LessonCluster, cluster_lessons, similarity
from tfgrpo_dspy.reflection.records import Proposal, UpdateDecision
from tfgrpo_dspy.run.context import RunContext


class UpdatePhase:
    """Runs the update of one step on a `RunContext`."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx

    def run(self, step: int, proposals: Sequence[Proposal], library: ExperienceLibrary
            ) -> tuple[ExperienceLibrary, list[ApplyReport], list[UpdateDecision], list[LessonCluster]]:
        """Decide and apply the step's edits on a copy of ``library``: the candidate library."""
        clusters = [c for c in self.clusters(proposals) if c.support >= self.ctx.settings.min_support]
        misleading = sorted({i for p in proposals for i in p.misleading})
        candidate = library.copy()
        if not clusters and not misleading:
            return candidate, [], [], clusters
        reports, decisions = [], []
        deletable = set(misleading) | {i for c in clusters for i in self._replaced(c, proposals)}
        deletes_left = self.ctx.settings.max_deletes
        for number, chunk in enumerate(self.chunks(clusters, misleading), start=1):
            key = f"chunk{number:02d}"
            recorded = self.ctx.log.load(step, "updates", key)
            if recorded is not None and not recorded.get("error"):
                decision = UpdateDecision.from_dict(recorded)
                self.ctx.ledger.add("reflection", decision.usage)
            else:
                self.ctx.ledger.check_budget()
                decision = self._decide(chunk, candidate, deletable, deletes_left, proposals)
                self.ctx.log.save(step, "updates", key, decision.to_dict())
                self.ctx.ledger.record("reflection", decision.usage, decision.error, "update")
            deletes_left -= sum(op.op == "delete" for op in decision.ops)
            reports.append(apply_with_sources(candidate, decision.ops, clusters, step))
            decisions.append(decision)
        return candidate, reports, decisions, clusters

    @staticmethod
    def clusters(proposals: Sequence[Proposal]) -> list[LessonCluster]:
        return cluster_lessons([(lesson.text, lesson.source) for p in proposals for lesson in p.lessons])

    @staticmethod
    def _replaced(cluster: LessonCluster, proposals: Sequence[Proposal]) -> list[int]:
        return [lesson.replaces for p in proposals for lesson in p.lessons
                if lesson.replaces is not None and lesson.text in cluster.members]

    def chunks(self, clusters: Sequence[LessonCluster], misleading: Sequence[int]) -> list[str]:
        """The proposals as lines, cut into chunks of at most ``update_chunk_chars`` characters."""
        lines = [f"- lesson supported by {c.support} example(s): {c.text}" for c in clusters]
        lines += [f"- E{i} misled the worse attempts of at least one group" for i in misleading]
        chunks, current = [], ""
        for line in lines:
            if current and len(current) + len(line) + 1 > self.ctx.settings.update_chunk_chars:
                chunks.append(current)
                current = ""
            current = f"{current}\n{line}" if current else line
        return [*chunks, current] if current else chunks

    def _decide(self, chunk: str, library: ExperienceLibrary, deletable: set[int], deletes_left: int,
                proposals: Sequence[Proposal]) -> UpdateDecision:
        ops, error, usage = self.ctx.reflector.decide(chunk, library)
        if error is not None:
            return UpdateDecision(error=error, usage=usage)
        materials = [self.ctx.material(p.example_index) for p in proposals if p.lessons]
        kept: list[EditOp] = []
        refused: list[dict[str, Any]] = []
        harmful = {e.id for e in library if e.harmful > e.helpful}
        for op in (retarget(op, library) for op in ops):
            if op.op == "keep":
                continue
            if op.op == "delete":
                if op.id not in deletable | harmful:
                    refused.append({**op.model_dump(exclude_none=True), "refused_because": "no proposal named this "
                                    "lesson misleading and its record is not harmful"})
                    continue
                if deletes_left <= 0:
                    refused.append({**op.model_dump(exclude_none=True), "refused_because": "max_deletes reached"})
                    continue
                deletes_left -= 1
                kept.append(op)
                continue
            verdict = self.ctx.guard.check(op.text or "", materials)
            usage = usage + verdict.usage
            if verdict.text is None:
                refused.append({**op.model_dump(exclude_none=True), "refused_because": verdict.reason})
            else:
                kept.append(op.model_copy(update={"text": verdict.text}))
        return UpdateDecision(ops=kept, refused=refused, usage=usage)


def retarget(op: EditOp, library: ExperienceLibrary) -> EditOp:
    """``op`` with the lesson ids that are not in ``library`` taken out, so its text is not lost.

    A small update model numbers the step's proposals itself and then merges "E1-E7" that do not exist;
    refusing the whole op would drop lessons the guard passed. So a merge keeps its known ids (a merge of
    one is a modify), and a modify or merge that names no known lesson becomes an add; the op's reason
    records the change. The selection gate still decides whether the text earns its place.
    """
    if op.op not in ("modify", "merge") or not op.text:
        return op
    known = [t for t in op.targets if t in library]
    if len(known) == len(op.targets):
        return op
    unknown = ", ".join(f"E{t}" for t in op.targets if t not in library)
    note = f"{op.op} named {unknown}, not in the library"
    reason = f"{op.reason} ({note})" if op.reason else note
    if len(known) >= 2:
        return op.model_copy(update={"ids": known, "reason": reason})
    if len(known) == 1:
        return EditOp(op="modify", id=known[0], text=op.text, reason=reason)
    return EditOp(op="add", text=op.text, reason=reason)


def apply_with_sources(library: ExperienceLibrary, ops: Sequence[EditOp], clusters: Sequence[LessonCluster],
                       step: int) -> ApplyReport:
    """Apply ``ops`` (removals first, as `ExperienceLibrary.apply` does) recording on each written lesson the
    examples of the proposal cluster its text is closest to."""
    entries = []
    for op in sorted(ops, key=lambda o: APPLY_ORDER[o.op]):
        closest = max(clusters, key=lambda c: similarity(c.text, op.text or ""), default=None)
        sources = closest.sources if closest is not None and op.text else ()
        entries += library.apply([op], step=step, sources=sources).entries
    return ApplyReport(tuple(entries))
