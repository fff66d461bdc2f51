"""The telemetry service: the GPU node agent and the collector.

    python -m gpuaware.services.telemetry agent       # one per GPU node (DaemonSet)
    python -m gpuaware.services.telemetry collector   # scaled by replicas on one durable consumer

``agent.py`` reads the GPUs and publishes what ``gpuaware.telemetry.NodeEdge`` says is news;
``handlers.py`` is the collector's decode -> check -> write -> ack; ``collector.py`` holds its
group-commit writer and maintenance loop; ``settings.py`` the two frozen settings objects.
"""

__version__ = "0.1.0"
