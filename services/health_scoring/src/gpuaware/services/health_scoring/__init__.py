"""The health-scoring service: GPU telemetry in, health scores, states, alerts and cordons out.

    python -m gpuaware.services.health_scoring

``handlers.py`` wires the bus (a durable consumer of the cluster's samples, a follower of the
inventories, the ``health.cordon`` and ``health.stats`` endpoints, the stale-telemetry tick);
``state.py`` is the service's view (one ``gpuaware.health.HealthBook`` and ``AlertBook``, what to
publish, what the next checkpoint writes), without I/O; ``checkpoint.py`` persists it to
PostgreSQL; ``settings.py`` holds the frozen settings and turns them into a ``HealthConfig``.
"""

__version__ = "0.1.0"
