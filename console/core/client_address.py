"""The client's address: REMOTE_ADDR, or a trusted proxy's header when configured.

Sign-in lock-outs (django-axes), the bad-token rate limit and audit records all
key on this one address. A proxy header is read only when
``TRUSTED_PROXY_HEADER`` names it, because a client can send any header it
likes: trusting ``X-Forwarded-For`` unconditionally would let one rotate its
address on every request and never be locked out.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache
from typing import Any

from django.conf import settings

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def client_ip(request: Any) -> str | None:
    """Return the address of the client that sent ``request``.

    Without ``TRUSTED_PROXY_HEADER`` this is ``REMOTE_ADDR``. With it, the
    header is read as a comma-separated list of hops, each proxy appending the
    address it received the request from:

    * with ``TRUSTED_PROXIES`` (addresses or networks), the header counts only
      when ``REMOTE_ADDR`` is one of them; the client is then the right-most hop
      that is not a trusted proxy;
    * otherwise the client is the ``TRUSTED_PROXY_COUNT``-th hop from the
      right (the one the outermost of that many proxies wrote).

    Hops the client wrote itself sit further left and are never used. A header
    too short or holding no address at the chosen hop gives ``REMOTE_ADDR``.
    """
    remote = request.META.get("REMOTE_ADDR") or None
    header = settings.TRUSTED_PROXY_HEADER
    if not header:
        return remote
    hops = [h for h in request.META.get(meta_key(header), "").split(",") if h.strip()]
    if settings.TRUSTED_PROXIES:
        return _behind_trusted_proxies(remote, hops, settings.TRUSTED_PROXIES)
    count = settings.TRUSTED_PROXY_COUNT
    if len(hops) < count:
        return remote
    address = _address(hops[-count])
    return str(address) if address is not None else remote


def meta_key(header: str) -> str:
    """Return the ``request.META`` key of a header: ``X-Forwarded-For`` and
    ``HTTP_X_FORWARDED_FOR`` both give ``HTTP_X_FORWARDED_FOR``."""
    key = header.strip().upper().replace("-", "_")
    return key if key.startswith("HTTP_") else f"HTTP_{key}"


def parse_networks(values: list[str] | tuple[str, ...]) -> tuple[_Network, ...]:
    """Return the networks named by addresses or CIDR blocks (ValueError if bad)."""
    return tuple(ipaddress.ip_network(v.strip(), strict=False) for v in values)


def _behind_trusted_proxies(
    remote: str | None, hops: list[str], proxies: list[str]
) -> str | None:
    networks = _networks(tuple(proxies))
    peer = _address(remote or "")
    if peer is None or not _within(peer, networks):
        return remote  # not sent by one of the proxies: its header is hearsay
    client = remote
    for hop in reversed(hops):
        address = _address(hop)
        if address is None:
            break  # garbage left of the last proxy: keep that proxy's word
        client = str(address)
        if not _within(address, networks):
            break
    return client


@lru_cache(maxsize=8)
def _networks(proxies: tuple[str, ...]) -> tuple[_Network, ...]:
    return parse_networks(proxies)


def _within(address: _Address, networks: tuple[_Network, ...]) -> bool:
    return any(address in network for network in networks)


def _address(hop: str) -> _Address | None:
    """Return the address of one hop (``1.2.3.4``, ``1.2.3.4:5678``,
    ``[2001:db8::1]:443``, ``2001:db8::1``), or None if it holds none."""
    text = hop.strip().strip('"')
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
