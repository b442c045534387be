"""The RocketMQ 5 gRPC endpoint (``apache.rocketmq.v2.MessagingService``).

See docs/grpc.md.
"""
