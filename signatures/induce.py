"""Step 2b: several failed inputs at once -> one candidate rule that would fix them all.

One input cannot show a rule (a house rule, a convention) that only a few inputs sharing their right
answer reveal together; a small reflector that sees several at once can name what they share. Its
rules are only candidates: each is re-run on training examples before it may enter the library
(`tfgrpo_dspy.run.verification`). Plain text in, two short fields out: the format a 1.5B model follows.
Measured on the failure sets of a development run (train seed 11, 15 draws per variant): showing the
program's wrong answers made the 1.5B model write rules about the program ("When the program answered
field-ops, ...") and copy a header that stated the shared answer; the inputs with their correct answers
alone gave the most rules about the inputs ("the customer disputes a payment", "a subscription
cancellation"), and asking for the shared answer as the action put it in 13 of 15 rules (a few without it).
Those rules still described the set, not what sets it apart ("the inputs relate to closing a business and
a refund"), and matched inputs with other answers; so the inputs it must be told apart from are shown too
(inputs the program confuses with them, then the nearest ones with another answer), each with its answer,
and the condition is asked to hold for the first list and not the second.
"""

import dspy


class InduceLesson(dspy.Signature):
    """An AI program answered every input in the first list wrong. Find what these inputs have in common that
    the inputs in the second list do not have (those need other answers), and write one rule that would
    make the program answer the first inputs, and new inputs like them, correctly: a condition that is true
    for every input of the first list and for none of the second, and what to do then. Describe the inputs,
    not the program."""

    failures: str = dspy.InputField(desc="the inputs the program got wrong, and their correct answers")
    contrast: str = dspy.InputField(desc="other inputs, with other correct answers: the condition must not match "
                                    "them")
    condition: str = dspy.OutputField(desc="what the first inputs ask for or are about and the others are not, in "
                                      "a few general words")
    action: str = dspy.OutputField(desc="what the program should answer then; when the inputs share one correct "
                                   "answer, that answer")
