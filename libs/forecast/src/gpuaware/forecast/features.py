"""The LSTM's inputs, computed one step at a time for many series at once.

One implementation serves training, offline evaluation and the streaming service: ``Features.update``
takes the newest value of every series (NaN where none arrived) and returns the model's input row
and the scale that turns the model's outputs back into the series' units. Offline code calls it in a
loop over time; the service calls it once per rollup. So a model sees in production exactly what it
was trained on.

Why these features: demand series differ by two orders of magnitude (a VC of 8 GPUs beside one of
208), so values are divided by a causal scale (below). The model
predicts the change from the current value, ``(v[t+h] - v[t]) / scale``, so "no change" (persistence,
the strong baseline at minute resolution) is the easy output, and what it learns is where change is
predictable: time of day / week, distance from the slow and fast means, a step just taken, a gap.

The scale is a spread, not a level: the day-long mean of |one-step change| x sqrt(horizon_ref), at
least ``floor``. Divided by the level, Philly's targets would sit around 0.03 and the network would
learn nothing but "no change"; with a spread the targets are O(1) at every horizon.
"""

from __future__ import annotations

import dataclasses

import numpy as np

__all__ = ["FEATURES", "FeatureState", "Features", "compute"]

FEATURES = ("level_vs_slow", "level_vs_fast", "step", "observed", "tod_sin", "tod_cos", "dow_sin", "dow_cos")
CLIP = 10.0


@dataclasses.dataclass
class FeatureState:
    """Per-series running state (arrays of shape (n,)): EWMA accumulators and the last value."""

    slow_num: np.ndarray
    slow_den: np.ndarray
    fast_num: np.ndarray
    fast_den: np.ndarray
    dev_num: np.ndarray
    dev_den: np.ndarray
    last: np.ndarray
    seen: np.ndarray
    """steps since the series' first observation (0: none yet)"""

    @classmethod
    def zeros(cls, n: int) -> FeatureState:
        z = np.zeros(n, dtype=np.float64)
        return cls(z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), np.full(n, np.nan),
                   np.zeros(n, dtype=np.int64))

    def take(self, idx: np.ndarray) -> FeatureState:
        return FeatureState(*(getattr(self, f.name)[idx].copy() for f in dataclasses.fields(self)))

    def put(self, idx: np.ndarray, other: FeatureState) -> None:
        for f in dataclasses.fields(self):
            getattr(self, f.name)[idx] = getattr(other, f.name)


@dataclasses.dataclass(frozen=True)
class Features:
    """The feature recipe; its fields travel in the ONNX file's metadata so the server rebuilds it."""

    step_s: float
    slow_halflife_s: float = 86_400.0
    fast_halflife_s: float = 3_600.0
    floor: float = 1.0
    """the smallest scale, in the series' units (1 GPU, 1 node, 1 % duty cycle)"""
    horizon_ref: float = 10.0
    """scale = mean |one-step change| x sqrt(horizon_ref): a random walk's spread over that many steps"""

    def _decay(self, halflife_s: float) -> float:
        return float(0.5 ** (self.step_s / halflife_s))

    def update(self, state: FeatureState, value: np.ndarray, t: float | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Advance every series by one step. Returns (x (n, F) float32, scale (n,), held value (n,)).

        ``value`` NaN: nothing observed this step; the last value is held and ``observed`` is 0.
        """
        value = np.asarray(value, dtype=np.float64)
        seen = np.isfinite(value)
        prev = state.last
        held = np.where(seen, value, prev)
        first = seen & ~np.isfinite(prev)
        prev = np.where(first, value, prev)
        held_or_zero = np.nan_to_num(held, nan=0.0)
        for prefix, halflife in (("slow", self.slow_halflife_s), ("fast", self.fast_halflife_s)):
            d = self._decay(halflife)
            num, den = getattr(state, f"{prefix}_num"), getattr(state, f"{prefix}_den")
            # pandas' ewm(adjust=True, ignore_na=True): NaN steps neither decay nor add
            num[:] = np.where(seen, held_or_zero + d * num, num)
            den[:] = np.where(seen, 1.0 + d * den, den)
        slow = np.divide(state.slow_num, state.slow_den, out=held_or_zero.copy(), where=state.slow_den > 0)
        fast = np.divide(state.fast_num, state.fast_den, out=held_or_zero.copy(), where=state.fast_den > 0)
        step = np.where(seen & np.isfinite(prev), held_or_zero - np.nan_to_num(prev, nan=0.0), 0.0)
        d = self._decay(self.slow_halflife_s)
        state.dev_num[:] = np.where(seen, np.abs(step) + d * state.dev_num, state.dev_num)
        state.dev_den[:] = np.where(seen, 1.0 + d * state.dev_den, state.dev_den)
        dev = np.divide(state.dev_num, state.dev_den, out=np.zeros_like(held_or_zero), where=state.dev_den > 0)
        # the typical size of one step's change over the last day, at least `floor` units
        scale = np.maximum(self.floor, dev * np.sqrt(self.horizon_ref))
        state.last = held
        state.seen = state.seen + (np.isfinite(held)).astype(np.int64)
        tod = 2 * np.pi * ((np.asarray(t, dtype=np.float64) % 86_400.0) / 86_400.0)
        dow = 2 * np.pi * (((np.asarray(t, dtype=np.float64) / 86_400.0) + 3.0) % 7.0) / 7.0  # 1970-01-01 was a Thursday
        n = len(value)
        x = np.empty((n, len(FEATURES)), dtype=np.float32)
        x[:, 0] = np.clip((held_or_zero - slow) / scale, -CLIP, CLIP)
        x[:, 1] = np.clip((held_or_zero - fast) / scale, -CLIP, CLIP)
        x[:, 2] = np.clip(step / scale, -CLIP, CLIP)
        x[:, 3] = seen
        x[:, 4] = np.broadcast_to(np.sin(tod), n)
        x[:, 5] = np.broadcast_to(np.cos(tod), n)
        x[:, 6] = np.broadcast_to(np.sin(dow), n)
        x[:, 7] = np.broadcast_to(np.cos(dow), n)
        return x, scale, held_or_zero


def compute(features: Features, values: np.ndarray, start: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A whole (n, T) block of series sharing one grid -> x (n, T, F), scale (n, T), held (n, T): the
    rows ``update`` yields step by step from a fresh state, computed by one compiled loop
    (feature_kernel.py) and the calendar columns at once."""
    from gpuaware.forecast.feature_kernel import recurrences

    values = np.atleast_2d(np.asarray(values, dtype=np.float64))
    n, steps = values.shape
    x = np.empty((n, steps, len(FEATURES)), dtype=np.float32)
    scale = np.empty((n, steps))
    held = np.empty((n, steps))
    recurrences(values, features._decay(features.slow_halflife_s), features._decay(features.fast_halflife_s),
                float(features.floor), float(np.sqrt(features.horizon_ref)), CLIP, x, scale, held)
    t = np.array([start + k * features.step_s for k in range(steps)], dtype=np.float64)
    tod = 2 * np.pi * ((t % 86_400.0) / 86_400.0)
    dow = 2 * np.pi * (((t / 86_400.0) + 3.0) % 7.0) / 7.0  # 1970-01-01 was a Thursday
    x[:, :, 4] = np.sin(tod)
    x[:, :, 5] = np.cos(tod)
    x[:, :, 6] = np.sin(dow)
    x[:, :, 7] = np.cos(dow)
    return x, scale, held
