"""The reflection prompts of Training-Free GRPO, as DSPy Signatures: one module per step.

Their docstrings and field descriptions are the prompts the reflection LM sees; they decide whether
the method works. They are installed as ``tfgrpo_dspy.signatures`` (this folder is mapped into the
package by ``pyproject.toml``), so review and change them here like any other code.

    summarize.SummarizeRollout   one attempt -> what it did, which lessons it used, where it diverged
    extract.ExtractLesson        a group of scored attempts -> at most a few general lessons, or none
    extract.ExtractLessonLines   the same, the lessons written one per line instead of as a JSON list
    induce.InduceLesson          several failed inputs at once -> one candidate rule (verified before use)
    update.UpdateLibrary         the step's clustered proposals + the library -> the final edits
    rewrite.GeneralizeLesson     a lesson that restates its example -> the strategy behind it
    rewrite.ShortenLesson        an over-long lesson -> the same lesson within the word limit

To try a prompt of your own, pass a Signature with the same field names:
``TrainingFreeGRPO(..., signatures={"extract": MyExtractLesson})``.
"""

from tfgrpo_dspy.signatures.extract import ExtractLesson, ExtractLessonLines, ProposedLesson
from tfgrpo_dspy.signatures.induce import InduceLesson
from tfgrpo_dspy.signatures.rewrite import GeneralizeLesson, ShortenLesson
from tfgrpo_dspy.signatures.summarize import SummarizeRollout
from tfgrpo_dspy.signatures.update import UpdateLibrary

__all__ = [
    "ExtractLesson",
    "ExtractLessonLines",
    "GeneralizeLesson",
    "InduceLesson",
    "ProposedLesson",
    "ShortenLesson",
    "SummarizeRollout",
    "UpdateLibrary",
]
