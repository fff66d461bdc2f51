"""The Calchas HBM evaluation: replay real HBM error logs through the tracker, score it against the
peers' never-recover rule (``gpuaware health evaluate``).

The data (``../shared/data/gpu-faults/calchas-hbm/hbm_errors_public.csv``, PROVENANCE.md there): one
row per HBM error with its server, a Unix time of hourly resolution and ``EccType`` CE (corrected),
UER (uncorrectable, recoverable) or UEO (uncorrectable, other). It holds no continuous telemetry,
so the replay *makes* the telemetry a server would have sent: per server, an observation every
``step_s`` (an hour, the data's resolution) from one step before the file's first event to its
last, plus one at every event time, each carrying the server's cumulative ECC counters
(``ecc_corrected_aggregate`` += CE, ``ecc_uncorrected_aggregate`` += UER + UEO). Those observations
go through ``HealthBook.observe``, the code the service runs; nothing here decides a state.

Definitions:

* a UE episode is an uncorrectable error (UER or UEO) after at least 24 h without one on that server;
* an episode at time ``e`` is caught at lead ``L`` when the server's state at ``e - L`` (after every
  observation at or before that instant) was degraded or quarantined;
* precision at lead ``L`` is the share of escalations (healthy -> degraded, healthy or degraded ->
  quarantined: the moments the tracker raised a flag; stepping down from quarantined to degraded is
  not one) followed by a UE episode between ``L`` hours and 7 days later;
* the baseline (peers' rule) is unhealthy from a server's first uncorrectable error on, never back:
  it catches an episode at lead ``L`` when that first error was at or before ``e - L``, and withholds
  the server from its first error to the end of the file;
* server-hours are counted from the file's first event to its last, for every server in the file.

``window`` restricts the *scoring* (episodes, escalations and hours inside it) while the replay
still runs over the whole history, so a time split tunes on one part and checks on another.
"""

from __future__ import annotations

import bisect
import csv
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from gpuaware.health import LEVEL, HealthBook, HealthConfig, Observation

__all__ = [
    "EPISODE_GAP_S",
    "PRECISION_WINDOW_S",
    "HbmEvaluation",
    "HbmEvent",
    "HbmFormatError",
    "evaluate_hbm",
    "parse_hbm_csv",
    "replay_all",
    "score_replays",
    "ue_episodes",
]

EPISODE_GAP_S = 24 * 3600.0
PRECISION_WINDOW_S = 7 * 86400.0
UE_KINDS = frozenset({"UER", "UEO"})
KINDS = frozenset({"CE"}) | UE_KINDS
REQUIRED = ("Server", "Time", "EccType")
MAX_TIME_S = 4_102_444_800.0
"""2100-01-01 UTC: a ``Time`` is Unix seconds in ``[0, MAX_TIME_S]``; anything else is not this format
(a typo such as ``99999999999999999`` would otherwise stretch every server's hourly replay over
millions of years)"""


class HbmFormatError(ValueError):
    """The file is not in the Calchas format (a permanent error: say which line and why)."""

    def __init__(self, line: int | None, reason: str) -> None:
        super().__init__(f"line {line}: {reason}" if line is not None else reason)
        self.line, self.reason = line, reason


class HbmEvent(NamedTuple):
    server: str
    time: float
    kind: str
    """CE, UER or UEO"""


def parse_hbm_csv(lines: Iterable[str]) -> list[HbmEvent]:
    """Rows of the Calchas CSV (an open file or any lines with its header), in file order."""
    reader = csv.reader(lines)
    try:
        header = next(reader)
    except StopIteration:
        raise HbmFormatError(None, "empty file (expected a header with Server, Time, EccType)") from None
    missing = [c for c in REQUIRED if c not in header]
    if missing:
        raise HbmFormatError(1, f"missing column(s) {', '.join(missing)}; header is {','.join(header)}")
    i_server, i_time, i_kind = (header.index(c) for c in REQUIRED)
    out: list[HbmEvent] = []
    for n, row in enumerate(reader, start=2):
        if not row:
            continue
        try:
            server, time_s, kind = row[i_server].strip(), float(row[i_time]), row[i_kind].strip().upper()
        except (IndexError, ValueError):
            raise HbmFormatError(n, f"cannot read Server/Time/EccType from {row!r}") from None
        if not 0.0 <= time_s <= MAX_TIME_S:  # also refuses nan and inf
            raise HbmFormatError(n, f"Time {row[i_time].strip()!r} is outside [0, {MAX_TIME_S:.0f}] "
                                    "(Unix seconds, 1970 to 2100)")
        if kind not in KINDS:
            raise HbmFormatError(n, f"EccType {kind!r} is none of CE, UER, UEO")
        if not server:
            raise HbmFormatError(n, "empty Server")
        out.append(HbmEvent(server, time_s, kind))
    return out


def ue_episodes(events: Iterable[HbmEvent]) -> dict[str, list[float]]:
    """Server -> start times of its UE episodes (an uncorrectable error >= 24 h after the previous one)."""
    ue: dict[str, list[float]] = {}
    for e in events:
        if e.kind in UE_KINDS:
            ue.setdefault(e.server, []).append(e.time)
    out: dict[str, list[float]] = {}
    for server, times in ue.items():
        times.sort()
        starts, last = [], None
        for t in times:
            if last is None or t - last >= EPISODE_GAP_S:
                starts.append(t)
            last = t
        out[server] = starts
    return out


@dataclass
class ServerReplay:
    """One server's replay: its state timeline and escalations."""

    server: str
    change_times: list[float] = field(default_factory=list)
    change_levels: list[int] = field(default_factory=list)
    escalations: list[tuple[float, int, int, tuple[str, ...]]] = field(default_factory=list)
    """(time, from level, to level, reasons)"""

    def level_at(self, t: float) -> int:
        i = bisect.bisect_right(self.change_times, t) - 1
        return self.change_levels[i] if i >= 0 else 0

    def hours_at_least(self, level: int, start: float, end: float) -> float:
        """Hours within [start, end] spent at ``level`` or above."""
        total = 0.0
        times, levels = self.change_times, self.change_levels
        for i, t0 in enumerate(times):
            t1 = times[i + 1] if i + 1 < len(times) else end
            lo, hi = max(t0, start), min(t1, end)
            if hi > lo and levels[i] >= level:
                total += hi - lo
        return total / 3600.0

    def hours_exactly(self, level: int, start: float, end: float) -> float:
        return self.hours_at_least(level, start, end) - (self.hours_at_least(level + 1, start, end) if level < 2 else 0.0)


def replay_server(server: str, events: Sequence[HbmEvent], *, start: float, end: float, step_s: float,
                  config: HealthConfig) -> ServerReplay:
    """Replay one server's events (any order) as hourly ECC telemetry through a fresh ``HealthBook``.

    The hourly grid is generated as it is replayed (merged with the event times), so memory follows
    the number of events, not the span they cover."""
    per_time: dict[float, list[int]] = {}
    for e in events:
        slot = per_time.setdefault(e.time, [0, 0])
        slot[0 if e.kind == "CE" else 1] += 1
    n_steps = int((end - start) // step_s) + 1
    grid = (start - step_s + k * step_s for k in range(n_steps + 1))
    book = HealthBook(config)
    out = ServerReplay(server)
    ce = ue = 0
    previous = 0
    last: float | None = None
    for t in heapq.merge(grid, sorted(per_time)):
        if t == last:
            continue
        last = t
        counts = per_time.get(t)
        if counts is not None:
            ce += counts[0]
            ue += counts[1]
        a = book.observe(Observation(gpu_uuid=server, node=server, at=t, interval_s=step_s,
                                     ecc_corrected_aggregate=ce, ecc_uncorrected_aggregate=ue))
        level = LEVEL[a.state]
        if a.changed:
            out.change_times.append(t)
            out.change_levels.append(level)
            if level > previous:
                out.escalations.append((t, previous, level, a.reasons))
            previous = level
    return out


@dataclass
class HbmEvaluation:
    servers: int
    lead_hours: tuple[int, ...]
    window: tuple[float, float]
    episodes: dict[str, list[float]]
    """episodes scored (inside the window), by server"""
    first_ue: dict[str, float]
    replays: dict[str, ServerReplay]
    episode_rows: list[dict[str, Any]]
    recall: dict[int, float]
    precision: dict[int, float]
    escalations: int
    quarantined_h: float
    degraded_h: float
    baseline_recall: dict[int, float]
    baseline_unhealthy_h: float
    baseline_precision: dict[int, float]

    @property
    def ue_episodes(self) -> int:
        return sum(len(v) for v in self.episodes.values())

    def summary(self) -> dict[str, Any]:
        """The contract's summary.json, numbers rounded for reading."""
        return {
            "servers": self.servers,
            "ue_episodes": self.ue_episodes,
            "lead_hours": {str(L): {"recall": round(self.recall[L], 4), "precision": round(self.precision[L], 4)}
                           for L in self.lead_hours},
            "quarantined_server_hours": round(self.quarantined_h, 1),
            "degraded_server_hours": round(self.degraded_h, 1),
            "baseline_any_ue_forever": {
                "recall_at": {str(L): round(self.baseline_recall[L], 4) for L in self.lead_hours},
                "unhealthy_server_hours": round(self.baseline_unhealthy_h, 1),
            },
        }  # fmt: skip

    def detail(self) -> dict[str, Any]:
        """More than the contract: what was caught and how, for the report and the benchmark."""
        first = [r for r in self.episode_rows if r["first"]]
        later = [r for r in self.episode_rows if not r["first"]]

        def caught(rows: list[dict[str, Any]], L: int) -> int:
            return sum(1 for r in rows if r["caught"][str(L)])

        return {
            "window": list(self.window),
            "escalations": self.escalations,
            "escalations_by_reason": _count_reasons(self.replays),
            "episodes_first_on_server": len(first),
            "episodes_recurring": len(later),
            "caught_first": {str(L): caught(first, L) for L in self.lead_hours},
            "caught_recurring": {str(L): caught(later, L) for L in self.lead_hours},
            "baseline_precision": {str(L): round(self.baseline_precision[L], 4) for L in self.lead_hours},
            "withheld_vs_baseline": {
                "quarantined_share": round(self.quarantined_h / self.baseline_unhealthy_h, 4)
                if self.baseline_unhealthy_h else None,
                "quarantined_or_degraded_share": round((self.quarantined_h + self.degraded_h)
                                                       / self.baseline_unhealthy_h, 4)
                if self.baseline_unhealthy_h else None,
            },
        }  # fmt: skip


def _count_reasons(replays: dict[str, ServerReplay]) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in replays.values():
        for *_, reasons in r.escalations:
            for code in reasons:
                out[code] = out.get(code, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: (-kv[1], kv[0])))


def replay_all(events: Sequence[HbmEvent], *, config: HealthConfig | None = None, step_s: float = 3600.0,
               on_server: Callable[[str], None] | None = None) -> dict[str, ServerReplay]:
    """Every server's replay over the file's span, in sorted order, each through its own ``HealthBook``."""
    if not events:
        raise HbmFormatError(None, "no events")
    bad = next((e for e in events if not 0.0 <= e.time <= MAX_TIME_S), None)
    if bad is not None:
        raise HbmFormatError(None, f"server {bad.server}: time {bad.time!r} is outside [0, {MAX_TIME_S:.0f}] "
                                   "(Unix seconds, 1970 to 2100)")
    cfg = config or HealthConfig()
    t0 = min(e.time for e in events)
    t1 = max(e.time for e in events)
    by_server: dict[str, list[HbmEvent]] = {}
    for e in events:
        by_server.setdefault(e.server, []).append(e)
    replays: dict[str, ServerReplay] = {}
    for server in sorted(by_server):
        replays[server] = replay_server(server, by_server[server], start=t0, end=t1, step_s=step_s, config=cfg)
        if on_server is not None:
            on_server(server)
    return replays


def score_replays(events: Sequence[HbmEvent], replays: dict[str, ServerReplay], *,
                  lead_hours: Sequence[int] = (1, 6, 24),
                  window: tuple[float | None, float | None] = (None, None)) -> HbmEvaluation:
    """Score replays against the never-recover rule, inside ``window`` (module docstring)."""
    if not events:
        raise HbmFormatError(None, "no events")
    leads = tuple(sorted({int(L) for L in lead_hours}))
    if not leads or leads[0] < 0:
        raise ValueError("lead hours must be non-negative integers")
    t0 = min(e.time for e in events)
    t1 = max(e.time for e in events)
    w0 = t0 if window[0] is None else max(t0, window[0])
    w1 = t1 if window[1] is None else min(t1, window[1])
    all_episodes = ue_episodes(events)
    first_ue: dict[str, float] = {}
    for e in events:
        if e.kind in UE_KINDS and (e.server not in first_ue or e.time < first_ue[e.server]):
            first_ue[e.server] = e.time
    episodes = {s: [e for e in eps if w0 <= e <= w1] for s, eps in all_episodes.items()}
    episodes = {s: eps for s, eps in episodes.items() if eps}
    rows: list[dict[str, Any]] = []
    for server in sorted(episodes):
        rep = replays[server]
        for at in episodes[server]:
            rows.append({
                "server": server, "time": at, "first": at == all_episodes[server][0],
                "caught": {str(L): rep.level_at(at - 3600.0 * L) >= 1 for L in leads},
                "level_before": {str(L): rep.level_at(at - 3600.0 * L) for L in leads},
                "baseline": {str(L): first_ue[server] <= at - 3600.0 * L for L in leads},
            })  # fmt: skip
    n = len(rows)
    recall = {L: (sum(r["caught"][str(L)] for r in rows) / n if n else 0.0) for L in leads}
    base_recall = {L: (sum(r["baseline"][str(L)] for r in rows) / n if n else 0.0) for L in leads}

    def followed(server: str, tau: float, L: int) -> bool:
        return any(tau + 3600.0 * L <= e <= tau + PRECISION_WINDOW_S for e in all_episodes.get(server, ()))

    escalations = [(s, tau) for s, rep in replays.items() for tau, *_ in rep.escalations if w0 <= tau <= w1]
    precision = {L: (sum(followed(s, tau, L) for s, tau in escalations) / len(escalations) if escalations else 0.0)
                 for L in leads}
    base_flags = [(s, u) for s, u in first_ue.items() if w0 <= u <= w1]
    base_precision = {L: (sum(followed(s, u, L) for s, u in base_flags) / len(base_flags) if base_flags else 0.0)
                      for L in leads}
    quarantined = sum(rep.hours_exactly(2, w0, w1) for rep in replays.values())
    degraded = sum(rep.hours_exactly(1, w0, w1) for rep in replays.values())
    base_hours = sum(max(0.0, w1 - max(u, w0)) / 3600.0 for u in first_ue.values() if u <= w1)
    return HbmEvaluation(
        servers=len(replays), lead_hours=leads, window=(w0, w1), episodes=episodes, first_ue=first_ue,
        replays=replays, episode_rows=rows, recall=recall, precision=precision, escalations=len(escalations),
        quarantined_h=quarantined, degraded_h=degraded, baseline_recall=base_recall,
        baseline_unhealthy_h=base_hours, baseline_precision=base_precision)  # fmt: skip


def evaluate_hbm(events: Sequence[HbmEvent], *, lead_hours: Sequence[int] = (1, 6, 24),
                 config: HealthConfig | None = None, step_s: float = 3600.0,
                 window: tuple[float | None, float | None] = (None, None),
                 on_server: Callable[[str], None] | None = None) -> HbmEvaluation:
    """Replay every server and score the replay against the never-recover rule (module docstring).

    Deterministic: servers are replayed in sorted order, each through its own ``HealthBook``."""
    if not events:
        raise HbmFormatError(None, "no events")
    if not lead_hours or min(int(L) for L in lead_hours) < 0:
        raise ValueError("lead hours must be non-negative integers")
    replays = replay_all(events, config=config, step_s=step_s, on_server=on_server)
    return score_replays(events, replays, lead_hours=lead_hours, window=window)
