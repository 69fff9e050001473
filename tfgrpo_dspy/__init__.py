"""tfgrpo-dspy: Training-Free GRPO as a DSPy optimizer.

    optimizer = TrainingFreeGRPO(metric=metric, group_size=5, epochs=3)
    compiled = optimizer.compile(program, trainset=trainset)
    compiled.experience_library.save("library.json")
"""

from tfgrpo_dspy.injection import with_experiences
from tfgrpo_dspy.library import ApplyReport, AuditEntry, EditOp, Experience, ExperienceLibrary, LibraryDiff
from tfgrpo_dspy.optimizer import (
    RunEstimate,
    StepStats,
    TrainingAborted,
    TrainingFreeGRPO,
    TrainingFreeGRPOResult,
)
from tfgrpo_dspy.rollouts import GroupOutcome, Rollout
from tfgrpo_dspy.usage import Usage

__all__ = [
    "ApplyReport",
    "AuditEntry",
    "EditOp",
    "Experience",
    "ExperienceLibrary",
    "GroupOutcome",
    "LibraryDiff",
    "Rollout",
    "RunEstimate",
    "StepStats",
    "TrainingAborted",
    "TrainingFreeGRPO",
    "TrainingFreeGRPOResult",
    "Usage",
    "with_experiences",
]
__version__ = "0.1.0"
