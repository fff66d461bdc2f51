"""Fixtures for the forecasting service tests; helpers live in forecasting_helpers.py (a uniquely named
module, so importing it never picks up another folder's conftest)."""

from forecasting_helpers import cluster

__all__ = ["cluster"]
