"""The experience library: ordered lessons with stable ids, the edits that change them, the file that holds them.

    library.py   `ExperienceLibrary`: the lessons, their caps, ``apply`` (edits with an audit log), diff, save, load
    diff.py      `LibraryDiff`: what changed between two libraries, matched by id
    routing.py   the routes (training inputs and the lessons shown near them) kept in step with edits
    edits.py     `EditOp` (what the reflection writes), `AuditEntry` and `ApplyReport` (what happened to each edit)
    file.py      what a library file holds and how it is read: every field checked, every problem named
    jsonio.py    JSON files written atomically and read with one clear error (library files, the run log)

The bottom layer of the package: it imports nothing else of ``tfgrpo_dspy``; inside it, library.py builds on
the other modules, never the other way round. The public names are re-exported by ``tfgrpo_dspy``.
"""
