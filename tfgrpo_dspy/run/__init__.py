"""The run: step after step, sample -> reflect -> verify or update -> gate, every result logged and resumable.

    compile.py        `run_compile`: one compile start to finish (what `TrainingFreeGRPO.compile` calls), and
                      `compiled_program`, the student carrying the shipped library
    inputs.py         the student and examples checked; the selection set split off the trainset
    manifest.py       what identifies a run, so a resume continues only the same run
    estimate.py       upper bounds on the calls a compile would make
    loop.py           `StepLoop`: the steps, the lesson counters and pruning, the best library seen
    phases.py         the phases of one step, each parallel and logged: rollouts, summaries, lessons,
                      inductions, checks, the update
    verification.py   a candidate lesson is kept only if re-running the policy proves it helps
    update.py         the update phase: clustered proposals become edits of a candidate library
    gate.py           a step's edits stay only if the edited library wins on the selection set
    selection.py      libraries scored on the selection set, compared pairwise
    context.py        `RunContext`: what every phase needs, built complete in one place
    accounting.py     what the run has spent by role; budgets (a clean stop) and errors (an abort)
    runlog.py         the log directory: every paid-for result on disk, its layout in one place
    results.py        what a compile returns and records: steps, candidates, the estimate

Imports the reflection, the inference package, the library and the base modules; the optimizer
(``tfgrpo_dspy.optimizer``) holds the settings and calls `run_compile`, and nothing below imports this package.
"""
