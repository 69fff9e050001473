"""The HTML report of a run: built from a real (scripted) run directory, escaped, self-contained, robust."""

import base64
import html
import json
import re
from pathlib import Path

import pytest
from test_selection import BAD, GOOD, LessonSensitivePolicy, compile_with, questions

from tfgrpo_dspy.report import RunReportError, write_report
from tfgrpo_dspy.report.story import plural

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gated_run(tmp_path_factory):
    """Two steps with a selection set: step 1 keeps GOOD and rejects BAD, step 2 rejects BAD again."""
    root = tmp_path_factory.mktemp("gated")
    compile_with(LessonSensitivePolicy({0: GOOD, 1: BAD}), trainset=questions(0, 4), batch_size=2, log_dir=root)
    return root


@pytest.fixture(scope="module")
def gated_report(gated_run):
    page, chart = write_report(gated_run)
    return page, chart, page.read_text(encoding="utf-8")


def test_the_page_and_its_chart_are_written_next_to_each_other(gated_run, gated_report):
    page, chart, text = gated_report
    assert page == gated_run / "report.html" and chart == gated_run / "report.png"
    assert chart.read_bytes().startswith(PNG_SIGNATURE) and len(chart.read_bytes()) > 1000
    embedded = re.search(r'src="data:image/png;base64,([^"]+)"', text).group(1)
    assert base64.b64decode(embedded) == chart.read_bytes()  # the same charts, inside the page
    assert "http://" not in text and "https://" not in text  # nothing fetched
    assert "<script" not in text.lower()


def test_the_page_shows_settings_steps_and_role_totals(gated_run, gated_report):
    _, _, text = gated_report
    assert "scripted/model" in text and "group_size" in text
    for step in (1, 2):
        record = json.loads((gated_run / "steps" / f"{step:04d}" / "step.json").read_text())
        assert f"<td class=\"n\">{record['step']}</td><td class=\"n\">{record['epoch']}</td>" in text
    steps = [json.loads(p.read_text()) for p in sorted(gated_run.glob("steps/*/step.json"))]
    for role in ("policy", "reflection", "selection"):
        total = sum(s[f"{role}_usage"]["total_tokens"] for s in steps)
        assert total > 0 and re.search(
            rf"<td>{role}</td><td>in the steps</td>(<td class=\"n\">[^<]*</td>){{3}}<td class=\"n\">{total}</td>", text)


def test_the_page_shows_each_candidate_with_its_decision(gated_run, gated_report):
    _, _, text = gated_report
    steps = [json.loads(p.read_text()) for p in sorted(gated_run.glob("steps/*/step.json"))]
    candidates = [c for s in steps for c in s["candidates"]]
    assert {c["accepted"] for c in candidates} == {True, False}
    for c in candidates:
        decision = '<span class="good">accepted' if c["accepted"] else '<span class="bad">rejected'
        row = (f"<td>{html.escape(c['label'])}</td><td class=\"n\">{c['score']:.3f}</td>"
               f"<td>{decision}</span></td><td class=\"n\">{c['net_wins']}</td>")
        assert row in text and html.escape(c["reason"]) in text
    assert "<td>initial</td><td class=\"n\">0.500</td>" in text  # the starting library's score, from the records


def test_each_lesson_shows_its_provenance_and_edits(gated_report):
    _, _, text = gated_report
    lesson = text[text.index("Final library"):]
    assert html.escape(GOOD) in lesson
    assert "example 0: What is 0 + 2?" in lesson  # the source example's input text, from the rollout records
    assert "added at step 1" in lesson and "used 0×, helpful 0, harmful 0" in lesson
    assert "added E1" in lesson
    others = text[text.index("Other edits"):]  # the rejected lesson is not in the final library, but is shown
    assert html.escape(BAD) in others and "rejected by the selection gate" in others


def test_lesson_text_with_markup_is_escaped(tmp_path):
    evil = "When a page says <script>alert('x')</script> & more, ignore it \x1b[31m."
    compile_with(LessonSensitivePolicy({0: evil}), valset=None, log_dir=tmp_path)
    text = write_report(tmp_path, tmp_path / "out" / "page.html")[0].read_text(encoding="utf-8")
    assert "<script>" not in text and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; more" in text
    assert "\x1b" not in text
    assert "No selection set" in text and (tmp_path / "out" / "page.png").is_file()


def test_a_directory_without_a_manifest_is_not_a_run(tmp_path):
    with pytest.raises(RunReportError, match=re.escape(str(tmp_path / "manifest.json"))):
        write_report(tmp_path)


def test_a_broken_manifest_is_named(tmp_path):
    (tmp_path / "manifest.json").write_text("{not json")
    with pytest.raises(RunReportError, match=re.escape(str(tmp_path / "manifest.json"))):
        write_report(tmp_path)


def test_a_broken_step_record_is_named(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"settings": {}}))
    (tmp_path / "state.json").write_text(json.dumps({"completed_steps": 1}))
    (tmp_path / "steps" / "0001").mkdir(parents=True)
    (tmp_path / "steps" / "0001" / "step.json").write_text("[1, 2")
    with pytest.raises(RunReportError, match=re.escape(str(tmp_path / "steps" / "0001" / "step.json"))):
        write_report(tmp_path)


def test_a_run_with_no_completed_step_renders(gated_run, tmp_path):
    (tmp_path / "manifest.json").write_text((gated_run / "manifest.json").read_text())
    (tmp_path / "state.json").write_text(json.dumps({"completed_steps": 0, "stopped": "aborted: <budget> spent"}))
    page, chart = write_report(tmp_path)
    text = page.read_text(encoding="utf-8")
    assert "No completed steps yet" in text and "No library yet" in text
    assert "aborted: &lt;budget&gt; spent" in text
    assert chart.read_bytes().startswith(PNG_SIGNATURE)


def test_the_final_library_is_the_one_compile_returned_not_the_last_steps(tmp_path):
    """Without the gate every edit is kept, yet the best scored library ships: here the empty one."""
    compiled, _ = compile_with(LessonSensitivePolicy({0: BAD}), gate=False, log_dir=tmp_path)
    assert compiled.tfgrpo_result.best_step == 0 and len(compiled.experience_library) == 0
    assert BAD in (tmp_path / "library.json").read_text()  # the last step kept the harmful lesson
    text = write_report(tmp_path, tmp_path / "out" / "page.html")[0].read_text(encoding="utf-8")
    final = text[text.index("Final library"):]
    # In the result's own words (one source of truth): results.shipped_library
    assert compiled.tfgrpo_result.shipped == "the initial library"
    assert "Final library: 0 lessons" in final and "the library compile returned: the initial library." in final
    assert html.escape(BAD) not in final


def test_a_cli_run_log_is_titled_by_its_output_folder(gated_run, tmp_path):
    import shutil

    log = tmp_path / "my_run" / "log"  # what `tfgrpo train --out my_run` writes
    shutil.copytree(gated_run, log, ignore=shutil.ignore_patterns("report.*"))
    page, _ = write_report(log)
    assert "<h1>Training-Free GRPO run: my_run/log</h1>" in page.read_text(encoding="utf-8")


# -- the story at the top, every call counted, notes for empty charts, a phone-width page ---------------------
@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory):
    """`tfgrpo demo` on the scripted LM: OUT/log plus OUT/demo.json with the held-out verdict, as on a real run.
    Twelve training tickets, so that some failures share their queue: routed by answer only those are induced on."""
    from scripted import scripted_lm, ticket_router

    from tfgrpo_dspy import cli

    lm = scripted_lm(ticket_router)
    out = tmp_path_factory.mktemp("demo") / "out"
    patch = pytest.MonkeyPatch()
    patch.setattr(cli, "make_lm", lambda spec, **kwargs: lm)
    patch.setattr("tfgrpo_dspy.lm.make_lm", lambda spec, **kwargs: lm)
    try:
        assert cli.main(["demo", "--train-n", "12", "--selection-n", "3", "--heldout-n", "5", "--out", str(out)]) == 0
    finally:
        patch.undo()
    return out


def test_the_page_opens_with_what_happened_and_the_held_out_verdict(demo_dir):
    from tfgrpo_dspy.stats import PairedComparison

    page, _ = write_report(demo_dir / "log")
    text = page.read_text(encoding="utf-8")
    step = json.loads((demo_dir / "log" / "steps" / "0001" / "step.json").read_text())
    checks = json.loads((demo_dir / "log" / "steps" / "0001" / "checks" / "lessons.json").read_text())["checks"]
    # What the scripted run did: with the tickets defaults no per-group reflection, lessons induced, none verified
    # (its greedy answers ignore lessons).
    assert step["reflected_groups"] == 0 and step["induced_lessons"] > 0
    assert checks and not any(c["kept"] for c in checks)
    top = text[text.index("<body>"):text.index("<h2>Run</h2>")]
    checked = step["lessons_checked"]
    assert f"No lesson was learned: verification kept none of the {checked} candidate lesson" in top
    assert "the per-group reflection is off (extraction=False): lessons come from the induction" in top
    assert "Proposed:" not in top  # no per-group proposals to count
    assert f"Induced: {step['induced_lessons']} of {step['inductions']} draws" in top
    assert f"Verified: 0 of {checked} distinct candidate" in top
    assert "Gate: nothing to decide: no step changed the library." in top
    assert "Shipped: the initial library (no step changed it), 0 lessons." in top
    table = text[text.index("<h2>Verification</h2>"):]
    assert all(html.escape(c["text"]) in table and html.escape(c["reason"]) in table for c in checks)
    demo = json.loads((demo_dir / "demo.json").read_text())
    fields = PairedComparison.__dataclass_fields__
    verdict = PairedComparison(**{k: v for k, v in demo["comparison"].items() if k in fields})
    assert html.escape(verdict.verdict()) in top and "from demo.json" in top


def test_the_held_out_verdict_carries_the_majority_baseline_when_the_demo_scored_one(demo_dir, tmp_path):
    import shutil

    from tfgrpo_dspy.stats import compare_paired

    run = tmp_path / "demo"
    shutil.copytree(demo_dir, run)
    demo = json.loads((run / "demo.json").read_text())
    assert "majority" in demo  # the demo records it (None for 9 tickets of 7 queues: no label repeats enough)
    against = compare_paired([1.0, 0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 0.0, 0.0, 0.0])
    demo["majority"] = {"answer": "trust-safety", "frequency": 4, "training_count": 16, "comparison": against.to_dict()}
    (run / "demo.json").write_text(json.dumps(demo))
    text = write_report(run / "log")[0].read_text(encoding="utf-8")
    top = text[text.index("<body>"):text.index("<h2>Run</h2>")]
    assert (html.escape("Answering 'trust-safety' to every example (the most frequent training answer, no model): "
                        "40.0%; with the library against it: no measurable change (+0.0 points") in top)


def test_every_call_is_counted_where_it_was_spent(demo_dir):
    text = write_report(demo_dir / "log")[0].read_text(encoding="utf-8")
    (initial,) = [json.loads(p.read_text()) for p in (demo_dir / "log" / "selection").glob("*.json")
                  if json.loads(p.read_text())["label"] == "initial"]
    calls = initial["usage"]["calls"]
    assert calls > 0 and re.search(rf"<td>selection</td><td>the starting library, before step 1</td>"
                                   rf"<td class=\"n\">{calls}</td>", text)
    step = json.loads((demo_dir / "log" / "steps" / "0001" / "step.json").read_text())
    roles = ("policy", "reflection", "verification", "selection")
    everything = sum(step[f"{role}_usage"]["calls"] for role in roles) + calls
    assert re.search(rf"<td>all</td><td></td><td class=\"n\">{everything}</td>", text)
    demo = json.loads((demo_dir / "demo.json").read_text())
    assert demo["train"]["selection_usage"]["calls"] == step["selection_usage"]["calls"] + calls  # the result agrees
    assert "is not in the step time" in text
    assert "<th>cost" not in text.split("<h2>LM use</h2>")[1].split("</table>")[0]  # a local LM reports no price
    assert "The LM reported no cost." in text


def test_a_reported_cost_is_shown_with_its_unit(demo_dir, tmp_path):
    import shutil

    log = tmp_path / "out" / "log"
    shutil.copytree(demo_dir / "log", log)
    path = log / "steps" / "0001" / "step.json"
    step = json.loads(path.read_text())
    step["reflection_usage"]["cost"] = 0.25
    path.write_text(json.dumps(step))
    text = write_report(log)[0].read_text(encoding="utf-8")
    assert "<th>cost (USD)</th>" in text and "The LM reported no cost." not in text


def test_charts_without_data_become_notes_and_the_png_names_the_run(tmp_path):
    from tfgrpo_dspy.report.charts import draw_charts
    from tfgrpo_dspy.report.run import load_run

    compile_with(LessonSensitivePolicy({0: None}), log_dir=tmp_path / "nothing" / "log")  # the reflection proposes none
    run = load_run(tmp_path / "nothing" / "log")
    charts = draw_charts(run)
    assert charts.drawn == 2 and charts.png.startswith(PNG_SIGNATURE)
    assert any("no library besides the starting one was scored" in n for n in charts.notes)
    assert any("the library had no lesson" in n for n in charts.notes)
    assert charts.title.startswith("Training-Free GRPO run nothing/log · last written 20") and charts.title.endswith(
        " UTC")
    text = write_report(tmp_path / "nothing" / "log")[0].read_text(encoding="utf-8")
    step = json.loads((tmp_path / "nothing" / "log" / "steps" / "0001" / "step.json").read_text())
    calls, groups = step["reflection_usage"]["calls"], step["informative_groups"]
    assert calls > 0 and groups == 2 and step["lessons_proposed"] == 0
    assert (f"No lesson was learned: the reflection proposed none ({calls} reflection calls on {groups} informative "
            "groups).") in text
    assert text.count('<p class="note">No ') >= 2 and f'alt="{html.escape(charts.title)}"' in text


def test_a_rejected_step_ships_the_initial_library_in_the_results_words(tmp_path):
    compiled, _ = compile_with(LessonSensitivePolicy({0: BAD}), log_dir=tmp_path)
    shipped = compiled.tfgrpo_result.shipped
    assert shipped == "the initial library (no step changed it)"
    text = write_report(tmp_path, tmp_path / "out" / "page.html")[0].read_text(encoding="utf-8")
    assert text.count(shipped) >= 3  # the story, the selection section, the final library
    assert "the library after step 1" not in text


def test_the_page_fits_a_phone(gated_report):
    _, _, text = gated_report
    assert '<meta name="viewport" content="width=device-width, initial-scale=1">' in text
    assert text.count("<table>") == text.count('<div class="scroll"><table>') > 0  # tables scroll in their box
    assert "@media (max-width:600px)" in text and ".scroll{overflow-x:auto" in text


def test_the_gated_run_says_what_shipped_and_why_the_guard_dropped_lessons(gated_run, tmp_path):
    import shutil

    run_dir = tmp_path / "gated"
    shutil.copytree(gated_run, run_dir, ignore=shutil.ignore_patterns("report.*"))
    extra = run_dir / "steps" / "0001" / "proposals" / "ex0099.json"
    extra.write_text(json.dumps({"example_index": 99, "lessons": [], "dropped": [
        {"text": "When Tom has 5 apples, he has 5.", "dropped_because": "restates its example: 5"},
        {"text": "When a value, do it.", "dropped_because": "restates its example: value"}]}))
    text = write_report(run_dir)[0].read_text(encoding="utf-8")
    # Step 2 changed nothing and ties with step 1: the later step ships, in the result's words.
    assert "1 lesson shipped: the library after step 2." in text and "Gate, step 1, edit 2 alone: accepted" in text
    assert "(restates its example ×2)" in text


def test_the_committed_gsm8k_run_says_its_two_candidates_were_dropped_by_verification(tmp_path):
    """A real run (benchmarks/results/compare_gsm8k.runs, 2026-12-04): one extracted and one induced lesson, both
    dropped by their re-runs, and the calls the selection scoring spent (20 rows, 2 retried)."""
    log = Path(__file__).resolve().parent.parent / "benchmarks/results/compare_gsm8k.runs/gsm8k/tfgrpo-seed0.log"
    text = write_report(log, tmp_path / "page.html")[0].read_text(encoding="utf-8")
    assert ("No lesson was learned: verification kept none of the 2 candidate lessons (each re-run on training "
            "examples fixed too few or broke as many)." in text)
    assert ("Groups: 10 of 16 had mixed rewards and 3 all failed over 1 step; 13 reached the per-group reflection."
            in text)
    assert "Induced: 1 of 9 draws over sets of failed examples gave a lesson the guard passed." in text
    assert re.search(r"<td>selection</td><td>the starting library, before step 1</td><td class=\"n\">22</td>", text)


def test_plural_says_one_lesson_and_two_lessons():
    assert [plural(n, "lesson") for n in (0, 1, 2)] == ["0 lessons", "1 lesson", "2 lessons"]


def test_the_verification_table_shows_every_changed_answer_precision_target_and_shift(demo_dir, tmp_path):
    import shutil

    from tfgrpo_dspy.run.judgement import LessonCheck

    run = tmp_path / "demo"
    shutil.copytree(demo_dir, run)
    check = LessonCheck("When a customer writes, answer payments.", "induction", (0, 1), tried=tuple(range(12)),
                        shown=tuple(range(12)), fixes=(0, 1, 2, 3), changes=tuple(range(4, 12)),
                        target="queue: payments", lesson_right=4, shift_right=4, shift_misses=8, kept=False,
                        reason="precision below 0.50")
    record = dict(check.to_dict(), step=1)
    (run / "log" / "steps" / "0001" / "checks" / "lessons.json").write_text(json.dumps({"checks": [record]}))
    text = write_report(run / "log")[0].read_text(encoding="utf-8")
    table = text[text.index("<h2>Verification</h2>"):]
    table = table[:table.index("</table>")]
    for header in ("other changes", "precision", "target", "right: lesson / its shift"):
        assert f"<th>{header}</th>" in table
    cells = re.findall(r"<td[^>]*>(.*?)</td>", table)
    assert "8 (#4, #5, #6, #7, #8, #9, #10, #11)" in cells and "0.33" in cells
    assert "queue: payments" in cells and "4 / 4 of 12" in cells
