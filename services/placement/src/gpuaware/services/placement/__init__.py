"""The placement service: the cluster view, the decisions, the explanations.

    python -m gpuaware.services.placement      # one leader per cluster, any number of hot standbys

``state.py`` is the event-sourced view (inventory, health, ledger) and the decisions made from it;
``convert.py`` translates between the contract and the engine; ``handlers.py`` wires NATS around
them (followers, the leader lease, the pending consumer, the explain endpoint); ``settings.py`` the
frozen settings.
"""

__version__ = "0.1.0"
