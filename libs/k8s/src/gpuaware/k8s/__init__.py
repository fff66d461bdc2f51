"""gpuaware.k8s — the Kubernetes adapter (the only package that imports ``kubernetes``).

Modules: ``translate`` (Pod/Node -> PodPending/NodeInventory), ``objects`` (Binding, assignment
annotations, Event, Eviction, Lease as client models; reading bind answers), ``api`` (the calls,
with the Binding quirk handled), ``watch`` (list+watch state machine), ``leader`` (Lease election),
``extender`` (kube-scheduler extender wire and answers), ``server`` (its HTTP front).
"""
