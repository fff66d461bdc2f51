"""The binder: applies placement's decisions to the world and reports what happens in it.

    python -m gpuaware.services.binder            # GPUAWARE_BINDER_* settings, see settings.py

The *world* is the cluster's truth - Kubernetes, or the digital twin (``gpuaware.sim.twin``) here.
``world.py`` is the small Protocol every world implements; ``twin_world.py`` the twin behind it.
``binder.py`` is the service's logic, free of NATS: idempotent application of decisions (dedupe by
decision id *and* the world's own truth), preemptions with the checkpoint handshake, re-queueing.
``handlers.py`` wires it to the bus: durable consumers for decisions and checkpoint answers, the
world's event loop, and the ``world.snapshot`` endpoint placement rebuilds its ledger from.

Subjects published (all in the BINDER stream, with ``Nats-Msg-Id`` ``<cluster>/<kind>/<key>``):
``binder.pod.pending.v1`` (arrivals, requeues), ``binder.pod.bound.v1``,
``binder.pod.bind_failed.v1``, ``binder.pod.preempted.v1``, ``binder.pod.finished.v1``,
``binder.checkpoint.requested.v1`` and, from the twin's simulated workloads,
``binder.checkpoint.acknowledged.v1``. Consumed: ``placement.pod.decided.v1``,
``binder.checkpoint.acknowledged.v1``. Answered: ``world.snapshot``.
"""

__version__ = "0.1.0"
