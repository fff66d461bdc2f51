"""The recorder's one frozen settings object, read once from ``GPUAWARE_RECORDER_*``.

``NATS_URL`` / ``DATABASE_URL`` are honoured as fallbacks, as for every service. The consumer
settings say how the loop's events are pulled and how long a message may wait for the database;
the writer settings how rows are grouped into one COPY. Each field says what its default means.
"""

from __future__ import annotations

from typing import ClassVar

from gpuaware.runtime import DatabaseSettings, SettingsError
from gpuaware.schemas import RECORDER_ID, recorder_durable


class RecorderSettings(DatabaseSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_RECORDER_"

    service_name: str = RECORDER_ID
    durable: str = ""
    """the durable consumer (one on BINDER, one on PLACEMENT, same name) every replica shares; empty =
    ``recorder-<cluster>``. Events of other clusters on the same streams are acknowledged, not stored"""
    fetch_batch: int = 256
    """messages pulled at once by each consumer"""
    max_ack_pending: int = 4096
    """messages delivered but not yet stored, per consumer across replicas (the back-pressure bound)"""
    ack_wait_s: float = 30.0
    """a message not acknowledged within this is delivered again (a replica that died holding it)"""
    max_deliver: int = 10_000
    """deliveries before a message is dead-lettered. A database outage costs one per ``hold_s`` plus
    backoff (about 50 s with the defaults), so the default waits out days of outage, about as long as
    the streams keep the loop's events (7 days): messages simply wait, nothing is lost"""
    retry_cap_s: float = 30.0
    """longest wait before a message the database refused for now comes back (1, 2, 4 ... s)"""
    flush_rows: int = 2000
    """rows per COPY at most"""
    linger_s: float = 0.05
    """how long a batch waits for more rows (the other stream's) before it is written"""
    hold_s: float = 20.0
    """while the database is unreachable, a batch is retried in place for this long (its messages kept
    alive with in-progress acks) before they are handed back for redelivery"""
    pool_size: int = 2
    db_timeout_s: float = 2.0
    """how long a write waits for a database connection before it counts as a failed attempt"""

    def __post_init__(self) -> None:
        self.require_positive("fetch_batch", "max_ack_pending", "ack_wait_s", "max_deliver", "retry_cap_s",
                              "flush_rows", "hold_s", "pool_size", "db_timeout_s")
        if self.linger_s < 0:
            raise SettingsError(f"{self.prefix}LINGER_S must not be negative")

    def durable_name(self) -> str:
        return self.durable or recorder_durable(self.cluster)
