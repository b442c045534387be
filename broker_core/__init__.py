"""The broker library: commit log, consume queues, indexes, transactions,
delayed delivery, filters and the RocketMQ 5 gRPC endpoint.

It imports no Django, Celery or PySpark: adapters to those live in ``console``.
"""
