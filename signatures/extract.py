"""Step 2: the group comparison that turns rewards into at most a few general lessons (or none)."""

import dspy
from pydantic import BaseModel, Field


class ProposedLesson(BaseModel):
    """One lesson, in two parts that code checks and renders as "When <condition>, <action>."."""

    condition: str = Field(description="the kind of situation, recognisable in a NEW input: no names, numbers, "
                           "objects or answers from this one (e.g. 'a price is given per item')")
    action: str = Field(description="what to do in that situation (e.g. 'multiply it by the number of items first')")
    replaces: str | None = Field(default=None, description="id of an existing lesson this one corrects or "
                                 "sharpens, such as E3, or null for a new lesson")


class ExtractLesson(dspy.Signature):
    """Several attempts of the same AI program at the same input were scored. Compare the attempts that
    scored above the group's average (positive advantage) with those below it, and the reference solution
    when there is one: find the first step where a worse attempt went wrong. Then decide whether that
    mistake teaches a GENERAL lesson that would help on OTHER inputs of this task.

    - A lesson is a transferable strategy: a condition that can be recognised in a new input, and what
      to do then. It never mentions a name, number, object or answer of this input.
    - How a lesson is made, on another task: a worse attempt added "1 hour 30 minutes" and "45 minutes"
      as 1.30 + 45. A good lesson: condition "durations mix hours and minutes", action "turn every
      duration into minutes before adding". A bad lesson: "When the walk takes 1 hour 30 minutes, the
      total is 135 minutes" (it restates that input).
    - Return an empty list when the worse attempts only slipped once (a miscount or typo no advice would
      prevent) or a lesson in the library already covers the mistake.
    - If an existing lesson misled the worse attempts, list its id as misleading; if the better attempts
      followed a lesson, list its id as useful.
    Propose at most max_lessons lessons."""

    task_inputs: str = dspy.InputField(desc="the input all attempts received")
    reference: str = dspy.InputField(desc="the reference answer and worked solution, or a note that none is known")
    attempts: str = dspy.InputField(desc="each attempt's reward, advantage ((reward - mean) / std) and summary")
    experience_library: str = dspy.InputField(desc="the current lessons, as '[E<id>] text' lines")
    max_lessons: int = dspy.InputField(desc="the most lessons you may propose")
    max_words: int = dspy.InputField(desc="the most words one lesson (condition and action together) may have")
    difference: str = dspy.OutputField(desc="the first step where a worse attempt went wrong and what the better "
                                       "attempts or the reference did there, in your own words")
    lessons: list[ProposedLesson] = dspy.OutputField(desc="0 to max_lessons general lessons; [] when there is none")
    misleading: list[str] = dspy.OutputField(desc="ids of existing lessons that misled the worse attempts, such as "
                                             "['E3']; [] if none")
    useful: list[str] = dspy.OutputField(desc="ids of existing lessons the better attempts followed; [] if none")


# The same comparison with the lessons written as lines instead of a JSON list of objects: the JSON schema the
# ChatAdapter puts in the prompt for list[ProposedLesson], and the keys and quotes of the answer, cost tokens on
# every call. `benchmarks/extract_format.py` (removed; last in commit e331611) measured both on the same groups.
ExtractLessonLines = ExtractLesson.with_updated_fields(
    "lessons", type_=str,
    desc="0 to max_lessons general lessons, one per line, each 'When <condition>, <action>.', ending with "
         "'(replaces E3)' when it corrects or sharpens that existing lesson; the word none when there is none",
)
