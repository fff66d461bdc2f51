"""Kubernetes mode (``GPUAWARE_QUOTA_TREE_SOURCE=crd``): the queue tree is the cluster's GPUQueue objects.

The rules are ``gpuaware.k8s``'s (``QueueSet``: what is in force, what each object is told;
``ConfigWatch``: list+watch, 410 relist, backoff, status writes); this module only wires them to the
service: each new tree goes to ``use_tree`` on the event loop, between two admissions.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from typing import Any

from gpuaware.k8s import ConfigWatch, QueueSet, custom_api, patch_queue_status, queue_source

__all__ = ["watch_queues"]


async def watch_queues(use_tree: Callable[[Any], None], tree_fields: Mapping[str, Any] | None = None) -> ConfigWatch:
    """Start watching GPUQueues; ``use_tree(tree)`` gets each tree in force (None: no queue accepted).
    ``tree_fields``: the tree's cluster-wide fields, from the service's settings (``QueueSet``)."""
    api = await asyncio.to_thread(custom_api)
    watch = ConfigWatch(QueueSet(tree_fields=tree_fields), queue_source(api), functools.partial(patch_queue_status, api),
                        use_tree)
    watch.start()
    return watch
