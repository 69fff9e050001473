"""Step 3: the batch update that turns a step's proposals into the final library edits."""

import dspy

from tfgrpo_dspy.library.edits import EditOp


class UpdateLibrary(dspy.Signature):
    """You maintain an experience library: short, general lessons that are shown to an AI program
    before every task. Lessons were proposed this round by comparing good and bad attempts; each
    proposal says how many different training inputs supported it. Decide the final edits.

    - Keep the library small, general and non-redundant: merge lessons that say the same thing (op
      "merge" with the ids and the combined text), modify a lesson that a proposal sharpens or corrects,
      and add only genuinely new lessons. Prefer proposals with more support.
    - Delete only a lesson that a proposal marks as misleading or whose record shows it harmful.
    - Every lesson reads "When <condition>, <action>.", stays within the word limit, and names no detail
      of a specific input.
    - The library may hold at most max_experiences lessons after your edits.
    - If no proposal is worth acting on, return a single op "keep".
    Refer to existing lessons by their numeric id (E3 -> 3)."""

    experience_library: str = dspy.InputField(desc="the current lessons, as '[E<id>] text (record)' lines")
    proposals: str = dspy.InputField(desc="this round's proposals, one per line, with their support")
    max_experiences: int = dspy.InputField(desc="the most lessons the library may hold")
    max_words: int = dspy.InputField(desc="the most words one lesson may have")
    operations: list[EditOp] = dspy.OutputField(desc="the final edits: add / modify / merge / delete, or one keep")
