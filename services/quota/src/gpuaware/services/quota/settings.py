"""The quota service's one frozen settings object, read once from ``GPUAWARE_QUOTA_*``.

``TREE_SOURCE`` says where the queue tree comes from: ``file`` (the embedded stack's default) or
``crd`` (Kubernetes mode, the chart's default: the cluster's ``GPUQueue`` objects, watched and
hot-reloaded, each told in its status whether it was accepted; ``crd_tree.py``).

``TREE`` names the queue tree file (YAML or JSON, ``gpuaware.quota.QuotaConfig``). Without one (and in
``crd`` mode until a GPUQueue is accepted) every queue a pod names is accepted with no guarantee and
no limit (``open_queues``): quota then only accounts and reports, and placement decides exactly as it
would without it. A tree file that does not validate stops the service at start with every reason
(``SettingsError``); nothing half-applies.

The cap on preemptions per pod is the tree's ``max_preemptions_per_pod``: a tree file says it
itself; GPUQueue objects carry queues only, so in ``crd`` mode it is ``MAX_PREEMPTIONS_PER_POD``
(``null`` = no cap). Each queue's lease (``min_runtime_s``) is a field of the queue in both.

Sample::

    GPUAWARE_QUOTA_TREE=deploy/quota/queues.yaml
    GPUAWARE_QUOTA_REPORT_INTERVAL_S=10

Two replicas share one lease (``LEASE_BUCKET``, key: the cluster; ``handlers.py`` says who does what).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

from msgspec import Meta

from gpuaware.quota import QueueTree, QuotaConfigError, validate
from gpuaware.runtime import DatabaseSettings, SettingsError
from gpuaware.schemas import QUOTA_ID, QUOTA_LEASE_BUCKET

__all__ = ["OPEN_TREE", "QuotaSettings"]

OPEN_TREE = {"open_queues": True, "default_queue": "default", "queues": [{"name": "default"}]}
"""the tree without a file: any queue, unlimited"""


class QuotaSettings(DatabaseSettings, frozen=True, kw_only=True):
    prefix: ClassVar[str] = "GPUAWARE_QUOTA_"

    service_name: str = QUOTA_ID

    tree_source: Literal["file", "crd"] = "file"
    """``file``: the tree is ``tree``; ``crd``: the cluster's GPUQueue objects (in-cluster credentials in a
    pod, else ``KUBECONFIG``)"""
    tree: str = ""
    """the queue tree file (YAML/JSON); empty = every queue unlimited (quota accounts only)"""
    report_interval_s: float = 10.0
    """how often ``QuotaUsageReported`` is published and stored"""
    reservation_ttl_s: float = 60.0
    """an admitted pod counts against its queue until it is bound, at most this long"""
    pending_ttl_s: float = 300.0
    """a refused pod counts as its queue's demand (fair shares, Jain's index) this long after it asked"""
    max_preemptions_per_pod: Annotated[int, Meta(ge=0)] | None = 2
    """``crd`` mode: the tree's cap on preemptions per pod (a tree file says its own); ``null`` = no cap"""
    lease_bucket: str = QUOTA_LEASE_BUCKET
    """the NATS KV bucket of the quota leader's lease (key: the cluster; value: the holder's instance id)"""
    lease_ttl_s: float = 3.0
    """a leader that stops renewing (killed, cut off) loses the lease this long after its last renewal"""
    lease_poll_s: float = 0.25
    """how often a standby tries to win the lease"""
    leader_wait_s: float = 5.0
    """how long a standby holds an admission it relays while no leader answers (a takeover under way)"""

    def __post_init__(self) -> None:
        self.require_positive("report_interval_s", "reservation_ttl_s", "pending_ttl_s", "lease_ttl_s", "lease_poll_s",
                              "leader_wait_s")
        if self.tree_source == "crd" and self.tree:
            raise SettingsError("GPUAWARE_QUOTA_TREE names a file but GPUAWARE_QUOTA_TREE_SOURCE is crd (the tree is "
                                "the cluster's GPUQueue objects): set one or the other")
        self.queue_tree()

    def tree_fields(self) -> dict[str, object]:
        """The tree's cluster-wide fields a GPUQueue cannot carry (``crd`` mode)."""
        return {"max_preemptions_per_pod": self.max_preemptions_per_pod}

    def queue_tree(self) -> QueueTree:
        """The validated tree (``SettingsError`` with every reason when it does not validate)."""
        try:
            if not self.tree:
                return validate(OPEN_TREE)
            path = Path(self.tree)
            if not path.is_file():
                raise SettingsError(f"GPUAWARE_QUOTA_TREE: no file {self.tree}")
            return validate(path)
        except QuotaConfigError as exc:
            raise SettingsError(f"GPUAWARE_QUOTA_TREE {self.tree}: {exc}") from None
