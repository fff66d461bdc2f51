"""Who may publish and subscribe to what: one NATS user per service, least privilege.

Why: the bus is the only way services talk, so it is also the place to contain a compromised or
buggy one. With per-service users, the telemetry agent on every GPU node (the widest-deployed, most
exposed process) cannot forge a placement decision or a binding; placement cannot bind pods or
delete streams; nothing but ``admin`` can create, change or delete a stream. Like the subjects and
the streams, the permissions are part of the contract: they live here, built from the subject
constants and stream specs (never hand-typed where a constant exists), so the devstack launcher,
the tests and the Helm chart render the same ``authorization`` block from one source, and a
subject renamed in ``schemas/`` moves its permission with it.

How each list is derived: from what the service's code actually does on the bus (its
``handlers.py`` docstrings list it), translated to the subjects nats-py sends:

* events it publishes (JetStream, with ``.>`` for routing suffixes such as ``.<cluster>.<node>``) and
  requests it makes (``quota.admit``, ``world.snapshot``);
* ``$JS.API.INFO``, ``$JS.API.STREAM.NAMES`` (find the stream of a subject) and
  ``$JS.API.STREAM.INFO.<S>`` for every platform stream (``run_service`` checks them all at start);
* a durable pull consumer ``<d>`` on stream ``<S>``: ``$JS.API.CONSUMER.DURABLE.CREATE.<S>.<d>``,
  ``CONSUMER.INFO.<S>.<d>``, ``CONSUMER.MSG.NEXT.<S>.<d>`` and its acks ``$JS.ACK.<S>.<d>.>``;
* an ordered "follow" consumer on ``<S>`` (ephemeral, named by the server):
  ``$JS.API.CONSUMER.CREATE.<S>``, ``CONSUMER.INFO.<S>.*``, ``CONSUMER.DELETE.<S>.*`` and the flow
  control replies ``$JS.FC.<S>.>``;
* the placement lease (a KV bucket it owns): ``$KV.<bucket>.>``, ``$JS.API.STREAM.CREATE|INFO`` of
  ``KV_<bucket>``, ``$JS.API.DIRECT.GET.KV_<bucket>.>`` and ``STREAM.MSG.GET.KV_<bucket>``;
* dead letters: ``deadletter.<s>`` for every subject ``s`` it consumes, follows or serves;
* NATS micro: every service registers one, so it subscribes to ``$SRV.PING|INFO|STATS`` (all,
  by name, by name and id) and its endpoints' subjects, and answers with ``allow_responses``
  (reply subjects only, once each) instead of a publish right on ``_INBOX.>``;
* replies to its own requests and JetStream API calls arrive on its own inbox prefix,
  ``_INBOX_<identity>.>`` (``inbox_prefix``; ``gpuaware.bus.connect`` sets it for a user), so no
  identity can read the replies meant for another.

``admin`` (``gpuaware up``, provisioning, operators' tools) may do anything.

Provisioning under least privilege: services may not create or change streams. The launcher (or
the chart's provisioning job) declares them as ``admin``; ``run_service`` then only reads their
info, and when a service's ``ensure_stream`` is refused it carries on if the stream exists with a
compatible configuration (same subjects, retention and storage; other limits may differ) and stops
with a message naming the stream otherwise.

Known limits of subject permissions (tokens cannot be partially wildcarded): the agent's durable
name carries its node names (``telemetry-agent-<nodes>``), so it gets ``*`` for the consumer token
on BINDER; follow consumers are named by the server, so ``CONSUMER.INFO|DELETE.<S>.*``.

Sample (the devstack writes this to ``<data>/nats/auth.conf`` with random passwords)::

    from gpuaware.schemas.permissions import render_server_config
    text = render_server_config({"admin": "...", "placement": "...", "binder": "...",
                                 "telemetry-agent": "...", "telemetry-collector": "..."})
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import msgspec

from gpuaware.schemas.alerts import ALERT_RAISED, ALERT_RESOLVED
from gpuaware.schemas.binder import (
    NODE_POWER_CHANGED,
    POD_BIND_FAILED,
    POD_BOUND,
    POD_FINISHED,
    POD_PREEMPTED,
)
from gpuaware.schemas.checkpoint import CHECKPOINT_ACKNOWLEDGED, CHECKPOINT_REQUESTED
from gpuaware.schemas.deadletter import dead_letter_subject
from gpuaware.schemas.forecast import DEMAND_PREDICTED, FORECAST_DURATION, GPU_UTIL_PREDICTED
from gpuaware.schemas.health import DRAIN_RECOMMENDED, GPU_SCORED, GPU_STATE_CHANGED, HEALTH_CORDON
from gpuaware.schemas.inventory import NODE_INVENTORY
from gpuaware.schemas.operational import COLLECTOR_STATS, FORECASTING_STATS, HEALTH_STATS
from gpuaware.schemas.placement import (
    NODE_POWER_RECOMMENDED,
    PLACEMENT_DECIDED,
    PLACEMENT_EXPLAIN,
    PLACEMENT_EXPLAINED,
    POD_UNSCHEDULABLE,
)
from gpuaware.schemas.pods import POD_PENDING
from gpuaware.schemas.quota import QUOTA_ADMIT, QUOTA_USAGE_REPORTED
from gpuaware.schemas.streams import ALERTS, BINDER, FORECAST, PLACEMENT, STREAMS, TELEMETRY, StreamSpec
from gpuaware.schemas.subjects import consumer_name, subject_token
from gpuaware.schemas.telemetry import GPU_ROLLED_UP, GPU_SAMPLED
from gpuaware.schemas.usage import POD_USAGE_REPORTED
from gpuaware.schemas.world import WORLD_SNAPSHOT

__all__ = [
    "ADMIN",
    "ALERT_BRIDGE",
    "BINDER_DURABLE",
    "BINDER_ID",
    "COLLECTOR_DURABLE",
    "FORECASTING_LEASE_BUCKET",
    "HEALTH_LEASE_BUCKET",
    "HEALTH_SCORING",
    "IDENTITIES",
    "LEASE_BUCKET",
    "OPERATIONAL_ENDPOINTS",
    "PLACEMENT_ID",
    "QUOTA_ID",
    "QUOTA_LEASE_BUCKET",
    "RECORDER_ID",
    "SERVICE_IDENTITIES",
    "TELEMETRY_AGENT",
    "TELEMETRY_COLLECTOR",
    "Permissions",
    "authorization",
    "binder_durable",
    "checkpoint_durable",
    "health_cordon_leader",
    "health_durable",
    "inbox_prefix",
    "permissions_for",
    "placement_durable",
    "power_durable",
    "quota_admit_leader",
    "recorder_durable",
    "render_server_config",
]

ADMIN = "admin"
TELEMETRY_AGENT = "telemetry-agent"
TELEMETRY_COLLECTOR = "telemetry-collector"
PLACEMENT_ID = "placement"
BINDER_ID = "binder"
HEALTH_SCORING = "health-scoring"
QUOTA_ID = "quota"
FORECASTING = "forecasting"
ALERT_BRIDGE = "alert-bridge"
RECORDER_ID = "recorder"
#: the service identities (each is also the service's default ``service_name``, its micro name)
SERVICE_IDENTITIES: tuple[str, ...] = (TELEMETRY_AGENT, TELEMETRY_COLLECTOR, PLACEMENT_ID, BINDER_ID, HEALTH_SCORING,
                                       QUOTA_ID, FORECASTING, ALERT_BRIDGE, RECORDER_ID)
IDENTITIES: tuple[str, ...] = (ADMIN, *SERVICE_IDENTITIES)

# Names the services choose in their settings (tests check these agree with the settings' defaults).
#: request/reply endpoints services serve outside the contract's registry (operational introspection,
#: not messages other services rely on; ``REQUESTS`` holds the contract's endpoints)
OPERATIONAL_ENDPOINTS: dict[str, tuple[str, ...]] = {TELEMETRY_COLLECTOR: (COLLECTOR_STATS,),
                                                    HEALTH_SCORING: (HEALTH_STATS,),
                                                    FORECASTING: (FORECASTING_STATS,)}
COLLECTOR_DURABLE = "telemetry-collector"
BINDER_DURABLE = "binder"
LEASE_BUCKET = "placement-leader"
HEALTH_LEASE_BUCKET = "health-scoring-leader"
FORECASTING_LEASE_BUCKET = "forecasting-leader"
QUOTA_LEASE_BUCKET = "quota-leader"

JS_API = "$JS.API"
ANY = ">"


def placement_durable(cluster: str) -> str:
    """Placement's durable consumer of pending pods (``PlacementSettings.durable``)."""
    return consumer_name(PLACEMENT_ID, cluster)


def quota_admit_leader(cluster: str) -> str:
    """Where a quota standby relays the ``quota.admit`` requests it receives (the same request and reply):
    only the instance holding its cluster's quota lease serves it, so one instance decides, never two."""
    return f"{QUOTA_ADMIT}.leader.{subject_token(cluster)}"


def health_cordon_leader(cluster: str) -> str:
    """Where a health-scoring standby relays the ``health.cordon`` requests it receives (the same request
    and reply): only the instance holding its cluster's health lease serves it, since only the leader
    holds the GPUs' tracks an override changes."""
    return f"{HEALTH_CORDON}.leader.{subject_token(cluster)}"


def recorder_durable(cluster: str) -> str:
    """The recorder's durable consumer, on BINDER and on PLACEMENT alike (``RecorderSettings.durable_name``)."""
    return consumer_name(RECORDER_ID, cluster)


def health_durable(cluster: str) -> str:
    """Health-scoring's durable consumer of telemetry (``HealthScoringSettings.durable``)."""
    return consumer_name(HEALTH_SCORING, cluster)


def binder_durable(cluster: str) -> str:
    """The binder's durable consumer of decisions when named after its cluster (several clusters on one
    server); ``BINDER_DURABLE`` otherwise."""
    return consumer_name(BINDER_DURABLE, cluster)


def checkpoint_durable(binder: str) -> str:
    """The binder's durable consumer of checkpoint answers, beside its durable ``binder`` of decisions."""
    return consumer_name(binder, "checkpoints")


def power_durable(binder: str) -> str:
    """The binder's durable consumer of node-power recommendations, beside its durable of decisions."""
    return consumer_name(binder, "power")


class Permissions(msgspec.Struct, frozen=True, kw_only=True):
    """One user's allowed subjects (NATS wildcards) and whether it may answer requests."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]
    allow_responses: bool = False
    """publish to the reply subject of a request it received (once), for micro endpoints"""

    def as_nats(self) -> dict[str, Any]:
        """The ``permissions`` object of a user in nats-server's configuration."""
        out: dict[str, Any] = {"publish": {"allow": list(self.publish)},
                               "subscribe": {"allow": list(self.subscribe)}}
        if self.allow_responses:
            out["allow_responses"] = True
        return out


# -- building blocks ---------------------------------------------------------------------------------


def _event(subject: str) -> tuple[str, str]:
    """An event subject, bare and with routing suffixes."""
    return subject, f"{subject}.{ANY}"


def _dead_letters(subjects: Iterable[str]) -> list[str]:
    return [dead_letter_subject(s) for s in subjects]


def _js_base(streams: Iterable[StreamSpec] = STREAMS) -> list[str]:
    """What every JetStream user needs: account info, stream lookup by subject, stream info."""
    return [f"{JS_API}.INFO", f"{JS_API}.STREAM.NAMES", *(f"{JS_API}.STREAM.INFO.{s.name}" for s in streams)]


def _durable(stream: StreamSpec, durable: str) -> list[str]:
    """A durable pull consumer: declare, inspect, pull, acknowledge."""
    return [f"{JS_API}.CONSUMER.DURABLE.CREATE.{stream.name}.{durable}",
            f"{JS_API}.CONSUMER.INFO.{stream.name}.{durable}",
            f"{JS_API}.CONSUMER.MSG.NEXT.{stream.name}.{durable}",
            f"$JS.ACK.{stream.name}.{durable}.{ANY}"]


def _follow(stream: StreamSpec, *, delete: bool = True) -> list[str]:
    """An ordered (ephemeral push) consumer: create, inspect, delete on stop (``delete=False``: the
    server removes it when inactive, for a user that must not delete another's durable there), flow
    control replies."""
    return [f"{JS_API}.CONSUMER.CREATE.{stream.name}",
            f"{JS_API}.CONSUMER.INFO.{stream.name}.*",
            *([f"{JS_API}.CONSUMER.DELETE.{stream.name}.*"] if delete else []),
            f"$JS.FC.{stream.name}.{ANY}"]


def _kv(bucket: str) -> list[str]:
    """A KV bucket the user owns: create it (idempotent), read, write, compare-and-set."""
    stream = f"KV_{bucket}"
    return [f"$KV.{bucket}.{ANY}", f"{JS_API}.STREAM.CREATE.{stream}", f"{JS_API}.STREAM.INFO.{stream}",
            f"{JS_API}.DIRECT.GET.{stream}.{ANY}", f"{JS_API}.STREAM.MSG.GET.{stream}"]


def _micro(service: str, endpoints: Iterable[str] = ()) -> list[str]:
    """Subscriptions of a NATS micro service: discovery (all, by name, by name + id), its endpoints."""
    return ["$SRV.*", f"$SRV.*.{service}", f"$SRV.*.{service}.*", *endpoints]


def inbox_prefix(identity: str) -> str:
    """The inbox prefix of a user: replies to its requests arrive on ``<prefix>.<random>``."""
    return "_INBOX_" + re.sub(r"[^A-Za-z0-9_-]", "_", identity)


def _inbox(identity: str) -> str:
    return f"{inbox_prefix(identity)}.>"


def _dedupe(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


# -- the identities --------------------------------------------------------------------------------


def permissions_for(identity: str, *, cluster: str = "default", lease_bucket: str = LEASE_BUCKET) -> Permissions:
    """The permissions of one identity (see the module docstring for how each list is derived)."""
    if identity == ADMIN:
        return Permissions(publish=(ANY,), subscribe=(ANY,), allow_responses=True)
    if identity == TELEMETRY_AGENT:
        # publishes its nodes' samples, inventories, usage; replays binder.pod.> (allocations) through a
        # durable it deletes and recreates at start (its name carries the node names: any consumer token)
        binder_pods = "binder.pod.>"
        pub = [*_event(GPU_SAMPLED), *_event(NODE_INVENTORY), *_event(POD_USAGE_REPORTED), *_js_base(),
               f"{JS_API}.CONSUMER.DURABLE.CREATE.{BINDER.name}.*", f"{JS_API}.CONSUMER.INFO.{BINDER.name}.*",
               f"{JS_API}.CONSUMER.MSG.NEXT.{BINDER.name}.*", f"{JS_API}.CONSUMER.DELETE.{BINDER.name}.*",
               f"$JS.ACK.{BINDER.name}.{ANY}", *_dead_letters([binder_pods])]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity)]),
                           allow_responses=True)
    if identity == TELEMETRY_COLLECTOR:
        # consumes telemetry.> (durable), publishes rollups, answers collector.stats
        pub = [*_event(GPU_ROLLED_UP), *_js_base(), *_durable(TELEMETRY, COLLECTOR_DURABLE),
               *_dead_letters([*TELEMETRY.subjects, *OPERATIONAL_ENDPOINTS[identity]])]
        return Permissions(publish=_dedupe(pub),
                           subscribe=_dedupe([_inbox(identity), *_micro(identity, OPERATIONAL_ENDPOINTS[identity])]),
                           allow_responses=True)
    if identity == PLACEMENT_ID:
        followed = [NODE_INVENTORY, GPU_ROLLED_UP, GPU_STATE_CHANGED, GPU_SCORED, GPU_UTIL_PREDICTED, DEMAND_PREDICTED,
                    POD_BOUND, POD_BIND_FAILED, POD_PREEMPTED, POD_FINISHED, PLACEMENT_DECIDED, POD_UNSCHEDULABLE,
                    NODE_POWER_CHANGED, NODE_POWER_RECOMMENDED]
        consumed = [s for f in [*followed, POD_PENDING] for s in _event(f)]
        # raises (and resolves) an alert when a GPUPolicy profile fails to apply (config_reload_failed)
        pub = [*_event(PLACEMENT_DECIDED), *_event(POD_UNSCHEDULABLE), *_event(PLACEMENT_EXPLAINED),
               *_event(NODE_POWER_RECOMMENDED), *_event(ALERT_RAISED), *_event(ALERT_RESOLVED),
               QUOTA_ADMIT, WORLD_SNAPSHOT, FORECAST_DURATION, *_js_base(),
               *_durable(BINDER, placement_durable(cluster)),
               *(api for s in (TELEMETRY, ALERTS, FORECAST, BINDER, PLACEMENT) for api in _follow(s)),
               f"{JS_API}.STREAM.MSG.GET.{PLACEMENT.name}",  # reading back a previous leader's decision
               *_kv(lease_bucket), *_dead_letters([*consumed, PLACEMENT_EXPLAIN])]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity, [PLACEMENT_EXPLAIN])]),
                           allow_responses=True)
    if identity == BINDER_ID:
        # consumes decisions and checkpoint answers (durables), publishes the world's events, serves the
        # world's snapshot
        out = [POD_PENDING, POD_BOUND, POD_BIND_FAILED, POD_PREEMPTED, POD_FINISHED, CHECKPOINT_REQUESTED,
               CHECKPOINT_ACKNOWLEDGED, NODE_POWER_CHANGED]
        # follows placement's unschedulable verdicts (the "why pending" Event on a Kubernetes pod) and its
        # node-power recommendations (carried out, answered with binder.node.power_changed.v1), and
        # reads back its own events at start (the twin restored after a crash)
        # its durables: the default names, or named after the cluster (several clusters on one server)
        pub = [*(s for o in out for s in _event(o)), *_js_base(),
               *(api for name in (BINDER_DURABLE, binder_durable(cluster))
                 for api in (*_durable(PLACEMENT, name), *_durable(BINDER, checkpoint_durable(name)),
                             *_durable(PLACEMENT, power_durable(name)))),
               *_follow(PLACEMENT), *_follow(BINDER, delete=False),
               *_dead_letters([*_event(PLACEMENT_DECIDED), *_event(CHECKPOINT_ACKNOWLEDGED),
                               *_event(NODE_POWER_RECOMMENDED), WORLD_SNAPSHOT])]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity, [WORLD_SNAPSHOT])]),
                           allow_responses=True)
    if identity == HEALTH_SCORING:
        # consumes its cluster's telemetry (samples, or rollups) through a durable, follows inventories
        # (models) and which pods hold which GPUs (decisions, the binder's pod events), publishes scores,
        # state changes, drain recommendations and alerts, answers health.cordon and health.stats; two
        # replicas share a lease (its KV bucket): the leader consumes, publishes and applies health.cordon,
        # which every instance answers (a standby relays it to the leader: health.cordon.leader.<cluster>)
        consumed = [s for f in (GPU_SAMPLED, GPU_ROLLED_UP, NODE_INVENTORY, PLACEMENT_DECIDED, POD_BIND_FAILED,
                                POD_PREEMPTED, POD_FINISHED) for s in _event(f)]
        endpoints = [HEALTH_CORDON, health_cordon_leader(cluster), *OPERATIONAL_ENDPOINTS[identity]]
        pub = [*(s for o in (GPU_SCORED, GPU_STATE_CHANGED, DRAIN_RECOMMENDED, ALERT_RAISED, ALERT_RESOLVED)
                 for s in _event(o)), health_cordon_leader(cluster),
               *_js_base(), *_durable(TELEMETRY, health_durable(cluster)), *_follow(TELEMETRY), *_follow(PLACEMENT),
               *_follow(BINDER), *_kv(HEALTH_LEASE_BUCKET),
               *_dead_letters([*consumed, *endpoints])]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity, endpoints)]),
                           allow_responses=True)
    if identity == QUOTA_ID:
        # follows the binder's pod events (what runs: the ledger, chargeback), answers quota.admit,
        # publishes usage snapshots, asks forecasting.duration (backfill); two replicas share a lease
        # (its KV bucket), and a standby relays quota.admit to the leader (quota.admit.leader.<cluster>)
        consumed = [s for f in (POD_PENDING, POD_BOUND, POD_BIND_FAILED, POD_PREEMPTED, POD_FINISHED) for s in _event(f)]
        leader = quota_admit_leader(cluster)
        # raises (and resolves) an alert when a queue tree fails to load or apply (config_reload_failed)
        pub = [*_event(QUOTA_USAGE_REPORTED), *_event(ALERT_RAISED), *_event(ALERT_RESOLVED), FORECAST_DURATION,
               leader, *_js_base(), *_follow(BINDER),
               *_kv(QUOTA_LEASE_BUCKET), *_dead_letters([*consumed, QUOTA_ADMIT, leader])]
        return Permissions(publish=_dedupe(pub),
                           subscribe=_dedupe([_inbox(identity), *_micro(identity, [QUOTA_ADMIT, leader])]),
                           allow_responses=True)
    if identity == FORECASTING:
        # follows its cluster's inventories (GPU models), one-minute rollups (a digital twin's samples) and
        # pod events (demand, job durations), publishes
        # demand and per-GPU forecasts, answers forecasting.duration and forecasting.stats, raises and
        # resolves its models' drift alerts (the registry is in PostgreSQL); it may not delete consumers
        # on BINDER (the binder's durable lives there); two replicas share a lease (its KV bucket): the
        # leader publishes, and a new leader reads FORECAST's last forecast per subject before it does
        consumed = [*_event(GPU_ROLLED_UP), *_event(GPU_SAMPLED), *_event(NODE_INVENTORY)]
        endpoints = [FORECAST_DURATION, *OPERATIONAL_ENDPOINTS[identity]]
        pub = [*_event(DEMAND_PREDICTED), *_event(GPU_UTIL_PREDICTED), *_event(ALERT_RAISED), *_event(ALERT_RESOLVED),
               *_js_base(), *_follow(TELEMETRY), *_follow(BINDER, delete=False), *_follow(FORECAST),
               *_kv(FORECASTING_LEASE_BUCKET), *_dead_letters([*consumed, *endpoints])]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity, endpoints)]),
                           allow_responses=True)
    if identity == RECORDER_ID:
        # consumes the loop's events (BINDER and PLACEMENT, one durable on each) into PostgreSQL; publishes
        # nothing but the dead letters of what it cannot store; never deletes a consumer
        loop = [*BINDER.subjects, *PLACEMENT.subjects]
        pub = [*_js_base(), *(api for s in (BINDER, PLACEMENT) for api in _durable(s, recorder_durable(cluster))),
               *_dead_letters(loop)]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity)]),
                           allow_responses=True)
    if identity == ALERT_BRIDGE:
        # follows alerts.> (the ALERTS stream) to post to Alertmanager; publishes what Alertmanager's
        # webhook routes to it as alert events (routed by cluster), and dead-letters a webhook alert that
        # cannot become one; never deletes a stream's durable (it has none)
        routed = [*_event(ALERT_RAISED), *_event(ALERT_RESOLVED)]
        pub = [*routed, *_js_base(), *_follow(ALERTS), *_dead_letters(routed)]
        return Permissions(publish=_dedupe(pub), subscribe=_dedupe([_inbox(identity), *_micro(identity)]),
                           allow_responses=True)
    raise KeyError(f"unknown identity {identity!r}; known: {', '.join(IDENTITIES)}")


def authorization(passwords: Mapping[str, str], *, cluster: str | Sequence[str] = "default",
                  lease_bucket: str = LEASE_BUCKET) -> dict[str, Any]:
    """nats-server's ``authorization`` block: one user per identity in ``passwords`` (identity -> password).

    The user name is the identity. Passwords may be plain or bcrypt hashes (``$2a$...``, from
    ``nats server passwd``): nats-server accepts both. Several clusters on one server (the demo's two
    runs): each identity may do what it needs for any of them, nothing more.
    """
    clusters = [cluster] if isinstance(cluster, str) else list(cluster)
    users = []
    for identity, password in passwords.items():
        if not password:
            raise ValueError(f"identity {identity!r} has an empty password")
        each = [permissions_for(identity, cluster=c, lease_bucket=lease_bucket) for c in clusters]
        merged = Permissions(publish=_dedupe(s for p in each for s in p.publish),
                             subscribe=_dedupe(s for p in each for s in p.subscribe),
                             allow_responses=any(p.allow_responses for p in each))
        users.append({"user": identity, "password": password, "permissions": merged.as_nats()})
    return {"users": users}


def render_server_config(passwords: Mapping[str, str], *, cluster: str | Sequence[str] = "default",
                         lease_bucket: str = LEASE_BUCKET) -> str:
    """A nats-server configuration file holding only the ``authorization`` block (JSON, which
    nats-server's configuration format accepts), for ``nats-server -c``."""
    return json.dumps({"authorization": authorization(passwords, cluster=cluster, lease_bucket=lease_bucket)},
                      indent=2) + "\n"
