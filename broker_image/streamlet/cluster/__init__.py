"""A local cluster without Kubernetes: ``streamlet cluster up|status|down``.

``up`` runs N brokers on consecutive loopback ports and restarts one that exits, as a kubelet
would (``supervisor.py``); ``status`` and ``down`` find it through ``<data dir>/cluster.json``
(``state.py``). The decisions are pure and tested with tables: the restart backoff
(``backoff.py``), what ``up`` accepts and what each node runs (``plan.py``, ``tomlwrite.py``).
The effects are thin: process probes (``probe.py``), the data directory's lock (``lock.py``),
the supervisor's loop, and the commands themselves (``control.py``; their parser is
cli/cluster.py).
"""
