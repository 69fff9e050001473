"""The three reflection steps of Training-Free GRPO, as DSPy Signatures.

Their docstrings are the prompts the reflection LM sees. They decide whether the method works:
a lesson must be general ("when <condition>, <strategy>"), short, and grounded in the
difference between attempts that scored well and attempts that scored badly.
"""

from __future__ import annotations

import dspy

from tfgrpo_dspy.library import EditOp


class SummarizeRollout(dspy.Signature):
    """Summarize one attempt of an AI program at a task, so that it can later be compared with other
    attempts at the same input.

    Write a short step-by-step account of what the attempt actually did: the approach it chose, the key
    intermediate results, every tool call that mattered and what it returned, and the final answer.
    Then name the lessons from the experience library that the attempt visibly applied (by their ids,
    such as E3), and pinpoint the first step where it went wrong, if it did: the wrong assumption,
    the skipped check, the misread detail, the arithmetic or tool slip. Judge only from the trajectory
    and the outcome given; do not solve the task yourself and do not invent steps."""

    task_inputs: str = dspy.InputField(desc="the input the program received")
    trajectory: str = dspy.InputField(desc="everything the program did: each step's inputs and outputs, tool calls")
    outcome: str = dspy.InputField(desc="the reward the attempt earned and the grader's feedback")
    experience_library: str = dspy.InputField(desc="the lessons the program was given, as '[E<id>] text' lines")
    summary: str = dspy.OutputField(desc="numbered steps of what the attempt did, ending with its final answer")
    experiences_used: list[str] = dspy.OutputField(desc="ids of lessons the attempt applied, e.g. ['E2']; [] if none")
    where_it_went_wrong: str = dspy.OutputField(
        desc="the first wrong step and why it was wrong, or 'nothing' if the attempt was sound"
    )


class ExtractLessons(dspy.Signature):
    """Several attempts of the same AI program at the same input were scored. Compare the attempts that
    scored above the group's average (positive advantage) with those below it, find what made the
    difference, and propose edits to the experience library that would make future attempts at OTHER,
    similar inputs succeed.

    Rules for every lesson:
    - It is a transferable strategy, written as "When <condition that can be recognised in a new
      input>, <what to do>". Never state a fact about this particular input (no names, numbers or
      answers from it); a lesson that only helps on this input is worthless.
    - It captures why the better attempts won or the worse ones failed: a method, a check, a trap to
      avoid, a tool to use a certain way.
    - It respects the word limit. Prefer sharpening (modify) an existing lesson that covers the same
      situation over adding a near-duplicate; propose deleting a lesson the attempts show to be
      misleading.
    The attempts earned different rewards, so there is always something to learn: first say what the
    worse attempts did differently from the better ones, then propose at least one edit. Use op "add"
    (text), "modify" (id of an existing lesson, text) or "delete" (id), each with a short reason."""

    task_inputs: str = dspy.InputField(desc="the input all attempts received")
    reference: str = dspy.InputField(desc="the correct answer if known, else a note that it is unknown")
    attempts: str = dspy.InputField(
        desc="each attempt's reward, advantage ((reward - group mean) / group std) and summary"
    )
    experience_library: str = dspy.InputField(desc="the current lessons, as '[E<id>] text' lines")
    max_proposals: int = dspy.InputField(desc="the most edits you may propose")
    max_words: int = dspy.InputField(desc="the most words one lesson may have")
    difference: str = dspy.OutputField(desc="what the worse attempts did differently from the better ones")
    proposals: list[EditOp] = dspy.OutputField(
        desc="1 to max_proposals edits; each text is one sentence starting with 'When' that names a situation "
        "and says what to do in it"
    )


class UpdateLibrary(dspy.Signature):
    """You maintain an experience library: short, general lessons that are shown to an AI program
    before every task. Edit proposals were collected from comparing good and bad attempts on several
    inputs. Decide the final edits for this round.

    - Keep the library small, general and non-redundant: merge proposals and existing lessons that say
      the same thing (op "merge" with the ids merged and the combined text), modify a lesson that a
      proposal sharpens or corrects, delete lessons that proposals show to be wrong or harmful, and add
      only genuinely new lessons.
    - Every lesson reads "When <condition>, <strategy>", stays within the word limit, and names no
      detail of a specific input.
    - The library may hold at most max_experiences lessons after your edits; when it is full, merge or
      delete before adding.
    - If no proposal is worth acting on, return a single op "keep".
    Refer to existing lessons by their numeric id (E3 -> 3)."""

    experience_library: str = dspy.InputField(desc="the current lessons, as '[E<id>] text' lines")
    proposals: str = dspy.InputField(desc="the proposed edits of this round, one per line, with their reasons")
    max_experiences: int = dspy.InputField(desc="the most lessons the library may hold")
    max_words: int = dspy.InputField(desc="the most words one lesson may have")
    operations: list[EditOp] = dspy.OutputField(desc="the final edits: add / modify / merge / delete, or one keep")


class ShortenLesson(dspy.Signature):
    """Rewrite a lesson for an AI program's experience library so it fits the word limit. Keep its
    condition and its advice, drop examples, numbers and names of any particular input, and keep the
    form "When <situation>, <what to do>." as one sentence."""

    lesson: str = dspy.InputField(desc="the lesson that is too long")
    max_words: int = dspy.InputField(desc="the most words the rewritten lesson may have")
    short_lesson: str = dspy.OutputField(desc="the same lesson in at most max_words words")


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
