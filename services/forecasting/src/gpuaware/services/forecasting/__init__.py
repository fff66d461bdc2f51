"""Forecasting service: one-minute rollups in, per-GPU / per-node forecasts out (see handlers.py)."""

__version__ = "0.1.0"
