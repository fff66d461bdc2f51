"""GPU inventory and the demo's bus round-trip table: small upserts and lookups.

Services may not import psycopg, so every table they touch gets its few typed calls here.
Inventory is last-writer-wins per GPU (a node re-announcing replaces its row); round-trip rows are
first-writer-wins per message id (redelivery is ignored).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from gpuaware.tsdb.pool import Connection
from gpuaware.tsdb.rows import INVENTORY_COLUMNS, InventoryGpu

_INV_WRITE_COLS = INVENTORY_COLUMNS[:-1]  # updated_at is set by the database
_INV_TYPES = ("text", "text", "integer", "text", "integer", "boolean", "text", "integer")
# one statement for any number of GPUs (a cluster's agents all announce at once when it starts):
# the rows travel as one array per column, so the database plans and runs one statement, not one per GPU
_UPSERT = (
    f"INSERT INTO gpu_inventory ({', '.join(_INV_WRITE_COLS)}, updated_at) "
    f"SELECT *, now() FROM unnest({', '.join(f'%s::{t}[]' for t in _INV_TYPES)}) "
    "ON CONFLICT (gpu_uuid) DO UPDATE SET "
    + ", ".join(f"{c} = EXCLUDED.{c}" for c in (*_INV_WRITE_COLS[1:], "updated_at"))
)
_SELECT = f"SELECT {', '.join(INVENTORY_COLUMNS)} FROM gpu_inventory"


def _upsert_params(gpus: Iterable[InventoryGpu]) -> list[list[Any]] | None:
    """One list per column; a GPU named twice keeps its last row (one statement may not update a row
    twice), as a row-by-row upsert would have left it."""
    last = {g.gpu_uuid: tuple(g)[: len(_INV_WRITE_COLS)] for g in gpus}
    if not last:
        return None
    return [list(column) for column in zip(*last.values(), strict=True)]


async def upsert_inventory(conn: Connection, gpus: Iterable[InventoryGpu]) -> int:
    """Insert or replace each GPU's row; returns how many rows were written."""
    params = _upsert_params(gpus)
    if params is None:
        return 0
    async with conn.transaction(), conn.cursor() as cur:
        await cur.execute(_UPSERT, params)
        return cur.rowcount


async def list_inventory(conn: Connection, *, node: str | None = None) -> list[InventoryGpu]:
    """Every GPU's row (or one node's), ordered by node and GPU index."""
    async with conn.cursor(row_factory=class_row(InventoryGpu)) as cur:
        if node is None:
            await cur.execute(_SELECT + " ORDER BY node, gpu_index")
        else:
            await cur.execute(_SELECT + " WHERE node = %s ORDER BY gpu_index", (node,))
        return await cur.fetchall()


_STORE = ("INSERT INTO bus_roundtrip (id, subject, payload) VALUES (%s, %s, %s) "
          "ON CONFLICT (id) DO NOTHING")
_FETCH = "SELECT id, subject, payload, received_at FROM bus_roundtrip WHERE id = %s"


async def store_roundtrip(conn: Connection, message_id: str, subject: str, payload: Any) -> bool:
    """Store one received message; False when this id was already stored (a redelivery)."""
    async with conn.transaction():
        cur = await conn.execute(_STORE, (message_id, subject, Jsonb(payload)))
    return cur.rowcount == 1


async def fetch_roundtrip(conn: Connection, message_id: str) -> tuple[str, str, Any, datetime] | None:
    """(id, subject, payload, received_at) of a stored message, or None."""
    cur = await conn.execute(_FETCH, (message_id,))
    row = await cur.fetchone()
    return None if row is None else (row[0], row[1], row[2], row[3])
