"""tfgrpo-dspy: Training-Free GRPO as a DSPy optimizer.

    optimizer = TrainingFreeGRPO(metric=metric, group_size=5, epochs=3)
    compiled = optimizer.compile(program, trainset=trainset, valset=valset)
    compiled.experience_library.save("library.json")
    compiled.save("program.json")  # later: load_program(dspy.ChainOfThought(...), "program.json")
"""

from tfgrpo_dspy.inference.injection import ExperiencePredict, library_of, load_program, with_experiences
from tfgrpo_dspy.inference.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.library.edits import ApplyReport, AuditEntry, EditOp
from tfgrpo_dspy.library.file import Experience
from tfgrpo_dspy.library.library import ExperienceLibrary, LibraryDiff
from tfgrpo_dspy.optimizer import TrainingAborted, TrainingFreeGRPO
from tfgrpo_dspy.run.results import Candidate, RunEstimate, StepStats, TrainingFreeGRPOResult
from tfgrpo_dspy.settings import TrainingFreeGRPOSettings
from tfgrpo_dspy.stats import PairedComparison, compare_paired
from tfgrpo_dspy.usage import Usage

__all__ = [
    "ApplyReport",
    "AuditEntry",
    "Candidate",
    "EditOp",
    "Experience",
    "ExperienceLibrary",
    "ExperiencePredict",
    "GroupOutcome",
    "LibraryDiff",
    "PairedComparison",
    "Rollout",
    "RunEstimate",
    "StepStats",
    "TrainingAborted",
    "TrainingFreeGRPO",
    "TrainingFreeGRPOResult",
    "TrainingFreeGRPOSettings",
    "Usage",
    "compare_paired",
    "library_of",
    "load_program",
    "with_experiences",
]
__version__ = "0.2.0"
