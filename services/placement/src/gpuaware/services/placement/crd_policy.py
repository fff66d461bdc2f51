"""Kubernetes mode (``GPUAWARE_PLACEMENT_POLICY_SOURCE=crd``): the profile is a GPUPolicy object.

The rules are ``gpuaware.k8s``'s (``PolicySet``: every GPUPolicy judged and told in its status, the one
named ``policy_object`` in force; ``ConfigWatch``: list+watch, 410 relist, backoff, status writes); this
module only wires them to the service: each change of the followed profile goes to ``use_profile`` on
the event loop, between two decisions.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from gpuaware.k8s import ConfigWatch, PolicySet, custom_api, patch_policy_status, policy_source

__all__ = ["watch_policies"]


async def watch_policies(follow: str, use_profile: Callable[[dict[str, Any] | None], None]) -> ConfigWatch:
    """Start watching GPUPolicies; ``use_profile(profile)`` gets the followed one's profile in force
    (None: it does not exist or never validated)."""
    api = await asyncio.to_thread(custom_api)
    watch = ConfigWatch(PolicySet(follow), policy_source(api), functools.partial(patch_policy_status, api),
                        use_profile)
    watch.start()
    return watch
