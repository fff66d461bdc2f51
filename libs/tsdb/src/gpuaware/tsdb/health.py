"""Health scoring's rows (migration 0010): score history, each GPU's remembered state, alerts, overrides.

The health-scoring service may not import psycopg, so its whole persistence is these typed calls.
The service hands over JSON it encoded itself (a ``GpuTrack``, an ``ActiveAlert``) as ``str``:
this module never needs to know ``gpuaware.health``'s types, and the database keeps them as jsonb
for operators to query.

``save_health_checkpoint`` writes one checkpoint in one transaction: the GPUs whose state
changed since the last one (upserted), the scores published (first writer wins on (cluster, gpu,
ts), except that a row carrying a state change replaces one that does not), alerts raised (inserted
open) and resolved (closed), and overrides (the audit). All or nothing: a restart reads back either
the state before the checkpoint or the state after it, never a mix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from gpuaware.tsdb.functions import aware, call_count
from gpuaware.tsdb.pool import Connection

__all__ = [
    "HEALTH_RETENTION",
    "HealthAlertRow",
    "HealthCheckpoint",
    "HealthOverrideRow",
    "HealthScoreRow",
    "HealthTrackRow",
    "expire_health",
    "health_alerts",
    "health_overrides",
    "health_scores",
    "load_health_state",
    "save_health_checkpoint",
]

HEALTH_RETENTION = timedelta(days=90)
"""score history and resolved alerts kept this long (the TimescaleDB policy in 0010 says the same)"""


def _ts(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


@dataclass(frozen=True, slots=True)
class HealthScoreRow:
    """One published score (``GpuScored``), or a state change (``changed``) with its previous state."""

    cluster: str
    gpu_uuid: str
    node: str
    at: float
    """Unix seconds: the assessment's time"""
    score: float
    state: str
    risk: float = 0.0
    gpu_index: int = 0
    changed: bool = False
    previous: str | None = None
    cause: str = ""
    components_json: str = "{}"
    reasons_json: str = "[]"


@dataclass(frozen=True, slots=True)
class HealthTrackRow:
    """What the service remembers about one GPU (a ``gpuaware.health.GpuTrack`` encoded as JSON)."""

    gpu_uuid: str
    node: str
    state: str
    track_json: str


@dataclass(frozen=True, slots=True)
class HealthAlertRow:
    """An alert raised (``resolved_at`` None, ``active_json`` the AlertBook's record) or resolved."""

    fingerprint: str
    started_at: float
    rule: str
    severity: str
    gpu_uuid: str | None = None
    node: str | None = None
    summary: str = ""
    resolved_at: float | None = None
    active_json: str | None = None


@dataclass(frozen=True, slots=True)
class HealthOverrideRow:
    """One cordon or uncordon, for the audit."""

    gpu_uuid: str
    at: float
    action: str
    reason: str
    requested_by: str
    previous: str
    current: str
    cleared: bool = False
    node: str = ""


@dataclass
class HealthCheckpoint:
    """Everything one checkpoint writes (see the module docstring)."""

    cluster: str
    tracks: list[HealthTrackRow] = field(default_factory=list)
    scores: list[HealthScoreRow] = field(default_factory=list)
    alerts: list[HealthAlertRow] = field(default_factory=list)
    overrides: list[HealthOverrideRow] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.tracks or self.scores or self.alerts or self.overrides)


_UPSERT_TRACK = """
INSERT INTO health_gpu_state (cluster, gpu_uuid, node, state, track, updated_at)
VALUES (%s, %s, %s, %s, %s::jsonb, now())
ON CONFLICT (cluster, gpu_uuid) DO UPDATE
SET node = EXCLUDED.node, state = EXCLUDED.state, track = EXCLUDED.track, updated_at = EXCLUDED.updated_at
"""
_INSERT_SCORE = """
INSERT INTO health_scores (ts, cluster, node, gpu_uuid, gpu_index, score, state, risk, changed, previous, cause,
                           components, reasons)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb, %s::jsonb)
ON CONFLICT (cluster, gpu_uuid, ts) DO UPDATE
SET score = EXCLUDED.score, state = EXCLUDED.state, risk = EXCLUDED.risk, changed = EXCLUDED.changed,
    previous = EXCLUDED.previous, cause = EXCLUDED.cause, components = EXCLUDED.components,
    reasons = EXCLUDED.reasons
WHERE EXCLUDED.changed AND NOT health_scores.changed
"""
_RAISE = """
INSERT INTO health_alerts (cluster, fingerprint, started_at, rule, severity, gpu_uuid, node, summary, active)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s::jsonb)
ON CONFLICT (cluster, fingerprint, started_at) DO UPDATE
SET summary = EXCLUDED.summary, active = EXCLUDED.active
WHERE health_alerts.resolved_at IS NULL
"""
_RESOLVE = """
INSERT INTO health_alerts (cluster, fingerprint, started_at, rule, severity, gpu_uuid, node, summary, resolved_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (cluster, fingerprint, started_at) DO UPDATE
SET resolved_at = EXCLUDED.resolved_at, active = NULL
WHERE health_alerts.resolved_at IS NULL
"""
_INSERT_OVERRIDE = """
INSERT INTO health_overrides (cluster, gpu_uuid, at, action, reason, requested_by, previous, current, cleared, node)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT DO NOTHING
"""
_LOAD_TRACKS = "SELECT gpu_uuid, track::text FROM health_gpu_state WHERE cluster = %s ORDER BY gpu_uuid"
_LOAD_OPEN = ("SELECT active::text FROM health_alerts WHERE cluster = %s AND resolved_at IS NULL "
              "AND active IS NOT NULL ORDER BY started_at, fingerprint")
_EXPIRE = "SELECT gpuaware_expire_health(%s)"


async def save_health_checkpoint(conn: Connection, cp: HealthCheckpoint) -> None:
    """Write one checkpoint in one transaction (see the module docstring)."""
    if not cp:
        return
    c = cp.cluster
    async with conn.transaction(), conn.cursor() as cur:
        if cp.tracks:
            await cur.executemany(_UPSERT_TRACK, [(c, t.gpu_uuid, t.node, t.state, t.track_json) for t in cp.tracks])
        if cp.scores:
            await cur.executemany(_INSERT_SCORE, [
                (_ts(s.at), c, s.node, s.gpu_uuid, s.gpu_index, s.score, s.state, s.risk, s.changed, s.previous,
                 s.cause, s.components_json, s.reasons_json) for s in cp.scores])
        # in order: an alert raised and resolved within one checkpoint ends resolved
        for a in cp.alerts:
            if a.resolved_at is None:
                await cur.execute(_RAISE, (c, a.fingerprint, _ts(a.started_at), a.rule, a.severity, a.gpu_uuid,
                                           a.node, a.summary, a.active_json or "{}"))
            else:
                await cur.execute(_RESOLVE, (c, a.fingerprint, _ts(a.started_at), a.rule, a.severity, a.gpu_uuid,
                                             a.node, a.summary, _ts(a.resolved_at)))
        if cp.overrides:
            await cur.executemany(_INSERT_OVERRIDE, [
                (c, o.gpu_uuid, _ts(o.at), o.action, o.reason, o.requested_by, o.previous, o.current, o.cleared,
                 o.node) for o in cp.overrides])


async def load_health_state(conn: Connection, cluster: str) -> tuple[dict[str, str], list[str]]:
    """(gpu uuid -> its track as JSON, the open alerts' AlertBook records as JSON) of one cluster."""
    cur = await conn.execute(_LOAD_TRACKS, (cluster,))
    tracks = {uuid: text for uuid, text in await cur.fetchall()}
    cur = await conn.execute(_LOAD_OPEN, (cluster,))
    alerts = [text for (text,) in await cur.fetchall()]
    return tracks, alerts


async def expire_health(conn: Connection, older_than: datetime) -> int:
    """Delete scores older than ``older_than`` and alerts resolved before it; returns rows (chunks) dropped."""
    return await call_count(conn, _EXPIRE, (aware(older_than, "older_than"),))


# --- readers (operators, the demo's report, tests) ----------------------------------------------------


async def health_scores(conn: Connection, cluster: str, *, gpu_uuid: str | None = None,
                        changes_only: bool = False) -> list[dict[str, object]]:
    """Score history of a cluster (one GPU's with ``gpu_uuid``; state changes only with ``changes_only``),
    oldest first, as dicts with ``at`` in Unix seconds."""
    keys = ("at", "node", "gpu_uuid", "gpu_index", "score", "state", "risk", "changed", "previous", "cause",
            "components", "reasons")
    rows = await _history(conn, _SCORES + (" AND changed" if changes_only else ""), "ts", cluster, gpu_uuid)
    return [dict(zip(keys, row, strict=True)) for row in rows]


async def health_alerts(conn: Connection, cluster: str) -> list[dict[str, object]]:
    """Every alert of a cluster, oldest first (``resolved_at`` None while open), times in Unix seconds."""
    cur = await conn.execute(
        "SELECT fingerprint, rule, severity, gpu_uuid, node, summary, extract(epoch FROM started_at)::float8, "
        "extract(epoch FROM resolved_at)::float8 FROM health_alerts WHERE cluster = %s "
        "ORDER BY started_at, fingerprint", (cluster,))
    keys = ("fingerprint", "rule", "severity", "gpu_uuid", "node", "summary", "started_at", "resolved_at")
    return [dict(zip(keys, row, strict=True)) for row in await cur.fetchall()]


async def health_overrides(conn: Connection, cluster: str, gpu_uuid: str | None = None) -> list[HealthOverrideRow]:
    """The audit trail of cordons and uncordons, oldest first."""
    return [HealthOverrideRow(*row) for row in await _history(conn, _OVERRIDES, "at", cluster, gpu_uuid)]


_SCORES = ("SELECT extract(epoch FROM ts)::float8, node, gpu_uuid, gpu_index, score, state, risk, changed, "
           "previous, cause, components, reasons FROM health_scores WHERE cluster = %s")
_OVERRIDES = ("SELECT gpu_uuid, extract(epoch FROM at)::float8, action, reason, requested_by, previous, current, "
              "cleared, node FROM health_overrides WHERE cluster = %s")


async def _history(conn: Connection, select: str, time_column: str, cluster: str,
                   gpu_uuid: str | None) -> list[tuple[Any, ...]]:
    """Rows of `select` (filtered on cluster) for one cluster, or one GPU of it, in time order."""
    params: list[object] = [cluster]
    if gpu_uuid is not None:
        select += " AND gpu_uuid = %s"
        params.append(gpu_uuid)
    cur = await conn.execute(f"{select} ORDER BY {time_column}, gpu_uuid", params)
    return list(await cur.fetchall())
