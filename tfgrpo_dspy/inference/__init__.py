"""The program with a library: the lessons put into its predictors, a run of it on one example, its evaluation.

    injection.py    `ExperiencePredict`: the lessons shown on every call (placement, top-k retrieval), saved and
                    loaded with the program; `with_experiences`, `library_of`, `load_program`
    block.py        the marked block of lessons in a predictor's instructions, rendered and read back
    retrieval.py    which lessons one call is shown: BM25 top-k, or the nearest training input's route
    rollouts.py     one run of a program on one example on private LM copies: trace, score, exact usage
    scoring.py      a rollout's reward: a DSPy metric in any of its forms, or the group's majority vote
    outputs.py      what a rollout records of the outputs: bounded JSON, the answer as text, tool calls
    majority.py     the majority baseline: every input given the most frequent training answer
    evaluation.py   Mean@k / Pass@k of a program, with or without a library, resumable
    eval_report.py  what an evaluation reports: `EvalReport`, per example and sample; unbiased pass@k
    checkpoint.py   an evaluation's finished samples on disk, and the program fingerprint they are kept for

Imports only the library (``tfgrpo_dspy.library``) and the base modules (settings, usage, parallel). The
reflection and the run build on it.
"""
