"""Fixtures for the placement service tests; the helpers live in placement_service_helpers.py
(a uniquely named module, so importing it never picks up another folder's conftest)."""

from placement_service_helpers import cluster, world

__all__ = ["cluster", "world"]
