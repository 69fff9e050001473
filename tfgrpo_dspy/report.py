"""A self-contained HTML report of one run, read from its log directory (layout: `tfgrpo_dspy.runlog`).

One file to mail or archive: the charts are a PNG inside the page, the CSS is inline, nothing is fetched. Text
from the run is escaped (an LM wrote most of it). The files that say what the run did (manifest, state, step
records, library) are required; rollout, proposal and selection records only enrich the page, damage skipped.
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tfgrpo_dspy.library import ExperienceLibrary, read_json

ROLES = ("policy", "reflection", "selection")
KEY_SETTINGS = ("group_size", "epochs", "batch_size", "temperature", "max_experiences", "max_words", "summarize",
                "gate", "gate_margin", "gate_budget", "val_fraction", "top_k", "placement", "seed")
INPUT_CHARS = 120
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}img{max-width:100%}ul{margin:4px 0}
table{border-collapse:collapse;margin:8px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;
text-align:left;vertical-align:top}th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}
.good{color:#17702b}.bad{color:#b3261e}.row{display:flex;gap:24px;align-items:flex-start}.meta{color:#555}
.note{background:#fff8e1;padding:6px 10px;border-left:4px solid #f0b400}.lesson p{margin:4px 0}
.lesson{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}"""


class RunReportError(ValueError):
    """The directory is not a run, or a file the report needs is damaged; the message names the file."""


@dataclass(frozen=True)
class Run:
    """What the report shows, read once from the run directory."""

    root: Path
    manifest: dict[str, Any]
    state: dict[str, Any]
    steps: list[dict[str, Any]]
    library: ExperienceLibrary | None
    library_origin: str  # which library the report shows: the one compile returned, or the last step's
    inputs: dict[int, dict[str, Any]]  # training example index -> its inputs, from the rollout records
    proposed_by: dict[str, set[int]]  # lesson text -> the examples whose groups proposed it
    initial_score: float | None  # the starting library's selection score, when one was recorded


# -- reading the run -----------------------------------------------------------------------------------------
def _read_object(path: Path) -> dict[str, Any]:
    """A required JSON object; any damage is one RunReportError line naming the file."""
    try:
        data = read_json(path)
    except (OSError, ValueError) as exc:
        raise RunReportError(str(exc) if isinstance(exc, ValueError) else f"{path} is unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise RunReportError(f"{path} is not a JSON object; it is damaged")
    return data


def _optional_records(paths: Iterable[Path]) -> Iterable[dict[str, Any]]:
    """The readable JSON objects among ``paths``: these records only enrich the page, so damage is skipped."""
    for path in sorted(paths):
        try:
            data = read_json(path)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict):
            yield data


def load_run(run_dir: str | Path) -> Run:
    """Read everything the report shows; a missing manifest means the directory is not a run."""
    root = Path(run_dir)
    if not (root / "manifest.json").is_file():
        raise RunReportError(f"{root} is not a training run: {root / 'manifest.json'} is missing")
    manifest = _read_object(root / "manifest.json")
    state = _read_object(root / "state.json") if (root / "state.json").exists() else {}
    steps = []
    for step in range(1, state["completed_steps"] + 1 if isinstance(state.get("completed_steps"), int) else 1):
        path = root / "steps" / f"{step:04d}" / "step.json"
        if not path.exists():
            raise RunReportError(f"{path} is missing, yet state.json says step {step} is complete")
        steps.append(_read_object(path))
    library, origin = _final_library(root)
    return Run(root, manifest, state, steps, library, origin, _example_inputs(root), _proposal_sources(root),
               _initial_score(root))


def _final_library(root: Path) -> tuple[ExperienceLibrary | None, str]:
    """The library compile returned (shipped.json) when the run finished, else the last step's library.json."""
    shipped, last = root / "shipped.json", root / "library.json"
    try:
        if shipped.exists():
            record = _read_object(shipped)
            step = record.get("best_step")
            origin = ("shipped.json, the library compile returned: "
                      + ("the starting library" if not step else f"the library after step {step}"))
            return ExperienceLibrary.from_dict(record.get("library"), origin=str(shipped)), origin
        if last.exists():
            origin = "library.json, the library after the last completed step (the run has not finished)"
            return ExperienceLibrary.from_dict(_read_object(last), origin=str(last)), origin
    except ValueError as exc:
        raise RunReportError(str(exc)) from None
    return None, ""


def _example_inputs(root: Path) -> dict[int, dict[str, Any]]:
    """One rollout per training example is enough to know its inputs."""
    first: dict[str, Path] = {}
    for path in sorted(root.glob("steps/*/rollouts/ex*_s*.json")):
        first.setdefault(path.name.split("_")[0], path)
    return {r["example_index"]: r.get("inputs") or {} for r in _optional_records(first.values())
            if isinstance(r.get("example_index"), int)}


def _proposal_sources(root: Path) -> dict[str, set[int]]:
    """Which examples proposed each lesson text: the provenance of a lesson whose own ``sources`` are empty."""
    sources: dict[str, set[int]] = defaultdict(set)
    for record in _optional_records(root.glob("steps/*/proposals/ex*.json")):
        for lesson in record.get("lessons") or []:
            if isinstance(lesson, dict) and isinstance(lesson.get("source"), int):
                sources[str(lesson.get("text"))].add(lesson["source"])
    return sources


def _initial_score(root: Path) -> float | None:
    """The starting library is scored before step 1, so its score lives only in the selection records."""
    for record in _optional_records(root.glob("selection/*.json")):
        scores = record.get("scores")
        if record.get("label") == "initial" and isinstance(scores, list) and scores:
            return sum(scores) / len(scores)
    return None


def _tokens(step: dict[str, Any], role: str) -> int:
    return int((step.get(f"{role}_usage") or {}).get("total_tokens", 0))


def _audit(run: Run) -> list[dict[str, Any]]:
    """The kept library's audit log plus the edits each step's library refused (a rejected step's refusals are
    not in the kept library's log). Applied entries of a step record name the candidate's ids, so only the
    library's own applied entries are used."""
    entries = [e.to_dict() for e in run.library.audit_log] if run.library else []
    seen = {(e.get("step"), e.get("op"), e.get("detail"), e.get("text")) for e in entries}
    for step in run.steps:
        for entry in (e for e in step.get("audit") or [] if isinstance(e, dict)):
            key = (entry.get("step"), entry.get("op"), entry.get("detail"), entry.get("text"))
            if entry.get("status") == "refused" and key not in seen:
                seen.add(key)
                entries.append(entry)
    return sorted((e for e in entries if e.get("op") != "keep"), key=lambda e: e.get("step") or 0)


def _mentions(entry: dict[str, Any], lesson_id: int) -> bool:
    ids = {entry.get("id"), entry.get("result_id"), *(entry.get("ids") or [])}
    return lesson_id in ids or re.search(rf"\bE{lesson_id}\b", str(entry.get("detail", ""))) is not None


# -- charts -------------------------------------------------------------------------------------------------
def draw_charts(run: Run) -> bytes:
    """The four charts as one PNG. Matplotlib's object API (no pyplot) keeps no global state and needs no display;
    it is imported here so that importing this module stays cheap."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(12, 8), dpi=100)
    axes = figure.subplots(2, 2).ravel()
    figure.subplots_adjust(left=0.06, right=0.94, bottom=0.07, top=0.95, wspace=0.3, hspace=0.3)  # fast and fixed
    xs = list(range(1, len(run.steps) + 1))  # steps/NNNN is the NNNN-th record
    titles = ("Mean reward per step", "Selection score per candidate", "Library size and tokens per step",
              "Tokens by role per step")
    for axis, title in zip(axes, titles, strict=True):
        axis.set(title=title, xlabel="step", xticks=xs)
    if not xs:
        for axis in axes:
            _placeholder(axis, "no completed steps")
    else:
        rewards = [s.get("mean_reward", 0) for s in run.steps]
        axes[0].plot(xs, rewards, marker="o")
        axes[0].set(ylim=_score_limits(rewards), ylabel="mean reward")
        if run.manifest.get("selection_size"):
            _plot_candidates(axes[1], run)
        else:
            _placeholder(axes[1], "no selection set")
        _plot_library(axes[2], xs, run.steps)
        _plot_roles(axes[3], xs, run.steps)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _placeholder(axis: Any, message: str) -> None:
    """An empty chart says why it is empty, with no axis ticks that would suggest data."""
    axis.text(0.5, 0.5, message, ha="center", va="center", transform=axis.transAxes)
    axis.set(xticks=[], yticks=[])


def _plot_candidates(axis: Any, run: Run) -> None:
    """A step's candidates side by side around their step, green when accepted; the initial score as a line."""
    points = [(step + 0.12 * (i - (len(cs) - 1) / 2), c["score"], bool(c.get("accepted")))
              for step, cs in enumerate((s.get("candidates") or [] for s in run.steps), start=1)
              for i, c in enumerate(cs) if isinstance(c.get("score"), (int, float))]
    for accepted, color, label in ((True, "tab:green", "accepted"), (False, "tab:red", "rejected")):
        chosen = [(x, y) for x, y, a in points if a == accepted]
        axis.scatter([x for x, _ in chosen], [y for _, y in chosen], color=color, label=label)
    baseline = [] if run.initial_score is None else [run.initial_score]
    for score in baseline:
        axis.axhline(score, color="gray", linestyle="--", label="initial library")
    axis.set(ylim=_score_limits([y for _, y, _ in points] + baseline), ylabel="mean selection score")
    axis.legend(loc="best")


def _score_limits(values: list[float]) -> tuple[float, float]:
    """Scores usually lie in [0, 1]: show that whole range, so a flat line does not look like a swing."""
    return min([0.0, *values]) - 0.05, max([1.0, *values]) + 0.05


def _plot_library(axis: Any, xs: list[int], steps: list[dict[str, Any]]) -> None:
    """Lessons as bars (left axis), their tokens as a line (right axis), with headroom so the two do not overlap."""
    from matplotlib.ticker import MaxNLocator

    sizes, tokens = [s.get("library_size", 0) for s in steps], [s.get("library_tokens", 0) for s in steps]
    axis.bar(xs, sizes, color="tab:blue", alpha=0.6)
    axis.set(ylim=(0, max(sizes) * 1.4 + 1), ylabel="lessons (bars)")
    axis.yaxis.set_major_locator(MaxNLocator(integer=True))
    right = axis.twinx()
    right.plot(xs, tokens, color="tab:orange", marker="o")
    right.set(ylim=(0, max(tokens) * 1.15 + 1), ylabel="library tokens, approx. (line)")


def _plot_roles(axis: Any, xs: list[int], steps: list[dict[str, Any]]) -> None:
    """Stacked per step; the headroom above the tallest bar keeps the legend off the bars."""
    bottom = [0] * len(steps)
    for role in ROLES:
        values = [_tokens(s, role) for s in steps]
        axis.bar(xs, values, bottom=bottom, label=role)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    axis.set(ylabel="tokens", ylim=(0, max(bottom) * 1.35 + 1))
    axis.legend(loc="best")


# -- the page -----------------------------------------------------------------------------------------------
class Markup(str):
    """A string that is already HTML (built from escaped parts): table cells insert it as is."""


def esc(value: Any) -> str:
    """Escape text from the run for HTML; control characters become visible escapes instead of breaking the page."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", str(value))
    return html.escape(text)


def _table(headers: Iterable[str] | None, rows: Iterable[Iterable[Any]]) -> str:
    head = "" if headers is None else "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table>{head}{body}</table>"


def _cell(value: Any) -> str:
    """Numbers right-aligned (floats to 3 places), None blank, everything else escaped unless it is Markup."""
    if isinstance(value, Markup):
        return f"<td>{value}</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="n">{value:.3f}</td>' if isinstance(value, float) else f'<td class="n">{value}</td>'
    return f"<td>{esc('' if value is None else value)}</td>"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _header(run: Run) -> str:
    m, settings = run.manifest, run.manifest.get("settings") or {}
    facts = [("program", m.get("program")), ("policy LM", (m.get("policy_lm") or {}).get("model")),
             ("reflection LM", (m.get("reflection_lm") or {}).get("model")),
             ("training examples", m.get("trainset_size")), ("selection examples", m.get("selection_size")),
             ("completed steps", len(run.steps)), ("stop reason", run.state.get("stopped") or "none recorded")]
    key = _table(None, ((k, str(settings[k])) for k in KEY_SETTINGS if k in settings))
    everything = _table(("setting", "value"), ((k, str(v)) for k, v in settings.items()))
    root = run.root.resolve()
    name = f"{root.parent.name}/{root.name}" if root.name == "log" else root.name  # the CLI's OUT/log
    return (f"<h1>Training-Free GRPO run: {esc(name)}</h1><div class=\"row\">{_table(None, facts)}"
            f"{key}</div><details><summary>all settings</summary>{everything}</details>")


def _totals(run: Run) -> str:
    fields = ("calls", "prompt_tokens", "completion_tokens", "total_tokens", "cost")
    rows = [[role, *(sum((s.get(f"{role}_usage") or {}).get(f, 0) for s in run.steps) for f in fields)]
            for role in ROLES]
    rows.append(["all", *(sum(r[i] for r in rows) for i in range(1, len(fields) + 1))])
    rollouts, wall = sum(s.get("rollouts", 0) for s in run.steps), sum(s.get("wall_time_s", 0) for s in run.steps)
    return (f"<h2>Totals</h2><p>{_plural(len(run.steps), 'step')}, {_plural(rollouts, 'rollout')}, {wall:.1f} s "
            f"of step time. LM use by role over the completed steps:</p>"
            f"{_table(('role', *(f.replace('_', ' ') for f in fields)), rows)}")


def _steps_table(run: Run) -> str:
    if not run.steps:
        return '<h2>Steps</h2><p class="note">No completed steps yet: there is nothing to chart.</p>'
    headers = ("step", "epoch", "reward", "informative groups", "lessons proposed / dropped",
               "edits applied / refused", "gate", "pruned", "lessons", "library tokens",
               *(f"{r} tokens" for r in ROLES), "seconds")
    rows = [(s.get("step"), s.get("epoch"), s.get("mean_reward"), f"{s.get('informative_groups')} / {s.get('groups')}",
             f"{s.get('lessons_proposed')} / {s.get('lessons_dropped')}", f"{s.get('ops_applied')} / "
             f"{s.get('ops_refused')}", s.get("gate"), s.get("pruned"), s.get("library_size"), s.get("library_tokens"),
             *(_tokens(s, r) for r in ROLES), s.get("wall_time_s")) for s in run.steps]
    return f"<h2>Steps</h2>{_table(headers, rows)}"


def _status(word: str, good: bool) -> Markup:
    return Markup(f'<span class="{"good" if good else "bad"}">{esc(word)}</span>')


def _candidates_table(run: Run) -> str:
    if not run.manifest.get("selection_size"):
        return ('<h2>Selection</h2><p class="note">No selection set: every step\'s edits were kept without a gate '
                "and the last library is shipped.</p>")
    rows = [] if run.initial_score is None else [
        (0, "initial", run.initial_score, _status("accepted", True), None, None, None, None, "the starting library")]
    for c in (c for s in run.steps for c in s.get("candidates") or []):
        record = None if c.get("wins") is None else f"{c.get('wins')} / {c.get('losses')}"
        rows.append((c.get("step"), c.get("label"), c.get("score"), _status(
            "accepted" if c.get("accepted") else "rejected", bool(c.get("accepted"))), c.get("net_wins"), record,
            c.get("size"), c.get("tokens"), c.get("reason")))
    headers = ("step", "candidate", "score", "decision", "net wins", "won / lost", "lessons", "tokens", "reason")
    return (f"<h2>Selection</h2><p>Libraries scored on {esc(run.manifest.get('selection_size'))} selection "
            f"examples; the compiled program ships the best-scoring end-of-step library.</p>{_table(headers, rows)}")


def _source_item(run: Run, index: int) -> str:
    inputs = run.inputs.get(index)
    if inputs is None:
        return f"<li>example {index}: <i>input not recorded</i></li>"
    text = "; ".join(f"{k}: {v}" for k, v in inputs.items()) if len(inputs) > 1 else " ".join(map(str, inputs.values()))
    return f"<li>example {index}: {esc(text if len(text) <= INPUT_CHARS else text[:INPUT_CHARS] + '…')}</li>"


def _edit_item(entry: dict[str, Any], lesson_text: str | None = None) -> str:
    """One audit entry; its text is shown unless it is the lesson's own."""
    text = entry.get("text")
    quoted = f" — “{esc(text)}”" if text and text != lesson_text else ""
    return (f"<li>step {esc(entry.get('step'))} · {esc(entry.get('op'))} · "
            f"{_status(str(entry.get('status')), entry.get('status') == 'applied')}: "
            f"{esc(entry.get('detail', ''))}{quoted}</li>")


def _lessons(run: Run, audit: list[dict[str, Any]]) -> str:
    if run.library is None:
        return '<h2>Final library</h2><p class="note">No library yet: the run has not completed a step.</p>'
    cards = []
    for e in run.library:
        sources = sorted(e.sources) or sorted(run.proposed_by.get(e.text, ()))
        where = " (from the proposal records)" if sources and not e.sources else ""
        edits = "".join(_edit_item(a, e.text) for a in audit if _mentions(a, e.id)) or "<li>none recorded</li>"
        items = "".join(_source_item(run, i) for i in sources) or "<li>none recorded</li>"
        cards.append(f'<div class="lesson"><p><b>[{esc(e.label)}]</b> {esc(e.text)}</p><p class="meta">added at '
                     f"{_at(e.added_step)}, updated at {_at(e.updated_step)} · used {e.uses}×, helpful "
                     f"{e.helpful}, harmful {e.harmful}</p><p>Source examples{where}:</p><ul>{items}</ul>"
                     f"<p>Edits:</p><ul>{edits}</ul></div>")
    body = "".join(cards) or '<p class="note">The library is empty.</p>'
    return (f"<h2>Final library: {_plural(len(run.library), 'lesson')}</h2><p>{esc(run.library_origin)}.</p>"
            f"{body}")


def _at(step: int | None) -> str:
    """Lessons of a starting library carry no step."""
    return "the start" if step is None else f"step {step}"


def _other_edits(run: Run, audit: list[dict[str, Any]]) -> str:
    """Edits about no lesson of the final library: rejected additions, deleted lessons."""
    ids = run.library.ids if run.library else []
    other = [a for a in audit if not any(_mentions(a, i) for i in ids)]
    if not other:
        return ""
    return f"<h2>Other edits ({len(other)})</h2><ul>{''.join(_edit_item(a) for a in other)}</ul>"


def render_html(run: Run, png: bytes) -> str:
    """The whole page; ``png`` is embedded so the file stands alone."""
    audit = _audit(run)
    image = f'<img alt="charts" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'
    parts = [_header(run), _totals(run), f"<h2>Charts</h2>{image}", _steps_table(run), _candidates_table(run),
             _lessons(run, audit), _other_edits(run, audit)]
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>tfgrpo run {esc(run.root.name)}'
            f"</title><style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")


def write_report(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, Path]:
    """Write RUN_DIR/report.html (or `out`) and a PNG of its charts next to it; return both paths."""
    run = load_run(run_dir)
    page = Path(out) if out is not None else run.root / "report.html"
    chart = page.with_suffix(".png") if page.suffix.lower() != ".png" else page.with_suffix(".charts.png")
    png = draw_charts(run)
    page.parent.mkdir(parents=True, exist_ok=True)
    chart.write_bytes(png)
    page.write_text(render_html(run, png), encoding="utf-8", errors="replace")
    return page, chart
