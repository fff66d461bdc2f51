"""Fixtures for the quota service tests; the helpers live in quota_service_helpers.py (a uniquely
named module, so importing it never picks up another folder's conftest)."""

from quota_service_helpers import cluster, world

__all__ = ["cluster", "world"]
