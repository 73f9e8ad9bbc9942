"""The operator's tools: the ``roq`` command, the local cluster it runs, ZooKeeper for it, the Spark KPI jobs.

Everything here is product code built on the rooms below it (``client``, ``deploy``, the processes started by
module name): ``roq cluster up`` runs the same :class:`~roqcli.embedded.EmbeddedCluster` that the simulation
harness and the tests use.
"""
