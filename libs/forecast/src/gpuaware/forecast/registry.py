"""The model registry's SQL (migration 0012; 0016 the p10 column): publish a version, read the newest,
store forecasts.

Only gpuaware.tsdb imports psycopg, so these coroutines take a connection the caller opened through
``gpuaware.tsdb`` (``tsdb.connect`` or a pool) and never import the driver. The ONNX bytes are
validated (``runtime.StreamingModel.load``) before a version is published, so the registry never
holds a model the service would refuse.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

__all__ = ["RegistryEntry", "accuracy_async", "latest_async", "latest_version_async", "publish_async",
           "store_points_async"]

_COLUMNS = "version, name, created_at, step_s, data_window, metrics, meta, sha256, onnx"
_WHICH = "(%(name)s::text IS NULL OR name = %(name)s) AND (%(exclude)s::text IS NULL OR name <> %(exclude)s)"
_LATEST = f"SELECT {_COLUMNS} FROM forecast_models WHERE {_WHICH} ORDER BY version DESC LIMIT 1"
_LATEST_VERSION = f"SELECT max(version) FROM forecast_models WHERE {_WHICH}"
_PUBLISH = ("INSERT INTO forecast_models (name, step_s, data_window, metrics, meta, sha256, onnx) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) RETURNING version")


@dataclasses.dataclass(frozen=True)
class RegistryEntry:
    version: int
    name: str
    created_at: Any
    step_s: float
    data_window: dict
    metrics: dict
    meta: dict
    sha256: str
    onnx: bytes

    @property
    def label(self) -> str:
        return f"{self.name}@{self.version}"


def _entry(row: tuple | None) -> RegistryEntry | None:
    if row is None:
        return None
    v = list(row)
    for i in (4, 5, 6):
        if isinstance(v[i], str):
            v[i] = json.loads(v[i])
    v[8] = bytes(v[8])
    return RegistryEntry(*v)


async def publish_async(conn: Any, name: str, onnx: bytes, metrics: dict | None = None) -> int:
    """Validate ``onnx`` and store it as the next version of ``name`` (committed); returns the version."""
    from gpuaware.forecast.runtime import StreamingModel

    model = StreamingModel.load(onnx)  # ModelError: nothing is stored
    async with conn.transaction():
        cur = await conn.execute(_PUBLISH, (name, model.features.step_s,
                                            json.dumps(model.meta.get("data_window", {})), json.dumps(metrics or {}),
                                            json.dumps(model.meta), hashlib.sha256(onnx).hexdigest(), onnx))
        row = await cur.fetchone()
    return int(row[0])


async def latest_async(conn: Any, name: str | None = None, *, exclude: str | None = None) -> RegistryEntry | None:
    """The newest version of ``name`` (of any name but ``exclude`` when ``name`` is None)."""
    cur = await conn.execute(_LATEST, {"name": name, "exclude": exclude})
    return _entry(await cur.fetchone())


async def latest_version_async(conn: Any, name: str | None = None, *, exclude: str | None = None) -> int | None:
    """The cheap poll behind hot reload: the newest version number only."""
    cur = await conn.execute(_LATEST_VERSION, {"name": name, "exclude": exclude})
    row = await cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


_POINT = ("INSERT INTO forecast_points (issued_at, series, horizon_s, target_at, model, model_version, p10, p50, p90, "
          "fallback) VALUES (to_timestamp(%s), %s, %s, to_timestamp(%s), %s, %s, %s, %s, %s, %s) "
          "ON CONFLICT (series, horizon_s, issued_at) DO NOTHING")
_ACTUAL = "UPDATE forecast_points SET actual = %s WHERE series = %s AND target_at = to_timestamp(%s) AND actual IS NULL"


async def store_points_async(conn: Any, points: list, actuals: list[tuple[str, float, float]]) -> None:
    """One step's forecasts (``serving.Point``) and the actuals of the window that just closed, in one
    transaction (a redelivered window stores nothing twice). A quantile the series does not publish
    (NaN) is stored as NULL."""
    async with conn.transaction(), conn.cursor() as cur:
        if points:
            await cur.executemany(_POINT, [(p.issued_at, p.series, p.horizon_s, p.issued_at + p.horizon_s, p.model,
                                            p.model_version, None if p.p10 != p.p10 else p.p10, p.p50,
                                            None if p.p90 != p.p90 else p.p90, p.fallback)
                                           for p in points])
        if actuals:
            await cur.executemany(_ACTUAL, [(v, s, t) for s, t, v in actuals])


async def accuracy_async(conn: Any, series_prefix: str = "") -> list[tuple[str, str, float, int, float]]:
    """(model, model_version, horizon_s, n, RMSE of p50) over the points whose actual arrived."""
    cur = await conn.execute(
        "SELECT model, model_version, horizon_s, count(*), sqrt(avg((p50 - actual) ^ 2)) FROM forecast_points "
        "WHERE actual IS NOT NULL AND series LIKE %s GROUP BY 1, 2, 3 ORDER BY 1, 2, 3", (series_prefix + "%",))
    return [tuple(r) for r in await cur.fetchall()]
