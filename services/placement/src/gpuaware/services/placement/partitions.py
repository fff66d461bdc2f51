"""Strict partitions from the quota tree: the one file quota reads (its ``TREE``) says which nodes are
reserved to which queues; placement turns that into its `StrictPartitions` Filter
(gpuaware.placement.partitions), so it never proposes a node quota would refuse for the pod's queue.

The tree is validated by quota's one validator (`gpuaware.quota.validate`); a tree that does not
validate stops placement at start with every reason (running without the partitions would break
their promise silently). The file is read once at start: a changed partition needs a restart.
"""

from __future__ import annotations

from pathlib import Path

from gpuaware.placement import StrictPartitions
from gpuaware.quota import QuotaConfigError, validate
from gpuaware.runtime import SettingsError

__all__ = ["partition_filters"]


def partition_filters(tree_file: str) -> tuple[StrictPartitions, ...]:
    """The Filter plugins the tree's strict partitions ask for (none without a file or partitions)."""
    if not tree_file:
        return ()
    try:
        tree = validate(Path(tree_file))
    except QuotaConfigError as exc:
        raise SettingsError(f"GPUAWARE_PLACEMENT_QUOTA_TREE {tree_file}: {exc}") from None
    except OSError as exc:
        raise SettingsError(f"GPUAWARE_PLACEMENT_QUOTA_TREE {tree_file}: cannot read it ({exc})") from None
    reserved = tree.reserved_nodes()
    return (StrictPartitions(reserved, tree.config.default_queue or ""),) if reserved else ()
