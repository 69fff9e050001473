"""A self-contained HTML report of one run, read from its log directory (`tfgrpo_dspy.report.run`).

One file to mail or archive: the charts are a PNG inside the page, the CSS is inline, nothing is fetched. Text
from the run is escaped (an LM wrote most of it). The page opens with what the run learned and why
(`tfgrpo_dspy.report.story`), counts every call where it was spent (the starting library's selection scoring
included), puts a sentence where a chart would be empty, and reads on a phone: tables scroll inside their box.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tfgrpo_dspy.report.charts import ROLES, Charts, draw_charts, tokens
from tfgrpo_dspy.report.run import Run, load_run
from tfgrpo_dspy.report.story import headline, plural, stages

KEY_SETTINGS = ("group_size", "epochs", "batch_size", "temperature", "max_experiences", "max_words", "summarize",
                "gate", "gate_margin", "gate_budget", "val_fraction", "top_k", "route_by", "placement", "seed")
INPUT_CHARS = 120
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#222;padding:0 16px}
h1{font-size:22px;overflow-wrap:anywhere}h2{font-size:18px;margin-top:28px;border-bottom:1px solid #ddd}
img{max-width:100%;height:auto}ul{margin:4px 0;padding-left:22px}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:8px 0;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}th{background:#f4f4f4}
td{overflow-wrap:break-word;max-width:32em}td.n{text-align:right;font-variant-numeric:tabular-nums}
.good{color:#17702b}.bad{color:#b3261e}.row{display:flex;flex-wrap:wrap;gap:0 24px;align-items:flex-start}
.meta{color:#555}.note{background:#fff8e1;padding:6px 10px;border-left:4px solid #f0b400}.lesson p{margin:4px 0}
.lesson{border:1px solid #ddd;border-radius:6px;padding:8px 12px;margin:10px 0}
.verdict{background:#f3f6fb;border:1px solid #c9d6ea;border-radius:6px;padding:4px 16px 10px;margin:12px 0}
.verdict .headline{font-size:16px;font-weight:600}
@media (max-width:600px){body{margin:8px auto;padding:0 8px}h1{font-size:19px}td{max-width:16em}
.charts img{max-width:none;width:900px}}"""


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


# -- the page -----------------------------------------------------------------------------------------------
class Markup(str):
    """A string that is already HTML (built from escaped parts): table cells insert it as is."""


def esc(value: Any) -> str:
    """Escape text from the run for HTML; control characters become visible escapes instead of breaking the page."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else "\ufffd", str(value))
    return html.escape(text)


def _table(headers: Iterable[str] | None, rows: Iterable[Iterable[Any]]) -> str:
    """A table in a box that scrolls sideways on a narrow screen, so the page itself never does."""
    head = "" if headers is None else "<tr>" + "".join(f"<th>{esc(h)}</th>" for h in headers) + "</tr>"
    body = "".join("<tr>" + "".join(_cell(c) for c in row) + "</tr>" for row in rows)
    return f'<div class="scroll"><table>{head}{body}</table></div>'


def _cell(value: Any) -> str:
    """Numbers right-aligned (floats to 3 places), None blank, everything else escaped unless it is Markup."""
    if isinstance(value, Markup):
        return f"<td>{value}</td>"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f'<td class="n">{value:.3f}</td>' if isinstance(value, float) else f'<td class="n">{value}</td>'
    return f"<td>{esc('' if value is None else value)}</td>"


def _header(run: Run) -> str:
    m, settings = run.manifest, run.manifest.get("settings") or {}
    facts = [("program", m.get("program")), ("policy LM", (m.get("policy_lm") or {}).get("model")),
             ("reflection LM", (m.get("reflection_lm") or {}).get("model")),
             ("training examples", m.get("trainset_size")), ("selection examples", m.get("selection_size")),
             ("completed steps", len(run.steps)), ("stop reason", run.state.get("stopped") or "none recorded")]
    key = _table(None, ((k, str(settings[k])) for k in KEY_SETTINGS if k in settings))
    everything = _table(("setting", "value"), ((k, str(v)) for k, v in settings.items()))
    return (f"<h2>Run</h2><div class=\"row\">{_table(None, facts)}{key}</div><details><summary>all settings"
            f"</summary>{everything}</details>")


def _verdict(run: Run) -> str:
    """What the run learned and why: the top of the page."""
    items = "".join(f"<li>{esc(line)}</li>" for line in stages(run))
    return (f'<section class="verdict"><h2>What happened</h2><p class="headline">{esc(headline(run))}</p>'
            f"<ul>{items}</ul></section>")


def _totals(run: Run) -> str:
    """Every call where it was spent: the steps' roles, and the starting library's scoring before step 1."""
    fields = ["calls", "prompt_tokens", "completion_tokens", "total_tokens"]
    spent = [(role, "in the steps", {f: sum((s.get(f"{role}_usage") or {}).get(f, 0) for s in run.steps)
                                     for f in [*fields, "cost"]}) for role in ROLES]
    if run.initial is not None:
        spent.insert(3, ("selection", "the starting library, before step 1", run.initial.usage.to_dict()))
    total = {f: sum(usage.get(f, 0) for _, _, usage in spent) for f in [*fields, "cost"]}
    if total["cost"]:  # the LM reported a price: show it; a local model reports none, and 0 would read as free
        fields.append("cost")
    rows = [[role, where, *(usage.get(f, 0) for f in fields)] for role, where, usage in spent]
    rows.append(["all", "", *(total[f] for f in fields)])
    headers = ("role", "where", *(("cost (USD)" if f == "cost" else f.replace("_", " ")) for f in fields))
    rollouts, wall = sum(s.get("rollouts", 0) for s in run.steps), sum(s.get("wall_time_s", 0) for s in run.steps)
    before = (f" Scoring the starting library ({plural(run.initial.usage.calls, 'call')}) ran before step 1 and "
              "is not in the step time." if run.initial is not None else "")
    unpriced = "" if "cost" in fields else " The LM reported no cost."
    return (f"<h2>LM use</h2><p>{plural(len(run.steps), 'step')}, {plural(rollouts, 'rollout')}, {wall:.1f} s "
            f"of step time.{before}{unpriced}</p>{_table(headers, rows)}")


def _steps_table(run: Run) -> str:
    if not run.steps:
        return '<h2>Steps</h2><p class="note">No completed steps yet: there is nothing to chart.</p>'
    headers = ("step", "epoch", "reward", "informative groups", "lessons proposed / dropped",
               "edits applied / refused", "gate", "pruned", "lessons", "library tokens",
               *(f"{r} tokens" for r in ROLES), "seconds")
    rows = [(s.get("step"), s.get("epoch"), s.get("mean_reward"), f"{s.get('informative_groups')} / {s.get('groups')}",
             f"{s.get('lessons_proposed')} / {s.get('lessons_dropped')}", f"{s.get('ops_applied')} / "
             f"{s.get('ops_refused')}", s.get("gate"), s.get("pruned"), s.get("library_size"), s.get("library_tokens"),
             *(tokens(s, r) for r in ROLES), s.get("wall_time_s")) for s in run.steps]
    return f"<h2>Steps</h2>{_table(headers, rows)}"


def _status(word: str, good: bool) -> Markup:
    return Markup(f'<span class="{"good" if good else "bad"}">{esc(word)}</span>')


def _candidates_table(run: Run) -> str:
    if not run.manifest.get("selection_size"):
        return ('<h2>Selection</h2><p class="note">No selection set: every step\'s edits were kept without a gate '
                "and the last library is shipped.</p>")
    rows = [] if run.initial is None else [
        (0, "initial", run.initial.score, _status("accepted", True), None, None, None, None, "the starting library")]
    for c in (c for s in run.steps for c in s.get("candidates") or []):
        record = None if c.get("wins") is None else f"{c.get('wins')} / {c.get('losses')}"
        rows.append((c.get("step"), c.get("label"), c.get("score"), _status(
            "accepted" if c.get("accepted") else "rejected", bool(c.get("accepted"))), c.get("net_wins"), record,
            c.get("size"), c.get("tokens"), c.get("reason")))
    headers = ("step", "candidate", "score", "decision", "net wins", "won / lost", "lessons", "tokens", "reason")
    return (f"<h2>Selection</h2><p>Libraries scored on {esc(run.manifest.get('selection_size'))} selection "
            f"examples; the compiled program ships the best-scoring end-of-step library: "
            f"{esc(run.shipped or 'the run has not finished')}.</p>{_table(headers, rows)}")


def _checks_table(run: Run) -> str:
    if not run.checks:
        return ""
    rows = [(c.get("step"), c.get("text"), c.get("origin"), len(c.get("sources") or []), len(c.get("tried") or []),
             len(c.get("shown") or []), _examples(c.get("fixes")), _examples(c.get("breaks")),
             _examples(c.get("changes")), c.get("net"), _precision(c), c.get("target") or "", _shift(c),
             _status("kept" if c.get("kept") else "dropped", bool(c.get("kept"))), c.get("reason"))
            for c in run.checks]
    headers = ("step", "candidate lesson", "from", "sources", "tried", "shown", "fixed (examples)",
               "broke (examples)", "other changes", "net", "precision", "target", "right: lesson / its shift",
               "verdict", "why")
    return ("<h2>Verification</h2><p>Each candidate in turn, in this order, added to the library of its step with "
            "the candidates kept before it, and run greedily on training examples, paired with that library without "
            "it. Every answer it changed counts, only where the lesson was shown: fixes, breaks and other changes "
            "(one wrong answer to another); precision is fixes over all three. Its shift answers its target (the "
            "answer it moved most answers to) to every example it was shown to: a lesson that does no better "
            "only moves answers, it does not tell inputs apart.</p>"
            f"{_table(headers, rows)}")


def _precision(check: dict[str, Any]) -> str:
    return "" if check.get("precision") is None else f"{check['precision']:.2f}"


def _shift(check: dict[str, Any]) -> str:
    if check.get("shift_right") is None:
        return ""
    return f"{check.get('lesson_right', 0)} / {check['shift_right']} of {len(check.get('shown') or [])}"


def _examples(indices: Any) -> str:
    indices = list(indices or [])
    return f"{len(indices)}" + (f" ({', '.join(f'#{i}' for i in indices)})" if indices else "")


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
        near = plural(sum(e.id in r.lessons for r in run.library.routes), "training input")
        routed = f" · shown to inputs nearest {near}" if run.library.routes else ""
        cards.append(f'<div class="lesson"><p><b>[{esc(e.label)}]</b> {esc(e.text)}</p><p class="meta">added at '
                     f"{_at(e.added_step)}, updated at {_at(e.updated_step)} · used {e.uses}×, helpful "
                     f"{e.helpful}, harmful {e.harmful}{routed}</p><p>Source examples{where}:</p><ul>{items}</ul>"
                     f"<p>Edits:</p><ul>{edits}</ul></div>")
    body = "".join(cards) or '<p class="note">The library is empty.</p>'
    routes = run.library.routes
    routing = (f"<p>Routed by example: each call is shown the lessons of the nearest of {len(routes)} training "
               f"inputs ({sum(not r.lessons for r in routes)} of them route to no lesson).</p>" if routes else "")
    return (f"<h2>Final library: {plural(len(run.library), 'lesson')}</h2><p>{esc(run.library_origin)}.</p>"
            f"{routing}{body}")


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


def _charts(charts: Charts) -> str:
    notes = "".join(f'<p class="note">{esc(note)}</p>' for note in charts.notes)
    if not charts.drawn:
        return f"<h2>Charts</h2>{notes}"
    image = f'<img alt="{esc(charts.title)}" src="data:image/png;base64,{base64.b64encode(charts.png).decode()}">'
    # On a phone the charts keep a readable size and scroll sideways inside their box.
    return f'<h2>Charts</h2><div class="scroll charts">{image}</div>{notes}'


def render_html(run: Run, charts: Charts) -> str:
    """The whole page; the charts' PNG is embedded so the file stands alone."""
    audit = _audit(run)
    parts = [f"<h1>Training-Free GRPO run: {esc(run.name)}</h1>", _verdict(run), _header(run), _totals(run),
             _charts(charts), _steps_table(run), _checks_table(run), _candidates_table(run), _lessons(run, audit),
             _other_edits(run, audit)]
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>tfgrpo run {esc(run.name)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")


def write_report(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, Path]:
    """Write RUN_DIR/report.html (or `out`) and a PNG of its charts next to it; return both paths."""
    run = load_run(run_dir)
    page = Path(out) if out is not None else run.root / "report.html"
    chart = page.with_suffix(".png") if page.suffix.lower() != ".png" else page.with_suffix(".charts.png")
    charts = draw_charts(run)
    page.parent.mkdir(parents=True, exist_ok=True)
    chart.write_bytes(charts.png)
    page.write_text(render_html(run, charts), encoding="utf-8", errors="replace")
    return page, chart
