"""Planned faults during a replay: services killed with SIGKILL and started again, nats-server killed,
PostgreSQL stopped for a while, one node of a NATS cluster lost — at set wall times, while the
digital twin replays a workload (`gpuaware drill`, the fault suite `make test-faults`).

Why a plan and not random chaos: an invariant that fails must be reproducible, so each step is named
and timed (`kill:binder@12+1`: SIGKILL the binder 12 s into the replay, start it again 1 s later).
Everything is done the way it happens in production — no hand-over, no drain: the process dies, the
server's socket closes, the database refuses connections — and brought back the way an operator (or
Kubernetes) would: the same command and environment, the stack's own `stack_up` for its servers.

`ChaosRunner` does the steps; the caller ticks it from its replay loop and asks `held_down()` which
processes are down on purpose, so it can tell a planned death from a crash.

Syntax of one step: ``<kind>[:<target>]@<at_s>[+<down_s>]``, steps separated by commas, where kind is
``kill`` (target: a service — placement, binder, health-scoring, quota, telemetry-agent,
telemetry-collector, recorder), ``nats``, ``postgres``, ``nats-node`` (target: the node's index),
``standby`` or ``kill-leader`` (target: a leader-elected service — health-scoring, forecasting, quota).

High availability (the ``ha`` scenario): ``standby:<s>`` starts a second instance of ``<s>`` (the same
command and environment, its own instance id and log) that runs to the end; ``kill-leader:<s>``
SIGKILLs whichever instance holds ``<s>``'s lease (read from its NATS KV bucket, key = the cluster)
and starts it again after ``down_s``. The takeover is timed from the kill to the first read of the
key naming another holder (polled every ``TAKEOVER_POLL_S``): the lease's TTL, the standby's poll
and the time the drill needs to see it. A leader is killed only once its standby answers as its
instance (``answers``: it has started and campaigns), waiting up to ``STANDBY_READY_S`` past the
planned time: on a loaded machine a Python service can take many seconds to start, and a kill before
the standby runs would time its start, not a takeover.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuaware.cli.processes import ProcessGroup, ServiceProcess
from gpuaware.devstack import StackError, pid_alive, stack_status, stack_up
from gpuaware.schemas import FORECASTING_LEASE_BUCKET, HEALTH_LEASE_BUCKET, process_named

__all__ = ["KINDS", "LEASE_BUCKETS", "SCENARIOS", "SERVICES", "ChaosError", "ChaosRunner", "ChaosStep", "parse_chaos"]

log = logging.getLogger("gpuaware.chaos")

KINDS = ("kill", "nats", "postgres", "nats-node", "standby", "kill-leader")
SERVICES = ("placement", "binder", "health-scoring", "quota", "telemetry-agent", "telemetry-collector", "recorder")
"""what ``kill`` may name: the demo's service processes"""
LEASE_BUCKETS = {"health-scoring": HEALTH_LEASE_BUCKET, "forecasting": FORECASTING_LEASE_BUCKET,
                 "quota": "quota-leader"}
"""the leader-elected services (``standby``, ``kill-leader``) and their lease buckets (each settings'
``lease_bucket`` default); the key is the cluster"""
TAKEOVER_POLL_S = 0.05
TAKEOVER_WAIT_S = 30.0
"""how long a kill-leader step waits for another holder before it records none"""
STANDBY_READY_S = 90.0
"""how long a kill-leader step waits for the service's standby to answer before it kills anyway"""
MAX_AT_S = 86_400.0
MAX_DOWN_S = 3_600.0

SCENARIOS = {
    # each service of the loop in turn, started again a second later
    "services": "kill:placement@5+1, kill:binder@9+1, kill:health-scoring@13+1, kill:quota@16+1, "
                "kill:telemetry-agent@19+1, kill:telemetry-collector@22+1, kill:recorder@25+1",
    # the servers: nats-server killed (back after 3 s), then PostgreSQL stopped for 30 s
    "stack": "nats@5+3, postgres@12+30",
    # a 3-node NATS cluster (R3 streams) loses a node for 12 s
    "cluster": "nats-node:0@6+12",
    # each leader-elected service with a standby, its leader killed in turn (started again 1 s later)
    "ha": "standby:health-scoring@0, standby:forecasting@0, standby:quota@0, kill-leader:health-scoring@8+1, "
          "kill-leader:forecasting@17+1, kill-leader:quota@26+1",
}
"""the fault suite's plans (`gpuaware drill --scenario`, `make test-faults`)"""


class ChaosError(ValueError):
    """A chaos plan that cannot be understood: the message says which step and why."""


@dataclass(frozen=True)
class ChaosStep:
    at_s: float
    """wall seconds after the replay started"""
    kind: str
    target: str = ""
    down_s: float = 1.0
    """how long it stays down before it is started again"""

    @property
    def label(self) -> str:
        return f"{self.kind}{':' + self.target if self.target else ''}@{self.at_s:g}+{self.down_s:g}"


def parse_chaos(text: str) -> tuple[ChaosStep, ...]:
    """``"kill:binder@12+1, postgres@20+30"`` -> steps sorted by time; a scenario name
    (`SCENARIOS`) stands for its plan. Raises `ChaosError` naming the bad step."""
    text = SCENARIOS.get(text.strip(), text)
    steps = [_parse_step(part.strip()) for part in text.split(",") if part.strip()]
    if not steps:
        raise ChaosError("empty chaos plan (e.g. 'kill:binder@10+1' or a scenario: " + ", ".join(SCENARIOS) + ")")
    return tuple(sorted(steps, key=lambda s: s.at_s))


def _parse_step(part: str) -> ChaosStep:
    what, sep, when = part.partition("@")
    if not sep:
        raise ChaosError(f"{part!r}: no '@<seconds>' (e.g. 'kill:binder@10+1')")
    kind, _, target = what.strip().partition(":")
    kind, target = kind.strip(), target.strip()
    if kind not in KINDS:
        raise ChaosError(f"{part!r}: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    at_text, plus, down_text = when.partition("+")
    at_s = _number(part, "the time", at_text, MAX_AT_S)
    down_s = _number(part, "the down time", down_text, MAX_DOWN_S) if plus else 1.0
    if kind == "kill" and target not in SERVICES:
        raise ChaosError(f"{part!r}: kill needs a service ({', '.join(SERVICES)})")
    if kind in ("standby", "kill-leader") and target not in LEASE_BUCKETS:
        raise ChaosError(f"{part!r}: {kind} needs a leader-elected service ({', '.join(LEASE_BUCKETS)})")
    if kind == "nats-node" and not target.isdigit():
        raise ChaosError(f"{part!r}: nats-node needs the node's index (e.g. 'nats-node:1@10+15')")
    if kind in ("nats", "postgres") and target:
        raise ChaosError(f"{part!r}: {kind} takes no target")
    return ChaosStep(at_s=at_s, kind=kind, target=target, down_s=down_s)


def _number(part: str, what: str, text: str, limit: float) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ChaosError(f"{part!r}: {what} {text.strip()!r} is not a number") from None
    if not math.isfinite(value) or not 0.0 <= value <= limit:
        raise ChaosError(f"{part!r}: {what} must be between 0 and {limit:g} seconds")
    return value


@dataclass
class _Done:
    step: ChaosStep
    started_at: float = 0.0
    down_at: float | None = None
    down_wall: float | None = None
    back_at: float | None = None
    back_wall: float | None = None
    """Unix time it was started again: events after it show the loop recovered"""
    error: str = ""
    leader: str = ""
    """kill-leader: the lease holder killed"""
    new_leader: str = ""
    takeover_s: float | None = None
    """kill-leader: the kill -> the first read of the lease naming another holder"""
    standby_wait_s: float | None = None
    """kill-leader: how long it waited past its planned time for the standby to answer"""

    def record(self, t0: float) -> dict[str, Any]:
        return {"step": self.step.label, "kind": self.step.kind, "target": self.step.target,
                "down_at_s": None if self.down_at is None else round(self.down_at - t0, 2),
                "back_at_s": None if self.back_at is None else round(self.back_at - t0, 2),
                "down_wall": self.down_wall, "back_wall": self.back_wall,
                "ok": self.down_at is not None and self.back_at is not None and not self.error,
                "error": self.error,
                **({"leader": self.leader, "new_leader": self.new_leader, "takeover_s": self.takeover_s,
                    "standby_wait_s": self.standby_wait_s}
                   if self.step.kind == "kill-leader" else {})}


@dataclass
class ChaosRunner:
    """Runs a plan against a replay's processes and, where given, the embedded stack in ``data_dir``.
    ``find`` names a live `ServiceProcess` for a service (None when it is not running); ``procs``,
    ``lease_holder`` (service -> its lease's holder, None when none) are what ``standby`` and
    ``kill-leader`` steps need; ``answers`` (service, instance id -> whether that instance answers on the
    bus now) lets a ``kill-leader`` step wait for the standby first."""

    steps: tuple[ChaosStep, ...]
    find: Callable[[str], ServiceProcess | None]
    data_dir: Path | None = None
    procs: ProcessGroup | None = None
    lease_holder: Callable[[str], Awaitable[str | None]] | None = None
    answers: Callable[[str, str], Awaitable[bool]] | None = None
    standbys: dict[str, ServiceProcess] = field(default_factory=dict)
    """service -> its second instance (``standby`` steps)"""
    _t0: float | None = None
    _next: int = 0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _done: list[_Done] = field(default_factory=list)
    _down: set[str] = field(default_factory=set)

    def held_down(self) -> set[str]:
        """Names of service processes and stack parts (``nats``, ``postgres``) down on purpose now."""
        return set(self._down)

    def tick(self, elapsed_s: float) -> None:
        """Start every step due by ``elapsed_s`` seconds into the replay."""
        if self._t0 is None:
            self._t0 = time.monotonic() - elapsed_s
        while self._next < len(self.steps) and self.steps[self._next].at_s <= elapsed_s:
            done = _Done(self.steps[self._next], started_at=time.monotonic())
            self._next += 1
            self._done.append(done)
            self._tasks.append(asyncio.create_task(self._run(done), name=f"chaos {done.step.label}"))

    @property
    def pending(self) -> int:
        return len(self.steps) - self._next

    async def finish(self, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait for the started steps to bring back what they took down; one record per step
        (steps never reached are reported as not done)."""
        if self._tasks:
            _, late = await asyncio.wait(self._tasks, timeout=timeout)
            for task in late:
                task.cancel()
        t0 = self._t0 or time.monotonic()
        out = [d.record(t0) for d in self._done]
        out += [{"step": s.label, "kind": s.kind, "target": s.target, "down_at_s": None, "back_at_s": None,
                 "down_wall": None, "back_wall": None, "ok": False, "error": "not reached (the replay ended first)"} for s in self.steps[self._next:]]
        return out

    async def _run(self, done: _Done) -> None:
        step = done.step
        try:
            if step.kind == "kill":
                await self._kill_service(done)
            elif step.kind == "standby":
                self._start_standby(done)
            elif step.kind == "kill-leader":
                await self._kill_leader(done)
            else:
                await self._stop_server(done)
        except Exception as exc:  # the record says what went wrong; the replay goes on
            done.error = f"{type(exc).__name__}: {exc}"
            log.error("chaos step %s failed: %s", step.label, done.error)

    async def _kill_service(self, done: _Done) -> None:
        proc = self.find(done.step.target)
        if proc is None or proc.proc is None or not proc.alive():
            raise ChaosError(f"{done.step.target} is not running")
        self._down.add(proc.name)
        try:
            proc.proc.kill()  # SIGKILL: no drain, no goodbye
            await asyncio.to_thread(proc.proc.wait, 10.0)
            done.down_at, done.down_wall = time.monotonic(), time.time()
            log.warning("chaos: %s killed (pid %s)", proc.name, proc.pid)
            await asyncio.sleep(done.step.down_s)
            proc.start()  # the same command and environment, its log appended to
            done.back_at, done.back_wall = time.monotonic(), time.time()
            log.warning("chaos: %s started again (pid %s)", proc.name, proc.pid)
        finally:
            self._down.discard(proc.name)

    def _start_standby(self, done: _Done) -> None:
        service = done.step.target
        first = self.find(service)
        if first is None or self.procs is None:
            raise ChaosError(f"{service} is not running: no second instance of it to start")
        prefix = process_named(service).env_prefix
        proc = self.procs.start(f"{service}-standby", first.argv, {**first.env, f"{prefix}INSTANCE_ID": f"{service}-standby"},
                                first.log_path.with_name(f"{service}-standby.log"))
        self.standbys[service] = proc
        done.down_at, done.down_wall = time.monotonic(), time.time()
        done.back_at, done.back_wall = done.down_at, done.down_wall
        log.warning("chaos: a second %s started (pid %s)", service, proc.pid)

    def _instance(self, service: str, holder: str) -> ServiceProcess | None:
        """The process whose instance id is ``holder``: the standby's is set, the first's is its
        ``<PREFIX>INSTANCE_ID`` when set (the demo sets it), else ``<host>-<pid>`` (`gpuaware.runtime`'s
        default)."""
        standby = self.standbys.get(service)
        if standby is not None and holder == f"{service}-standby":
            return standby
        first = self.find(service)
        if first is None:
            return None
        own = first.env.get(f"{process_named(service).env_prefix}INSTANCE_ID")
        if own == holder or (not own and first.pid is not None and holder.rsplit("-", 1)[-1] == str(first.pid)):
            return first
        return None

    async def _standby_answers(self, done: _Done) -> None:
        """Wait (up to ``STANDBY_READY_S``) until the service's standby answers as its instance."""
        service = done.step.target
        standby = self.standbys.get(service)
        if self.answers is None or standby is None:
            return
        t0 = time.monotonic()
        while time.monotonic() - t0 < STANDBY_READY_S and standby.alive():
            if await self.answers(service, f"{service}-standby"):
                break
            await asyncio.sleep(0.25)
        else:
            log.error("chaos: the %s standby did not answer within %gs; killing the leader anyway", service,
                      STANDBY_READY_S)
        done.standby_wait_s = round(time.monotonic() - t0, 3)

    async def _kill_leader(self, done: _Done) -> None:
        service = done.step.target
        if self.lease_holder is None:
            raise ChaosError("kill-leader needs the lease's holder (no bus connection given)")
        await self._standby_answers(done)
        holder = await self.lease_holder(service)
        proc = self._instance(service, holder or "")
        if holder is None or proc is None or proc.proc is None or not proc.alive():
            raise ChaosError(f"{service}: no live instance holds its lease (holder {holder!r})")
        done.leader = holder
        self._down.add(proc.name)
        try:
            proc.proc.kill()  # SIGKILL: the lease is not released, it must expire
            killed = time.monotonic()
            await asyncio.to_thread(proc.proc.wait, 10.0)
            done.down_at, done.down_wall = killed, time.time()
            log.warning("chaos: %s leader %s killed (pid %s)", service, holder, proc.pid)
            restart = asyncio.get_running_loop().call_later(done.step.down_s, proc.start)
            try:
                while time.monotonic() - killed < TAKEOVER_WAIT_S:
                    now_holder = await self.lease_holder(service)
                    if now_holder and now_holder != holder:
                        done.takeover_s = round(time.monotonic() - killed, 3)
                        done.new_leader = now_holder
                        break
                    await asyncio.sleep(TAKEOVER_POLL_S)
            finally:
                restart.cancel()
            if done.takeover_s is None:
                log.error("chaos: no %s instance took the lease over within %gs", service, TAKEOVER_WAIT_S)
            left = done.step.down_s - (time.monotonic() - killed)
            if left > 0:
                await asyncio.sleep(left)
            if not proc.alive():
                proc.start()
            done.back_at, done.back_wall = time.monotonic(), time.time()
            log.warning("chaos: %s instance %s started again (pid %s); %s leads", service, holder, proc.pid,
                        done.new_leader or "nobody")
        finally:
            self._down.discard(proc.name)

    async def _stop_server(self, done: _Done) -> None:
        if self.data_dir is None:
            raise ChaosError(f"{done.step.label}: the stack is not ours (NATS_URL / DATABASE_URL name it)")
        state = stack_status(self.data_dir)
        if state is None:
            raise ChaosError(f"no stack runs in {self.data_dir}")
        step = done.step
        part = "postgres" if step.kind == "postgres" else "nats"
        pid, sig = _victim(state, step)
        self._down.add(part)
        try:
            os.kill(pid, sig)
            await _until_gone(pid, 30.0)
            done.down_at, done.down_wall = time.monotonic(), time.time()
            log.warning("chaos: %s stopped (pid %d)", step.kind if not step.target else f"nats node {step.target}",
                        pid)
            await asyncio.sleep(step.down_s)
            for attempt in range(5):  # a port the dead server held can take a moment to free
                try:
                    await asyncio.to_thread(stack_up, self.data_dir)
                    break
                except StackError:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(1.0)
            done.back_at, done.back_wall = time.monotonic(), time.time()
            log.warning("chaos: %s started again", step.label)
        finally:
            self._down.discard(part)


def _victim(state: Any, step: ChaosStep) -> tuple[int, signal.Signals]:
    """The pid to stop and how: nats-server SIGKILL (a crash); PostgreSQL a fast shutdown (SIGINT: an
    outage, its shared memory released so that it can start again at once)."""
    if step.kind == "postgres":
        if state.postgres_pid is None:
            raise ChaosError("PostgreSQL is external: not ours to stop")
        return state.postgres_pid, signal.SIGINT
    if step.kind == "nats":
        if state.nats_pid is None:
            raise ChaosError("nats-server is external: not ours to kill")
        return state.nats_pid, signal.SIGKILL
    nodes = list(getattr(state, "nats_nodes", None) or ())
    i = int(step.target)
    if i >= len(nodes):
        raise ChaosError(f"{step.label}: the stack has {len(nodes)} NATS cluster nodes")
    pid = nodes[i]["pid"] if isinstance(nodes[i], dict) else nodes[i].pid
    return int(pid), signal.SIGKILL


async def _until_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            break
        await asyncio.sleep(0.05)
