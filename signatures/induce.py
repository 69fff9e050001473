"""Step 2b: several failed inputs at once -> one candidate rule that would fix them all.

One input cannot show a rule (a house rule, a convention) that only a few inputs sharing their right
answer reveal together; a small reflector that sees several at once can name what they share. Its
rules are only candidates: each is re-run on training examples before it may enter the library
(`tfgrpo_dspy.verification`). Plain text in, two short fields out: the format a 1.5B model follows.
"""

import dspy


class InduceLesson(dspy.Signature):
    """An AI program answered every input below wrong. Find what these inputs have in common, and write
    one rule that would make the program answer them, and new inputs like them, correctly: a condition
    to look for in an input, and what to do then. Write the condition in general words that fit new
    inputs too, not names, numbers or sentences copied from these inputs."""

    failures: str = dspy.InputField(desc="the inputs, each with its correct answer and what the program answered")
    condition: str = dspy.OutputField(desc="what each of these inputs has that says the rule applies, e.g. 'the "
                                      "input asks to ...'")
    action: str = dspy.OutputField(desc="what the program should do or answer when the condition holds")
