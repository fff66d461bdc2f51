"""The quota service: answers ``quota.admit``, follows what runs, publishes usage, stores chargeback.

    python -m gpuaware.services.quota

``handlers.py`` wires the bus (the ``quota.admit`` endpoint, a follower of the binder's pod events,
the report tick); ``state.py`` is the service's view over one ``gpuaware.quota.QuotaLedger`` (what
is admitted, reserved, running and waiting), without I/O; ``store.py`` writes chargeback intervals
and usage snapshots to PostgreSQL; ``settings.py`` holds the frozen settings and reads the queue tree.
"""

__version__ = "0.1.0"
