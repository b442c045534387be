"""Master/slave replication of the commit log (RocketMQ's HA model).

A slave follows its master's commit log by offset over a connection of its
own (``slave.SlaveFollower``), rebuilding consume queues and the index from
it (``replica``); the master serves the log (``master.HAServer``) and tells a
SYNC_MASTER send when a slave has it (``wait_replicated``). Consumer offsets,
topics and delay progress follow (``configsync``). ``role`` keeps the node's
role; ``promote`` turns a slave into a writable master. ``epochs`` records
which master wrote which part of the log, so that a slave whose log parted
from its master's (an old master after a failover) is cut back to where they
part. See docs/cluster.md.
"""

from broker_core.ha.master import HAServer, start_ha_server
from broker_core.ha.role import Role, read_role, write_role
from broker_core.ha.slave import SlaveFollower

__all__ = [
    "HAServer",
    "Role",
    "SlaveFollower",
    "read_role",
    "start_ha_server",
    "write_role",
]
