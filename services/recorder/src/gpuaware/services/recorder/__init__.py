"""The recorder: the scheduling loop's events, from JetStream into PostgreSQL, each exactly once.

    python -m gpuaware.services.recorder          # GPUAWARE_RECORDER_* settings, see settings.py

Every event of the loop (pending, decided, unschedulable, bound, bind failed, preempted, finished,
checkpoint requested and acknowledged) becomes one row of ``placement_events``, the table the
scheduling and cluster dashboards read. ``handlers.py`` wires two durable consumers (BINDER and
PLACEMENT) to ``writer.py``'s group commit; the rows and their keys are ``gpuaware.tsdb``'s
(``placement_event``, ``write_placement_events``). Other tables the dashboards read are written by
the services that own them (quota usage by quota, GPU states and alerts by health-scoring), so the
recorder does not write them a second time.
"""

__version__ = "0.1.0"
