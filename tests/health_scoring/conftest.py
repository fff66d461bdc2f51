"""Fixtures for the health-scoring service tests; the helpers live in health_scoring_helpers.py (a
uniquely named module, so importing it never picks up another folder's conftest)."""

from health_scoring_helpers import cluster, recorder

__all__ = ["cluster", "recorder"]
