"""Each broker error carries its own answers: the HTTP status the console's API
and the node's admin API give, and the RocketMQ code the gRPC endpoint gives."""

from __future__ import annotations

import inspect

from rocketmq.grpc_protocol import definition_pb2 as pb

from broker_core import errors


def all_errors() -> list[type[errors.BrokerError]]:
    found = set()
    for module in (errors,):
        for _name, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, errors.BrokerError):
                found.add(obj)
    return sorted(found, key=lambda c: c.__name__)


def test_rmq_codes_are_rocketmqs_own() -> None:
    for code in errors.RmqCode:
        assert pb.Code.Name(int(code)) == code.name


def test_every_error_has_a_status_and_a_code() -> None:
    codes = set()
    for cls in all_errors():
        assert cls.http_status in (400, 404, 409, 500, 503), cls
        assert isinstance(cls.grpc_code, errors.RmqCode), cls
        codes.add(cls.code)
    assert len(codes) == len(all_errors())  # one short code per class


def test_the_answers_users_see() -> None:
    E = errors
    C = errors.RmqCode
    assert (E.RecallError.http_status, E.UnknownScheduledMessageError.http_status) == (
        409,
        404,
    )
    assert E.CorruptRecordError.http_status == 404  # not served, like a missing one
    assert E.ReplicaReadOnlyError.http_status == 503
    assert E.PropertiesTooLargeError.grpc_code is C.MESSAGE_PROPERTIES_TOO_LARGE
    assert E.MessageTooLargeError.grpc_code is C.MESSAGE_BODY_TOO_LARGE
    assert E.EmptyBodyError.grpc_code is C.MESSAGE_BODY_EMPTY
    assert E.InvalidDelayError.grpc_code is C.ILLEGAL_DELIVERY_TIME
    assert E.StorageFullError.grpc_code is C.INTERNAL_SERVER_ERROR
    assert E.NoProducerOnlineError.failure == "no_producer"
    assert E.CheckTimeoutError.failure == "timeout"
