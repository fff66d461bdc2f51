"""The request mix the fragmentation scores assume, learned from the pods seen.

Fragmentation is measured against the pods that will come (frag.py's `TypicalPods`). Unless the
configuration fixes the mix, it is learned: after `min_pods` pods, and then every `window` pods, the
shapes of the last `window` pods are counted; when they moved more than `drift` (total variation
distance, summed) from the mix in use, the new one replaces it and the caller rebuilds its scores.
"""

from __future__ import annotations

from collections import Counter, deque

from gpuaware.placement.frag import TypicalPods
from gpuaware.placement.model import PodRequest

__all__ = ["RequestMix"]


class RequestMix:
    def __init__(self, typical: TypicalPods, *, learn: bool, min_pods: int, window: int, drift: float) -> None:
        self.typical = typical
        self.learn = learn
        self.min_pods = min_pods
        self.window = window
        self.drift = drift
        self._shapes: deque[tuple[int, int, int, str]] = deque(maxlen=max(1, window))
        self._since = 0
        self._learned = False

    def observe(self, req: PodRequest) -> bool:
        """Count `req`'s shape; True when the mix in use changed (the scores must be rebuilt)."""
        if not self.learn:
            return False
        self._shapes.append(req.spec_key)
        self._since += 1
        if self._since < (self.window if self._learned else self.min_pods):
            return False
        self._since = 0
        self._learned = True
        learned = TypicalPods.from_counts(dict(Counter(self._shapes)))
        if self._distance(learned) <= self.drift:
            return False
        self.typical = learned
        return True

    def _distance(self, new: TypicalPods) -> float:
        a = dict(zip(self.typical.keys, self.typical.p, strict=True))
        b = dict(zip(new.keys, new.p, strict=True))
        return float(sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in a.keys() | b.keys()))
