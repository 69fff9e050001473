"""Math kit: DAPO-Math / AIME / GSM8K loaders, a math-verify reward, a Python sandbox, programs, CLI tasks."""

from tfgrpo_dspy.kits.math.data import load_aime24, load_aime25, load_dapo_math, load_gsm8k, strip_dapo_wrapper
from tfgrpo_dspy.kits.math.programs import SolveMathProblem, make_cot_solver, make_math_agent, make_python_tool
from tfgrpo_dspy.kits.math.reward import AnswerVerifier, MathAnswerMetric, VerificationTimeout, extract_answer
from tfgrpo_dspy.kits.math.sandbox import (
    Isolation,
    PythonSandbox,
    SandboxResult,
    SandboxUnavailable,
    probe_isolation,
)
from tfgrpo_dspy.kits.math.task import MATH_TASKS

__all__ = [
    "MATH_TASKS",
    "AnswerVerifier",
    "Isolation",
    "MathAnswerMetric",
    "PythonSandbox",
    "SandboxResult",
    "SandboxUnavailable",
    "SolveMathProblem",
    "VerificationTimeout",
    "extract_answer",
    "load_aime24",
    "load_aime25",
    "load_dapo_math",
    "load_gsm8k",
    "make_cot_solver",
    "make_math_agent",
    "make_python_tool",
    "probe_isolation",
    "strip_dapo_wrapper",
]
