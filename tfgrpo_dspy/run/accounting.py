"""What a run has spent, by role, and when it must stop: budgets (a clean stop) and errors (an abort).

Roles: "policy" (rollouts), "reflection" (summaries, lessons, inductions, updates, rewrites),
"verification" (re-running training examples with a candidate lesson) and "selection" (scoring
libraries on the selection set). Budgets count everything paid for, including work logged
by an earlier session of the same run. Errors are judged as a rate: a run aborts once at least
``min_errors`` calls failed AND they are ``max_error_rate`` of the calls so far, so a dead server
stops a run within seconds while a 2% parse-failure rate never does. A run too small to reach
``min_errors`` is judged at the end of each phase (`Ledger.check_all_failed`): if every call of the
session so far failed, it aborts with the first error, so a run whose every call failed never
ends as a success.
"""

from __future__ import annotations

import textwrap
import threading
from collections import Counter
from collections.abc import Callable

from tfgrpo_dspy.usage import Usage

ROLES = ("policy", "reflection", "verification", "selection")
MAX_ERROR_CHARS = 400  # an error in an abort message: cut at a word, never mid-word


class StopRun(Exception):
    """A budget is exhausted: the run ends cleanly with the library of the last completed step."""


class TrainingAborted(RuntimeError):
    """The run failed systematically (see `Ledger`); its log_dir stays resumable."""


class Ledger:
    """Thread-safe usage by role, budget checks and the error rate of one run."""

    def __init__(
        self,
        *,
        max_lm_calls: int | None = None,
        max_tokens: int | None = None,
        max_cost: float | None = None,
        max_error_rate: float = 0.25,
        min_errors: int = 10,
        on_abort: Callable[[str], None] | None = None,
    ):
        self.max_lm_calls = max_lm_calls
        self.max_tokens = max_tokens
        self.max_cost = max_cost
        self.max_error_rate = max_error_rate
        self.min_errors = min_errors
        self.on_abort = on_abort
        self.by_role: dict[str, Usage] = {role: Usage() for role in ROLES}
        self.attempts = 0
        self.errors: Counter[str] = Counter()
        self.first_error: str | None = None
        self._lock = threading.Lock()

    @property
    def spent(self) -> Usage:
        return Usage.total(self.by_role.values())

    def add(self, role: str, usage: Usage) -> None:
        """Count usage that is paid for (also work reused from an earlier session's log)."""
        if role not in self.by_role:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        with self._lock:
            self.by_role[role] = self.by_role[role] + usage

    def record(self, role: str, usage: Usage, error: str | None, what: str) -> None:
        """Count one unit of work done in this session; abort when failures are systematic."""
        self.add(role, usage)
        with self._lock:
            self.attempts += 1
            if not error:
                return
            cause = f"{what}: {textwrap.shorten(error, MAX_ERROR_CHARS, placeholder=' [...]')}"
            self.errors[cause] += 1
            self.first_error = self.first_error or cause
            failures = sum(self.errors.values())
            if failures < self.min_errors or failures < self.max_error_rate * self.attempts:
                return
            cause, count = self.errors.most_common(1)[0]
            message = (f"{failures} of {self.attempts} calls in this session failed, most often ({count}x) {cause}. "
                       "Fix the cause and rerun with the same log_dir to resume.")
        self._abort(message)

    def check_all_failed(self) -> None:
        """At the end of a phase: abort if every call of this session so far failed (a run too small for
        ``min_errors``, e.g. an unknown model on a few examples, would otherwise end as a success)."""
        with self._lock:
            failures = sum(self.errors.values())
            if not self.attempts or failures < self.attempts:
                return
            message = (f"all {self.attempts} calls in this session failed; the first: {self.first_error}. "
                       "Fix the cause and rerun with the same log_dir to resume.")
        self._abort(message)

    def _abort(self, message: str) -> None:
        if self.on_abort is not None:
            self.on_abort(message)
        raise TrainingAborted(message)

    def check_budget(self) -> None:
        """Raise `StopRun` once a budget is spent."""
        spent = self.spent
        if self.max_lm_calls is not None and spent.billed_calls >= self.max_lm_calls:
            raise StopRun(f"max_lm_calls={self.max_lm_calls} reached ({spent.billed_calls} billed calls)")
        if self.max_tokens is not None and spent.total_tokens >= self.max_tokens:
            raise StopRun(f"max_tokens_budget={self.max_tokens} reached ({spent.total_tokens} tokens)")
        if self.max_cost is not None and spent.cost >= self.max_cost:
            raise StopRun(f"max_cost={self.max_cost} reached (${spent.cost:.4f})")
