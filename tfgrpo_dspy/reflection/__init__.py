"""The reflection: the LM compares rollouts and failures and writes candidate lessons; code judges the texts.

    reflection.py   `Reflector`: every reflection call (summaries, lessons, inductions, updates, rewrites) on a
                    private LM copy, with exact usage and no exception escaping
    records.py      what the calls return: summaries, proposals, update decisions, raw lessons
    formatting.py   the text the prompts are given: references, answers, trajectories, attempts, the library
    parsing.py      the answers read back: lesson ids, 'When <condition>, <action>.' lines
    steps.py        `ReflectionSignatures`: the Signature each step runs, the defaults or a user's own
    induction.py    several failed examples at once -> candidate rules that would fix them all
    lessons.py      lesson texts judged in code: restated examples, copied prompts, vague conditions, clusters
    guard.py        `LessonGuard`: every text headed for the library passes the same checks (and rewrites)

The prompts themselves are ``tfgrpo_dspy.signatures``. Imports the library, the inference package (a reflection
reads rollouts) and the base modules; nothing here decides what enters the library: that is ``tfgrpo_dspy.run``.
"""
