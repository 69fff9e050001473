"""Step 1 of the semantic advantage: an account of one attempt, checked against the reference."""

import dspy


class SummarizeRollout(dspy.Signature):
    """Summarize one attempt of an AI program at a task, so that it can later be compared with other
    attempts at the same input.

    Write a short step-by-step account of what the attempt actually did: the approach it chose, the key
    intermediate results, every tool call that mattered and what it returned, and the final answer.
    Name the lessons from the experience library that the attempt visibly applied (by their ids, such
    as E3). You are told whether the attempt was judged correct and, when known, the reference answer
    and solution: if the attempt was wrong, name the FIRST step where it diverged from the reference
    (a wrong assumption, a skipped check, a misread detail, an arithmetic or tool slip). Judge only from
    the trajectory, the outcome and the reference; do not invent steps."""

    task_inputs: str = dspy.InputField(desc="the input the program received")
    reference: str = dspy.InputField(desc="the reference answer and worked solution, or a note that none is known")
    trajectory: str = dspy.InputField(desc="everything the program did: each step's inputs and outputs, tool calls")
    outcome: str = dspy.InputField(desc="whether the attempt was judged correct, its reward and the grader's feedback")
    experience_library: str = dspy.InputField(desc="the lessons the program was given, as '[E<id>] text' lines")
    summary: str = dspy.OutputField(desc="numbered steps of what the attempt did, ending with its final answer")
    experiences_used: list[str] = dspy.OutputField(desc="ids of lessons the attempt applied, e.g. ['E2']; [] if none")
    first_divergence: str = dspy.OutputField(
        desc="the first step that departs from the reference and why it is wrong, or 'none' if the attempt was sound"
    )
