"""Math answer reward: read the final answer of a prediction, check it against the gold with math-verify.

math-verify's default timeouts use ``signal.alarm``, which fails outside the main thread, and DSPy
runs metrics in worker threads. So every check runs in a small worker process (math-verify's own
timeouts off) that the calling thread waits for with a deadline and kills when it is exceeded.
Workers are reused; a killed one is replaced on the next call.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import dspy

logger = logging.getLogger(__name__)

_WORKER_SCRIPT = Path(__file__).with_name("_verify_worker.py")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_ANSWER_LINE = re.compile(r"answer\s*(?:is)?\s*[:：]\s*([^\n]+)", re.IGNORECASE)
_PROSE = re.compile(r"[A-Za-z]{3,}\s+[A-Za-z]{3,}")  # two words in a row: a sentence, not a formula


class VerificationTimeout(Exception):
    """A math-verify check took longer than its deadline; its worker was killed."""


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in text, nested braces included."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth = 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i:j].strip()
    return None


def extract_answer(text: str | None) -> str | None:
    """The final answer written in ``text``: last \\boxed{X}, else last "Answer: X", else the text
    itself when it is a short formula, else the last number. None when nothing is found."""
    text = (text or "").strip()
    if not text:
        return None
    boxed = last_boxed(text)
    if boxed:
        return boxed
    lines = _ANSWER_LINE.findall(text)
    if lines:
        candidate = lines[-1].strip().strip("*").strip().rstrip(".").strip()
        if candidate:
            return last_boxed(candidate) or candidate
    plain = re.sub(r"\\[A-Za-z]+", "", text)
    if len(text) <= 60 and not _PROSE.search(plain):
        return text.strip("$ ").rstrip(".")
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


def _as_boxed(answer: str) -> str:
    return answer if "\\boxed" in answer else f"\\boxed{{{answer}}}"


def _normalised(answer: str) -> str:
    return re.sub(r"[\s$,]", "", answer).rstrip(".")


class _Worker:
    """One math-verify process with a JSON-lines pipe."""

    def __init__(self, start_timeout: float) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(_WORKER_SCRIPT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._buffer = ""
        if self.read_reply(start_timeout).get("ready") is not True:
            raise RuntimeError("math-verify worker did not start")

    def ask(self, request: dict, timeout: float) -> dict:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        return self.read_reply(timeout)

    def read_reply(self, timeout: float) -> dict:
        stdout = self.process.stdout
        assert stdout is not None
        deadline = time.monotonic() + timeout
        while "\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([stdout], [], [], remaining)[0]:
                raise VerificationTimeout(f"no answer from math-verify within {timeout:g}s")
            chunk = os.read(stdout.fileno(), 65536).decode()
            if not chunk:
                raise RuntimeError("math-verify worker exited")
            self._buffer += chunk
        line, self._buffer = self._buffer.split("\n", 1)
        return json.loads(line)

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


class AnswerVerifier:
    """Thread-safe, time-bounded ``math_verify.verify(parse(gold), parse(answer))``.

    Args:
        timeout_seconds: deadline of one check (parse + verify).
        start_timeout_seconds: deadline for a new worker to import math-verify.
        max_idle_workers: workers kept for reuse; one per concurrent caller is started on demand.
    """

    def __init__(
        self, timeout_seconds: float = 5.0, start_timeout_seconds: float = 60.0, max_idle_workers: int = 8
    ) -> None:
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0, got {timeout_seconds!r}")
        self.timeout_seconds = timeout_seconds
        self.start_timeout_seconds = start_timeout_seconds
        self.max_idle_workers = max_idle_workers
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def equal(self, gold: str, answer: str) -> bool:
        """Whether ``answer`` equals ``gold`` (bare values are wrapped as \\boxed{}; gold first).

        Raises VerificationTimeout past the deadline, RuntimeError if math-verify fails on the input.
        """
        with self._lock:
            worker = self._idle.pop() if self._idle else None
        if worker is None:
            worker = _Worker(self.start_timeout_seconds)
        try:
            reply = worker.ask({"gold": _as_boxed(gold), "answer": _as_boxed(answer)}, self.timeout_seconds)
        except BaseException:
            worker.kill()  # it may be stuck in sympy: never reuse it
            raise
        with self._lock:
            if len(self._idle) < self.max_idle_workers:
                self._idle.append(worker)
                worker = None
        if worker is not None:
            worker.kill()
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return bool(reply["equal"])

    def close(self) -> None:
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()


_shared_verifier: AnswerVerifier | None = None
_shared_lock = threading.Lock()


def shared_verifier() -> AnswerVerifier:
    """One verifier (and its worker processes) for the whole process, closed at exit."""
    global _shared_verifier
    with _shared_lock:
        if _shared_verifier is None:
            _shared_verifier = AnswerVerifier()
            atexit.register(_shared_verifier.close)
        return _shared_verifier


class MathAnswerMetric:
    """DSPy metric: 1.0 when the prediction's final answer equals the gold answer, else 0.0.

    Returns ``dspy.Prediction(score=..., feedback=...)``; the feedback names the extracted answer
    and the gold one. The answer is read from ``pred.<answer_field>``, or from ``pred.reasoning``
    when that field is empty.

    Args:
        verifier: the checker; defaults to the process-wide `shared_verifier()`.
        answer_field: field of the prediction and of the example holding the answer.
    """

    def __init__(self, verifier: AnswerVerifier | None = None, answer_field: str = "answer") -> None:
        self._verifier = verifier
        self.answer_field = answer_field

    @property
    def verifier(self) -> AnswerVerifier:
        return self._verifier or shared_verifier()

    def __call__(
        self, example: Any, pred: Any, trace: Any = None, pred_name: Any = None, pred_trace: Any = None
    ) -> dspy.Prediction:
        gold = str(example[self.answer_field]).strip()
        text = _field(pred, self.answer_field)
        if not (text or "").strip():
            text = _field(pred, "reasoning")
        answer = extract_answer(text)
        if answer is None:
            return _result(
                0.0,
                "Incorrect: no final answer could be read from the prediction (expected \\boxed{X}, "
                f"a line 'Answer: X' or a final number). The gold answer is {gold!r}.",
            )
        if _normalised(answer) == _normalised(gold):
            return _result(1.0, f"Correct: the extracted answer {answer!r} equals the gold answer {gold!r}.")
        try:
            equal = self.verifier.equal(gold, answer)
        except VerificationTimeout:
            logger.warning("math-verify timed out on gold=%r answer=%r", gold, answer)
            return _result(
                0.0,
                f"Incorrect: checking the extracted answer {answer!r} against the gold answer {gold!r} "
                "timed out.",
            )
        if equal:
            return _result(1.0, f"Correct: the extracted answer {answer!r} equals the gold answer {gold!r}.")
        return _result(
            0.0, f"Incorrect: the extracted answer {answer!r} differs from the gold answer {gold!r}."
        )


def _field(pred: Any, name: str) -> str | None:
    value = pred.get(name) if hasattr(pred, "get") else getattr(pred, name, None)
    return None if value is None else str(value)


def _result(score: float, feedback: str) -> dspy.Prediction:
    return dspy.Prediction(score=score, feedback=feedback)
