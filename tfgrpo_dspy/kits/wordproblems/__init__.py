"""Word-problems kit: generated problems with traps, for the offline demo (``tfgrpo demo``)."""

from tfgrpo_dspy.kits.wordproblems.generator import FAMILIES, generate_problems, split_of, train_heldout_split
from tfgrpo_dspy.kits.wordproblems.metric import numeric_match, parse_number
from tfgrpo_dspy.kits.wordproblems.task import WORDPROBLEM_TASKS, WORDPROBLEMS, make_program

__all__ = [
    "FAMILIES",
    "WORDPROBLEMS",
    "WORDPROBLEM_TASKS",
    "generate_problems",
    "make_program",
    "numeric_match",
    "parse_number",
    "split_of",
    "train_heldout_split",
]
