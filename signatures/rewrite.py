"""Repairs applied in code to a lesson that breaks a rule: too specific, or too long."""

import dspy


class GeneralizeLesson(dspy.Signature):
    """A proposed lesson for an AI program's experience library restates details or the answer of the
    one input it was learned from, so it cannot help on any other input. Rewrite it as the general
    strategy behind it: one sentence "When <kind of situation>, <what to do>.", with no names, numbers,
    objects or answers from that input."""

    lesson: str = dspy.InputField(desc="the proposed lesson")
    task_input: str = dspy.InputField(desc="the input it was learned from; none of its details may appear")
    problem: str = dspy.InputField(desc="which details of the input the lesson repeats")
    max_words: int = dspy.InputField(desc="the most words the rewritten lesson may have")
    general_lesson: str = dspy.OutputField(desc="the general strategy, one sentence starting with 'When'")


class ShortenLesson(dspy.Signature):
    """Rewrite a lesson for an AI program's experience library so it fits the word limit. Keep its
    condition and its advice, drop examples, numbers and names of any particular input, and keep the
    form "When <situation>, <what to do>." as one sentence."""

    lesson: str = dspy.InputField(desc="the lesson that is too long")
    max_words: int = dspy.InputField(desc="the most words the rewritten lesson may have")
    short_lesson: str = dspy.OutputField(desc="the same lesson in at most max_words words")
