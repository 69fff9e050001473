import ast
import json
import sys
from pathlib import Path

import pytest

from tfgrpo_dspy import EditOp, ExperienceLibrary
from tfgrpo_dspy.library import file as library_file
from tfgrpo_dspy.library.file import LibraryFileError, LibraryReader


def make(*texts, **caps):
    return ExperienceLibrary.from_texts(list(texts), **caps)


def test_ids_are_stable_across_deletes_and_adds():
    lib = make("When a, do b.", "When c, do d.", "When e, do f.")
    lib.apply([{"op": "delete", "id": 2}, {"op": "add", "text": "When g, do h."}], step=1)
    assert [e.id for e in lib] == [1, 3, 4]
    assert lib.render().splitlines()[-1] == "[E4] When g, do h."
    lib.apply([{"op": "delete", "id": 4}, {"op": "add", "text": "When i, do j."}], step=2)
    assert [e.id for e in lib] == [1, 3, 5]  # a deleted id is never reused


def test_unknown_ids_are_refused_and_recorded():
    lib = make("When a, do b.")
    report = lib.apply([EditOp(op="modify", id=7, text="x"), {"op": "delete", "id": "E9"}], step=3)
    assert len(report.refused) == 2 and not report.applied
    assert sorted(e.detail for e in report.refused) == ["unknown id(s): E7", "unknown id(s): E9"]
    assert [e.text for e in lib] == ["When a, do b."]
    assert all(entry.step == 3 for entry in lib.audit_log)


def test_max_words_and_max_experiences_are_enforced():
    lib = make(max_experiences=2, max_words=5)
    report = lib.apply([
        {"op": "add", "text": "one two three four five six"},
        {"op": "add", "text": "When a, do b."},
        {"op": "add", "text": "When c, do d."},
        {"op": "add", "text": "When e, do f."},
    ], step=1)
    assert len(lib) == 2
    details = [e.detail for e in report.refused]
    assert any("max_words=5" in d for d in details)
    assert any("library is full" in d for d in details)


def test_deletes_apply_before_adds_so_a_full_library_can_rotate():
    lib = make("When a, do b.", "When c, do d.", max_experiences=2)
    report = lib.apply([{"op": "add", "text": "When e, do f."}, {"op": "delete", "id": 1}])
    assert not report.refused
    assert [e.text for e in lib] == ["When c, do d.", "When e, do f."]


def test_exact_duplicates_are_not_added():
    lib = make("When a, do b.")
    report = lib.apply([{"op": "add", "text": "  when A,   do B. "}])
    assert report.refused[0].detail == "duplicate of E1"
    assert len(lib) == 1


def test_modify_merge_keep():
    lib = make("When a, do b.", "When c, do d.", "When e, do f.")
    lib.apply([{"op": "modify", "id": 1, "text": "When a, do B."}], step=1)
    report = lib.apply([{"op": "merge", "ids": ["E2", 3], "text": "When c or e, do d and f."},
                        {"op": "keep"}], step=2)
    assert len(report.applied) == 2
    assert [(e.id, e.text) for e in lib] == [(1, "When a, do B."), (2, "When c or e, do d and f.")]
    assert lib[2].updated_step == 2 and lib[1].added_step is None


def test_merge_needs_two_known_ids_and_malformed_ops_are_refused():
    lib = make("When a, do b.")
    report = lib.apply([{"op": "merge", "ids": [1], "text": "x"}, {"op": "explode"}, {"op": "add"}])
    assert len(report.refused) == 3
    assert len(lib) == 1


def test_save_load_round_trip_is_readable_json(tmp_path):
    lib = make("When a, do b.", max_experiences=5, max_words=10)
    lib.apply([{"op": "add", "text": "When c, do d.", "reason": "because"}], step=1)
    path = lib.save(tmp_path / "lib.json")
    data = json.loads(path.read_text())
    assert data["version"] == 2
    assert data["experiences"][1] == {"id": 2, "text": "When c, do d.", "added_step": 1, "updated_step": 1,
                                      "uses": 0, "helpful": 0, "harmful": 0}
    loaded = ExperienceLibrary.load(path)
    assert loaded.render() == lib.render()
    assert loaded.max_words == 10 and loaded.audit_log == lib.audit_log
    loaded.apply([{"op": "add", "text": "When e, do f."}])
    assert loaded.ids == [1, 2, 3]


def test_load_rejects_non_library_files(tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not an experience library"):
        ExperienceLibrary.load(tmp_path / "x.json")
    with pytest.raises(FileNotFoundError):
        ExperienceLibrary.load(tmp_path / "missing.json")


def test_diff_reports_added_removed_modified():
    old = make("When a, do b.", "When c, do d.")
    new = old.copy()
    new.apply([{"op": "delete", "id": 1}, {"op": "modify", "id": 2, "text": "When c, do D."},
               {"op": "add", "text": "When e, do f."}])
    diff = old.diff(new)
    assert [e.id for e in diff.added] == [3]
    assert [e.id for e in diff.removed] == [1]
    assert [(o.text, n.text) for o, n in diff.modified] == [("When c, do d.", "When c, do D.")]
    assert "+ [E3] When e, do f." in str(diff)
    assert not old.diff(old.copy())


def test_invalid_caps_are_rejected():
    with pytest.raises(ValueError, match="max_words"):
        ExperienceLibrary(max_words=0)
    with pytest.raises(ValueError, match="max_experiences"):
        ExperienceLibrary(max_experiences=-1)


def _many_lessons(count: int, cap: int | None) -> dict:
    return {"format": "tfgrpo-experience-library", "version": 2, "max_experiences": cap, "max_words": None,
            "next_id": count + 1, "experiences": [{"id": i, "text": f"When case {i} appears, check it first."}
                                                  for i in range(1, count + 1)]}


def _library_lines_run(data: dict) -> int:
    """Lines of tfgrpo_dspy/library executed while loading ``data``: a count of work that, unlike a clock, does
    not depend on the machine's load."""
    package = str(Path(ExperienceLibrary.__module__.replace(".", "/")).parent)
    lines = 0

    def local(frame, event, arg):
        nonlocal lines
        lines += event == "line"
        return local

    def calls(frame, event, arg):
        return local if package in frame.f_code.co_filename else None

    sys.settrace(calls)
    try:
        ExperienceLibrary.from_dict(data)
    finally:
        sys.settrace(None)
    return lines


def test_loading_is_linear_and_an_over_cap_file_is_refused_at_once(monkeypatch):
    library = ExperienceLibrary.from_dict(_many_lessons(100_000, None))
    assert len(library) == 100_000 and library.next_id == 100_001
    # Four times the lessons, four times the work (a duplicate-id scan per lesson made it sixteen: 20,000 lessons
    # took over 12 s).
    assert _library_lines_run(_many_lessons(2_000, None)) < 5 * _library_lines_run(_many_lessons(500, None))

    def read_a_lesson(*args, **kwargs):
        raise AssertionError("a lesson was read")

    monkeypatch.setattr(LibraryReader, "experience", read_a_lesson)
    with pytest.raises(LibraryFileError, match="100000 lessons, more than the file's max_experiences=99999"):
        ExperienceLibrary.from_dict(_many_lessons(100_000, 99_999), origin="big.json")  # refused before reading


def test_a_library_holds_no_more_than_its_cap_and_no_lesson_over_the_character_limit():
    with pytest.raises(ValueError, match="3 lessons, more than max_experiences=2"):
        ExperienceLibrary(["a", "b", "c"], max_experiences=2)
    library = ExperienceLibrary()
    report = library.apply([{"op": "add", "text": "long " * 500}])
    assert report.refused[0].detail == "text has 2499 characters, more than the 2000-character limit of a lesson"


def test_library_file_does_not_import_the_library_module():
    # One-way imports: library/library.py builds on library/file.py, never the other way round.
    tree = ast.parse(Path(library_file.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert "tfgrpo_dspy.library.library" not in imported and "tfgrpo_dspy" not in imported


# Written by the first release (cf99f8a, format 1: no counters, no sources), with that commit's own library.py.
VERSION_1_FILE = Path(__file__).parent / "fixtures" / "library" / "version1.json"


def test_a_version_1_file_is_read_migrated_in_memory_and_left_as_it_was(tmp_path, caplog):
    path = tmp_path / "library.json"
    path.write_bytes(VERSION_1_FILE.read_bytes())
    with caplog.at_level("INFO", logger="tfgrpo_dspy.library.file"):
        library = ExperienceLibrary.load(path)
    assert library.texts == ["When a quantity is given in dozens, convert it to units first.",
                             "When a price is per item, multiply by the count."]
    assert library.next_id == 4 and (library.max_experiences, library.max_words) == (40, 32)
    assert [(e.sources, e.uses, e.helpful, e.harmful) for e in library] == [((), 0, 0, 0)] * 2
    assert [entry.detail for entry in library.audit_log] == ["added E2", "added E3", "deleted E3",
                                                             "unknown id(s): E9"]
    assert caplog.messages == [f"{path}: format version 1 migrated to version 2 as it was read: its lessons start "
                               "with no sources and zero uses, helpful and harmful counts (the file is unchanged)"]
    assert path.read_bytes() == VERSION_1_FILE.read_bytes()  # migrated in memory only
    assert json.loads(library.save(tmp_path / "saved.json").read_text())["version"] == 2  # saving writes the new


def test_a_version_2_or_3_file_is_read_without_a_migration(tmp_path, caplog):
    routed = make("When a, do b.")
    routed.route(1, ["an input"])
    versions = []
    with caplog.at_level("INFO", logger="tfgrpo_dspy.library.file"):
        for library in (make("When a, do b."), routed):
            path = library.save(tmp_path / "lib.json")
            versions.append(json.loads(path.read_text())["version"])
            assert ExperienceLibrary.load(path).same_lessons(library)
    assert versions == [2, 3] and caplog.messages == []  # version 2: what this release writes without routes
