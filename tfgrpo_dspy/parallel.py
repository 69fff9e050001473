"""Thread helpers that carry DSPy's context into workers and bound the time of one call."""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


class CallTimeout(TimeoutError):
    """A call did not finish within its wall-clock limit; it was abandoned, not killed."""


def call_with_timeout(work: Callable[[], R], timeout: float | None) -> R:
    """Run ``work`` and return its result, or raise `CallTimeout` after ``timeout`` seconds.

    Python cannot kill a thread: a hung call is left running in a daemon thread and its result,
    if it ever comes, is dropped. That is what lets a run survive an LM that never answers.
    """
    if timeout is None:
        return work()
    outcome: dict[str, object] = {}
    context = contextvars.copy_context()

    def target() -> None:
        try:
            outcome["value"] = context.run(work)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True, name="tfgrpo-timed-call")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise CallTimeout(f"no answer within {timeout:g} s")
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def map_in_threads(work: Callable[[T], R], items: Iterable[T], num_threads: int) -> Iterator[tuple[T, R]]:
    """Yield (item, result) as results complete; each worker inherits the caller's DSPy context.

    When the consumer stops (an exception, a budget), queued items are cancelled.
    """
    items = list(items)
    if not items:
        return
    with ThreadPoolExecutor(max_workers=min(num_threads, len(items))) as pool:
        futures = {pool.submit(contextvars.copy_context().run, work, item): item for item in items}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:
            for future in futures:
                future.cancel()
