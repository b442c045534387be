from django.apps import AppConfig


class ClusterConfig(AppConfig):
    """The cluster: every node of the route registry, their replication, and
    the pending halves of every master, managed through each node's admin
    API (no store files are read)."""

    name = "console.cluster"
    label = "cluster"
    verbose_name = "Cluster"
