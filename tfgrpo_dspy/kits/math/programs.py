"""Math programs: a chain-of-thought solver and a ReAct agent that can run Python.

Both map ``problem -> answer`` with the same signature, so an experience library learned with one
reads naturally in the other; the CLI tasks use the agent for training and evaluation alike.
"""

from __future__ import annotations

import dspy

from tfgrpo_dspy.kits.math.sandbox import PythonSandbox


class SolveMathProblem(dspy.Signature):
    """Solve the math problem. Reason carefully and check your result.
    Give only the final answer: a number or a simplified exact expression, without units or words."""

    problem: str = dspy.InputField()
    answer: str = dspy.OutputField(desc="the final answer only, e.g. 34 or \\frac{3}{4}")


def make_cot_solver() -> dspy.Module:
    """``dspy.ChainOfThought`` over `SolveMathProblem`."""
    return dspy.ChainOfThought(SolveMathProblem)


def make_python_tool(sandbox: PythonSandbox | None = None) -> dspy.Tool:
    """The agent's ``run_python`` tool: runs a script in `sandbox` and returns its output."""
    sandbox = sandbox or PythonSandbox()
    return dspy.Tool(
        sandbox.__call__,
        name="run_python",
        desc=(
            "Run a Python 3 script in a fresh sandbox and return what it prints (stdout, stderr). "
            "Nothing persists between calls; use print() to see results. sympy is available. "
            f"Limits: {sandbox.timeout_seconds:g} s, {sandbox.memory_bytes >> 20} MiB, no network."
        ),
    )


def make_math_agent(sandbox: PythonSandbox | None = None, max_iters: int = 6) -> dspy.ReAct:
    """``dspy.ReAct`` over `SolveMathProblem` with the ``run_python`` tool."""
    if not isinstance(max_iters, int) or max_iters < 1:
        raise ValueError(f"max_iters must be a positive int, got {max_iters!r}")
    return dspy.ReAct(SolveMathProblem, tools=[make_python_tool(sandbox)], max_iters=max_iters)
