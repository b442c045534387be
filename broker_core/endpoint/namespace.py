"""Namespaces: the same topic and group names, kept apart per namespace.

A RocketMQ 5 client configured with a namespace puts it in every ``Resource``
it sends (``resource_namespace``). Apache RocketMQ keeps namespaces apart by
storing ``<namespace>%<name>`` (``NamespaceUtil.wrapNamespace``; a retry or
dead-letter topic becomes ``%RETRY%<namespace>%<group>``) and answering with the
bare name and the namespace. The endpoint does the same at its edge: every
request's resources are wrapped before a handler sees them, and every resource
in the answers of a namespaced call is unwrapped, so the store, the console and
the handlers only ever see full names.

Which fields of which messages can hold a ``Resource`` is worked out once per
message type from the descriptors; a request with no namespace costs a walk over
those fields alone.
"""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import Descriptor, FieldDescriptor

from broker_core.errors import ValidationError
from broker_core.validation import _NAME

RESOURCE = "apache.rocketmq.v2.Resource"
SEPARATOR = "%"
#: Prefixes of topics that carry a group name after them.
_PREFIXES = ("%RETRY%", "%DLQ%")
#: Apache's namespace length limit (``NamespaceUtil``)
NAMESPACE_MAX_LENGTH = 64

_paths: dict[str, list[tuple[FieldDescriptor, bool]]] = {}


def _fields(desc: Descriptor) -> list[tuple[FieldDescriptor, bool]]:
    """The message-typed fields of ``desc`` that are or can contain a
    ``Resource``: (field, is a Resource)."""
    known = _paths.get(desc.full_name)
    if known is not None:
        return known
    _paths[desc.full_name] = []  # recursion guard
    out = []
    for f in desc.fields:
        if f.message_type is None:
            continue
        if f.message_type.full_name == RESOURCE:
            out.append((f, True))
        elif f.message_type.GetOptions().map_entry:
            continue
        elif _fields(f.message_type):
            out.append((f, False))
    _paths[desc.full_name] = out
    return out


#: per message type: (field name, repeated, is a Resource, its descriptor)
_plans: dict[Descriptor, tuple[tuple[str, bool, bool, Descriptor], ...]] = {}


def _plan(desc: Descriptor) -> tuple[tuple[str, bool, bool, Descriptor], ...]:
    """``_fields`` of ``desc`` as plain values (names and flags read once,
    not at every request)."""
    plan = _plans.get(desc)
    if plan is None:
        plan = _plans[desc] = tuple(
            (f.name, f.is_repeated, is_resource, f.message_type)
            for f, is_resource in _fields(desc)
        )
    return plan


def _resources(msg: Any, out: list[Any]) -> list[Any]:
    """Every ``Resource`` set in ``msg`` (appended to ``out``), in field order."""
    for name, repeated, is_resource, _sub in _plan(msg.DESCRIPTOR):
        if repeated:
            items = getattr(msg, name)
        elif msg.HasField(name):
            items = (getattr(msg, name),)
        else:
            continue
        if is_resource:
            out.extend(items)
        else:
            for item in items:
                _resources(item, out)
    return out


def validate_namespace(ns: str) -> None:
    if len(ns) > NAMESPACE_MAX_LENGTH or not _NAME.fullmatch(ns) or SEPARATOR in ns:
        raise ValidationError(
            f"the namespace {ns[:80]!r} is not legal: at most "
            f"{NAMESPACE_MAX_LENGTH} characters of [a-zA-Z0-9_-|]"
        )


def wrap(ns: str, name: str) -> str:
    """``name`` in namespace ``ns`` as the store names it."""
    if not ns or not name:
        return name
    for p in _PREFIXES:
        if name.startswith(p):
            rest = name[len(p) :]
            if rest.startswith(ns + SEPARATOR):
                return name
            return f"{p}{ns}{SEPARATOR}{rest}"
    if name.startswith(ns + SEPARATOR):
        return name
    return f"{ns}{SEPARATOR}{name}"


def unwrap(ns: str, name: str) -> str:
    """The name a client in namespace ``ns`` knows ``name`` by."""
    if not ns:
        return name
    for p in _PREFIXES:
        if name.startswith(p + ns + SEPARATOR):
            return p + name[len(p) + len(ns) + 1 :]
    if name.startswith(ns + SEPARATOR):
        return name[len(ns) + 1 :]
    return name


def header_ns(context: Any) -> str:
    """The call's ``x-mq-namespace`` header ('' when none). Every official
    client sends it; the Node.js client (1.0.8) puts the namespace only there,
    not in its consumers' resources."""
    for k, v in context.invocation_metadata() or ():
        if k == "x-mq-namespace":
            return str(v)
    return ""


def localize(request: Any, default: str = "") -> str:
    """Wrap every namespaced resource of ``request`` in place (a resource
    without a namespace takes ``default``, the call's header); return the
    namespace ('' when none). Raises ``ValidationError`` for a bad namespace
    or for resources of two namespaces in one request."""
    seen = ""
    bare = False  # a resource with a name and no namespace
    for r in _resources(request, []):
        ns = r.resource_namespace or default
        if not ns:
            bare = bare or bool(r.name)
            continue
        if not seen:
            validate_namespace(ns)
            seen = ns
        elif ns != seen:
            raise ValidationError("resources of several namespaces in one request")
        r.name = wrap(ns, r.name)
        r.resource_namespace = ""
    if seen and bare:
        raise ValidationError(
            f"resources in namespace {seen!r} and in none in one request"
        )
    return seen


def globalize(response: Any, ns: str) -> Any:
    """Unwrap the resources of ``response`` (in place) for a client in ``ns``."""
    if not ns:
        return response
    if all(unwrap(ns, r.name) == r.name for r in _resources(response, [])):
        return response
    # Handlers may answer with shared or cached messages: change a copy.
    out = type(response)()
    out.CopyFrom(response)

    for r in _resources(out, []):
        bare = unwrap(ns, r.name)
        if bare != r.name:
            r.name = bare
            r.resource_namespace = ns
    return out
