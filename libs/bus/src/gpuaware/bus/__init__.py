"""gpuaware.bus: NATS + JetStream for every service, the only module that imports `nats`.

    async with bus.connected(settings.nats_url, name="placement") as nc:
        js = nc.jetstream()
        await bus.ensure_stream(js, PENDING_PODS_STREAM)
        pods = bus.event_channel(PodPending, id_of=lambda p: p.uid)   # its subject: the event's tag
        consumer = await bus.subscribe_durable(js, pods, "placement", handle_pending)
        await bus.publish(js, decisions, decision)             # stored once, traced
        reply = await bus.request(nc, QUOTA_ADMIT, ask, Admission, timeout=1.0)
        leader = await bus.serve(nc, bus.Endpoint("admit-leader", subject, Ask, decide))  # internal, no $SRV
        view = await bus.follow(js, [bound, finished], ledger.apply)   # every instance, in order
        lease = await bus.LeaderLease(js, "placement-leader", cluster, me, on_change=...).start()

Handlers are plain typed functions; raising `TransientError` / `PermanentError` decides retries
and dead letters. Each module's docstring explains its part of the design.
"""

from gpuaware.bus.batch import BatchConsumer, BatchHandler, subscribe_batched
from gpuaware.bus.codec import Channel, content_id, decoder_for, event_channel
from gpuaware.bus.connection import (
    Client,
    ReconnectPolicy,
    close,
    connect,
    connected,
    reconnect_delay,
    tls_context,
)
from gpuaware.bus.consumer import (
    ConsumerOptions,
    ConsumerStats,
    Delivery,
    DurableConsumer,
    Handler,
    subscribe_durable,
)
from gpuaware.bus.deadletter import DeadLetters, ensure_dead_letter_stream
from gpuaware.bus.dedupe import Deduper
from gpuaware.bus.errors import (
    BusError,
    NoResponders,
    PermanentError,
    RequestTimeout,
    ServiceError,
    StreamConfigError,
    StreamPermissionError,
    TransientError,
)
from gpuaware.bus.follow import FollowDelivery, Follower, follow, read_stored
from gpuaware.bus.headers import MSG_ID
from gpuaware.bus.jetstream import (
    ConsumerSpec,
    JetStream,
    SimpleStreamSpec,
    StreamSpecLike,
    cluster_replicas,
    ensure_consumer,
    ensure_stream,
    stream_compatible,
)
from gpuaware.bus.lease import LeaderLease, open_lease_bucket
from gpuaware.bus.pipeline import PipelinedConsumer, PipelinedHandler, subscribe_pipelined
from gpuaware.bus.publish import PubAck, publish, publish_async, publish_core
from gpuaware.bus.retry import RetryPolicy
from gpuaware.bus.service import Endpoint, Responder, Service, add_service, request, serve
from gpuaware.bus.tracing import extract, inject

__all__ = [
    "MSG_ID",
    "BatchConsumer",
    "BatchHandler",
    "BusError",
    "Channel",
    "Client",
    "ConsumerOptions",
    "ConsumerSpec",
    "ConsumerStats",
    "DeadLetters",
    "Deduper",
    "Delivery",
    "DurableConsumer",
    "Endpoint",
    "FollowDelivery",
    "Follower",
    "Handler",
    "JetStream",
    "LeaderLease",
    "NoResponders",
    "PermanentError",
    "PipelinedConsumer",
    "PipelinedHandler",
    "PubAck",
    "ReconnectPolicy",
    "RequestTimeout",
    "Responder",
    "RetryPolicy",
    "Service",
    "ServiceError",
    "SimpleStreamSpec",
    "StreamConfigError",
    "StreamPermissionError",
    "StreamSpecLike",
    "TransientError",
    "add_service",
    "close",
    "cluster_replicas",
    "connect",
    "connected",
    "content_id",
    "decoder_for",
    "ensure_consumer",
    "ensure_dead_letter_stream",
    "ensure_stream",
    "event_channel",
    "extract",
    "follow",
    "inject",
    "open_lease_bucket",
    "publish",
    "publish_async",
    "publish_core",
    "read_stored",
    "reconnect_delay",
    "request",
    "serve",
    "stream_compatible",
    "subscribe_batched",
    "subscribe_durable",
    "subscribe_pipelined",
    "tls_context",
]
