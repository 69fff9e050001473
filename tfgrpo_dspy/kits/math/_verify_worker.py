"""Worker process for `tfgrpo_dspy.kits.math.reward.AnswerVerifier` (run as a script, not imported).

Reads one JSON request per line on stdin, ``{"gold": ..., "answer": ...}``, and writes one JSON
reply per line: ``{"equal": bool}`` or ``{"error": "..."}``. The parent enforces the time limit by
killing this process, so math-verify's own signal-based timeouts are switched off.
"""

import json
import logging
import sys

from math_verify import parse, verify


def _check(gold: str, answer: str) -> dict:
    try:
        gold_parsed = parse(gold, parsing_timeout=None)
        answer_parsed = parse(answer, parsing_timeout=None)
        if not gold_parsed:
            return {"error": f"math-verify could not parse the gold answer {gold!r}"}
        equal = bool(answer_parsed) and verify(gold_parsed, answer_parsed, timeout_seconds=None)
        return {"equal": bool(equal)}
    except BaseException as err:  # math-verify raises BaseException subclasses; report, keep serving
        if isinstance(err, (KeyboardInterrupt, SystemExit)):
            raise
        return {"error": f"{type(err).__name__}: {err}"}


def main() -> None:
    logging.disable(logging.WARNING)  # math-verify warns on every call that timeouts are off
    _check("\\boxed{\\frac{1}{2}}", "\\boxed{0.5}")  # warm up lazy imports: deadlines then time checks only
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        print(json.dumps(_check(request["gold"], request["answer"])), flush=True)


if __name__ == "__main__":
    main()
