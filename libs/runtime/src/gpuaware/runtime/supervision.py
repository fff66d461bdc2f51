"""Supervised long-running tasks: a loop that dies is restarted, or the service stops non-zero.

A bare ``asyncio.create_task(loop())`` whose loop raises leaves a service that answers its health checks
and does nothing: the worst failure, because nothing notices it. Every long-running loop of a service
runs under a `Supervisor` instead (``supervise(name, factory)``, or ``ctx.supervise`` in ``mount``):

* a loop that raises is logged with its name and started again (``factory()`` once more) after a
  capped exponential back-off (``base_delay_s`` doubling up to ``max_delay_s``); each restart counts in
  ``gpuaware_task_restarts_total{task}``;
* a loop that *returns* while the service runs failed too (a loop is meant to run until cancelled) and
  is restarted the same way, unless its ``until()`` says it was asked to end (a loop that ends on its
  own stop event, or a retry that is done once it succeeds: ``until=lambda: True``);
* ``max_failures`` failures of one task within ``window_s`` seconds: the supervisor gives up. Under
  `run_service` the service then drains and `run_service` raises `TaskGaveUp`, so the process exits
  non-zero and its orchestrator restarts it; a standalone supervisor (a unit test, a tool) ends the
  task with the last exception, so whoever awaits it sees it.

What `supervise` returns is the supervising `asyncio.Task` itself: ``cancel()`` and ``await`` it as the
bare task it replaces (cancelling it cancels the loop's current run; the loop is not restarted).
`run_service` installs the service's supervisor for everything ``mount`` starts (a context variable:
the tasks and callbacks ``mount`` creates inherit it), so the classes that own a loop call the module
function and need no handle passed down; without a service, each call gets a standalone supervisor.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from gpuaware.runtime.metrics import Sample, counter

__all__ = ["Supervisor", "TaskGaveUp", "supervise"]

log = logging.getLogger(__name__)

Factory = Callable[[], Awaitable[Any]]
KEPT_DELAYS = 64

_current: contextvars.ContextVar[Supervisor | None] = contextvars.ContextVar("gpuaware_supervisor", default=None)


class TaskGaveUp(RuntimeError):
    """A supervised task failed too often in too short a time; its service stops with this error."""

    def __init__(self, task: str, failures: int, window_s: float, last: BaseException | None) -> None:
        why = f"{type(last).__name__}: {last}" if last is not None else "it returned"
        super().__init__(f"task {task!r} failed {failures} times within {window_s:g} s (last: {why}); "
                         f"stopping the service")
        self.task = task
        self.last = last


class _Returned(Exception):
    """A loop returned while nobody asked it to: a failure like an exception."""


class Supervisor:
    """Runs named loops, restarting each after a failure; gives up after too many (see the module)."""

    def __init__(self, *, max_failures: int = 5, window_s: float = 60.0, base_delay_s: float = 0.5,
                 max_delay_s: float = 30.0, on_give_up: Callable[[TaskGaveUp], None] | None = None) -> None:
        if max_failures < 1 or window_s <= 0 or base_delay_s < 0 or max_delay_s < base_delay_s:
            raise ValueError("Supervisor: need max_failures >= 1, window_s > 0, 0 <= base_delay_s <= max_delay_s")
        self.max_failures = max_failures
        self.window_s = window_s
        self.base_delay_s = base_delay_s
        self.max_delay_s = max_delay_s
        self.on_give_up = on_give_up
        self.tasks: dict[str, asyncio.Task[None]] = {}
        """the latest task started under each name"""
        self.restarts: Counter[str] = Counter()
        self.delays: dict[str, list[float]] = {}
        """each task's latest back-off pauses (the last ``KEPT_DELAYS``), in order: what a test checks is bounded"""
        self.failure: TaskGaveUp | None = None
        """set when the supervisor gave up on a task"""
        self.gave_up = asyncio.Event()
        self.stopping = False
        """the service is draining: a loop that returns now has ended, not failed"""

    def start(self, name: str, factory: Factory, *, until: Callable[[], bool] | None = None) -> asyncio.Task[None]:
        """Run ``factory()`` as the task ``name``, again after each failure; ``until()`` true when it
        returns means it has ended (see the module)."""
        task = asyncio.create_task(self._supervise(name, factory, until), name=name)
        self.tasks[name] = task
        return task

    async def stop(self) -> None:
        """The service is stopping: cancel the supervised tasks still running and wait for them."""
        self.stopping = True
        running = [t for t in self.tasks.values() if not t.done()]
        for t in running:
            t.cancel()
        if running:
            await asyncio.gather(*running, return_exceptions=True)

    def samples(self) -> Iterable[Sample]:
        """``gpuaware_task_restarts_total{task}`` for every task started (0 until one restarts)."""
        for name in sorted(self.tasks):
            yield counter("gpuaware_task_restarts", "supervised loops restarted after an exception or an "
                          "unexpected return", self.restarts[name], task=name)

    async def _attempt(self, name: str, factory: Factory) -> None:
        """One run of the loop (a test overrides it to inject a failure into a running loop)."""
        await factory()

    async def _supervise(self, name: str, factory: Factory, until: Callable[[], bool] | None) -> None:
        failures: deque[float] = deque()
        delays = self.delays.setdefault(name, [])
        streak = 0
        while True:
            started = time.monotonic()
            try:
                await self._attempt(name, factory)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                last: BaseException = exc
                log.error("task %s failed: %s: %s", name, type(exc).__name__, exc, exc_info=exc,
                          extra={"task": name})
            else:
                if self.stopping or (until is not None and until()):
                    return
                last = _Returned(f"task {name!r} returned while its service runs")
                log.error("task %s returned while its service runs", name, extra={"task": name})
            now = time.monotonic()
            if now - started > self.window_s:  # it ran well for a while: the back-off starts over
                streak = 0
            failures.append(now)
            while failures and now - failures[0] > self.window_s:
                failures.popleft()
            if len(failures) >= self.max_failures:
                self._give_up(TaskGaveUp(name, len(failures), self.window_s,
                                         None if isinstance(last, _Returned) else last))
                if self.on_give_up is None:
                    raise last
                return
            delay = min(self.max_delay_s, self.base_delay_s * 2 ** streak)
            streak += 1
            delays.append(delay)
            del delays[:-KEPT_DELAYS]  # a loop failing now and then for months keeps its list short
            self.restarts[name] += 1
            log.warning("task %s restarts in %.2f s (failure %d of %d allowed within %g s)", name, delay,
                        len(failures), self.max_failures - 1, self.window_s, extra={"task": name})
            await asyncio.sleep(delay)

    def _give_up(self, failure: TaskGaveUp) -> None:
        log.critical("%s", failure, extra={"task": failure.task})
        if self.failure is None:
            self.failure = failure
        self.gave_up.set()
        if self.on_give_up is not None:
            self.on_give_up(failure)


def current() -> Supervisor | None:
    """The supervisor of the service running in this context (`run_service` installs it), if any."""
    return _current.get()


def install(supervisor: Supervisor | None) -> contextvars.Token[Supervisor | None]:
    return _current.set(supervisor)


def uninstall(token: contextvars.Token[Supervisor | None]) -> None:
    _current.reset(token)


def supervise(name: str, factory: Factory, *, until: Callable[[], bool] | None = None) -> asyncio.Task[None]:
    """Start the long-running loop ``factory()`` as task ``name`` under the running service's
    supervisor (a standalone one outside a service); returns the supervising task."""
    return (_current.get() or Supervisor()).start(name, factory, until=until)
