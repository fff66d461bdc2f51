"""A service's configuration from our custom resources: list+watch in a thread, judged, handed over.

Why a thread: the official client is synchronous, and the watch blocks on its stream. The rules stay
pure elsewhere (``watch.Watcher`` for list / watch / 410 / resync, ``crs.QueueSet`` / ``PolicySet``
for what is in force and what each object is told); this shell only moves data:

- ``run_watch`` lists, then watches from the list's resourceVersion, relists after 410 Gone and backs
  off (1, 2, 4 ... 30 s) after a failure, reconnecting from the same version;
- after a LIST's changes (judged together) and after each event, the set reconciles; when the
  configuration in force changed, ``on_config(config)`` is called **on the event loop** with it (the
  service swaps it in between two of its own steps), then every status that must change is patched
  (a failed patch is logged and tried again at the next change or resync);
- ``synced`` is set once the first LIST has been judged and handed over, so a service can wait for
  its configuration before answering.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gpuaware.k8s.crs import PolicySet, QueueSet
from gpuaware.k8s.watch import Watcher, run_watch

__all__ = ["ConfigWatch"]

log = logging.getLogger(__name__)

Source = tuple[Callable[[], tuple[list[Mapping[str, Any]], str]], Callable[[str], Iterator[Mapping[str, Any]]]]


def backoff_s(failures: int, base: float = 1.0, cap: float = 30.0) -> float:
    """The wait after the n-th failure in a row: 1, 2, 4 ... 30 s."""
    return min(cap, base * 2 ** max(0, failures - 1))


class ConfigWatch:
    """Feeds ``objects`` (a ``QueueSet`` or ``PolicySet``) from ``source`` (``api.queue_source`` /
    ``policy_source``) and writes each object's status with ``write_status(name, patch)``."""

    def __init__(self, objects: QueueSet | PolicySet, source: Source,
                 write_status: Callable[[str, Mapping[str, Any]], None],
                 on_config: Callable[[Any], None], *, resync_s: float = 300.0,
                 clock: Callable[[], float] = time.time, backoff: Callable[[int], float] = backoff_s) -> None:
        self.objects = objects
        self.source = source
        self.write_status = write_status
        self.on_config = on_config
        self.watcher = Watcher(resync_s=resync_s)
        self.clock = clock
        self.backoff = backoff
        self.synced = asyncio.Event()
        self.status_failures = 0
        self._logged: dict[str, Any] = {}
        self._halt = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def config(self) -> Any:
        """The configuration in force: the quota tree (``QueueSet``) or the profile (``PolicySet``)."""
        return self.objects.tree if isinstance(self.objects, QueueSet) else self.objects.profile

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name=f"watch {self.objects.kind}", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        """Stop handing anything over; the thread ends when its stream next returns (it is a daemon)."""
        self._halt.set()

    def _run(self) -> None:
        run_watch(self.watcher, self.source[0], self.source[1], self.objects.record, self._halt.is_set,
                  self.clock, self._back_off, settled=self._settled)

    def _back_off(self, failures: int) -> None:
        self._halt.wait(self.backoff(failures))  # woken early by `stop`

    def _settled(self) -> None:
        if self._halt.is_set():
            return
        if self.objects.reconcile():
            config = self.config
            log.info("%s: configuration in force changed (%s)", self.objects.kind,
                     ", ".join(f"{n}: generation {v.generation}" for n, v in sorted(self.objects.verdicts.items())
                               if v.accepted) or "none accepted")
            self._call_soon(self.on_config, config)
        for name, verdict in self.objects.verdicts.items():
            if not verdict.accepted and self._logged.get(name) != verdict:
                log.warning("%s %s generation %d refused: %s", self.objects.kind, name, verdict.generation,
                            verdict.message)
        self._logged = dict(self.objects.verdicts)
        if not self.synced.is_set():
            self._call_soon(self.synced.set)
        for name, patch in self.objects.status_patches():
            try:
                self.write_status(name, patch)
            except Exception as exc:  # deleted meanwhile, the apiserver away: the next change tries again
                self.status_failures += 1
                log.warning("%s %s: status not written (%s: %s)", self.objects.kind, name, type(exc).__name__, exc)
                self.objects.forget_written(name)

    def _call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop closed while the thread was still reading
            self._loop.call_soon_threadsafe(fn, *args)

