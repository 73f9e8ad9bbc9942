"""A cluster's defaults, each defined once: where its processes listen and how long ZooKeeper waits for them.

Every configuration, command-line flag and cluster file takes its default from here; 0 as a port means "any
free port" wherever a port is asked for.
"""

from __future__ import annotations

__all__ = ["ROOT", "ZK_PORT", "ZK", "SESSION_TIMEOUT", "LOOKUP_PORT", "MANAGEMENT_PORT", "BROADCAST_PORT", "HTTP_PORT",
           "MONITOR_PORT", "KPI_QUEUE", "SPARK_PORT", "SPARK_UI_PORT", "SPARK_WORKER_UI_PORT"]

#: The cluster's root in ZooKeeper: everything durable about it lives below.
ROOT = "/roq"
#: ZooKeeper's client port.
ZK_PORT = 2181
#: The ZooKeeper servers a command-line tool asks when told none.
ZK = f"127.0.0.1:{ZK_PORT}"
#: Seconds ZooKeeper keeps a session of ours alive after its last heartbeat: a process that dies is known gone
#: this long after (a GCM's standby leads, a host's processes are placed again).
SESSION_TIMEOUT = 6.0
#: The GCM's ports: look-ups of a queue's monitor, the management API, the configuration broadcast, HTTP (the API,
#: metrics and dashboard).
LOOKUP_PORT = 5000
MANAGEMENT_PORT = 5003
BROADCAST_PORT = 5005
HTTP_PORT = 5080
#: Port of the first monitor of a host in the original system.
MONITOR_PORT = 5500
#: A standalone Spark master's port (Spark's own default), its web UI's, and a worker's web UI's.
SPARK_PORT = 7077
SPARK_UI_PORT = 8080
SPARK_WORKER_UI_PORT = 8081
#: The queue a cluster's KPI records are shipped to, where a flag asks for one without naming it.
KPI_QUEUE = "roq.kpi"
