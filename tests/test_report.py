"""The HTML report of a run: built from a real (scripted) run directory, escaped, self-contained, robust."""

import base64
import html
import json
import re

import pytest
from test_selection import BAD, GOOD, LessonSensitivePolicy, compile_with, questions

from tfgrpo_dspy.report import RunReportError, write_report

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
        assert total > 0 and re.search(rf"<td>{role}</td>(<td class=\"n\">[^<]*</td>){{3}}<td class=\"n\">{total}</td>",
                                       text)


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
    assert "Final library: 0 lessons" in final and "the library compile returned: the starting library" in final
    assert html.escape(BAD) not in final


def test_a_cli_run_log_is_titled_by_its_output_folder(gated_run, tmp_path):
    import shutil

    log = tmp_path / "my_run" / "log"  # what `tfgrpo train --out my_run` writes
    shutil.copytree(gated_run, log, ignore=shutil.ignore_patterns("report.*"))
    page, _ = write_report(log)
    assert "<h1>Training-Free GRPO run: my_run/log</h1>" in page.read_text(encoding="utf-8")
