"""How the engine's loops are compiled: numba's `njit`, with the machine code cached on disk.

One decorator for every kernel module (frag_kernels.py, fit_kernels.py), so they compile and cache
alike: beside the module (``__pycache__``), or in numba's per-user cache when that folder is
read-only; ``NUMBA_CACHE_DIR`` moves it (the container image points it at /tmp). Where no folder is
writable numba refuses caching when the module is imported; the kernel is then compiled once per
process instead of failing the import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from numba import njit

__all__ = ["kernel"]

F = TypeVar("F", bound=Callable[..., Any])


def kernel(fn: F) -> F:
    """`njit(cache=True)`, or plain `njit` where numba has nowhere to cache. The compiled function
    is called as the Python one is, so it keeps its signature for the type checker."""
    try:
        return cast(F, njit(cache=True)(fn))
    except RuntimeError:
        return cast(F, njit(fn))
