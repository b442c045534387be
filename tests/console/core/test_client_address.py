"""Which address a request comes from (console/core/client_address.py)."""

from __future__ import annotations

from typing import Any

import pytest

from console.core.client_address import client_ip, meta_key


@pytest.fixture
def proxy(settings: Any) -> Any:
    settings.TRUSTED_PROXY_HEADER = "HTTP_X_FORWARDED_FOR"
    settings.TRUSTED_PROXY_COUNT = 1
    settings.TRUSTED_PROXIES = []
    return settings


def _request(remote: str = "127.0.0.1", forwarded: str | None = None) -> Any:
    from django.test import RequestFactory

    extra = {"REMOTE_ADDR": remote}
    if forwarded is not None:
        extra["HTTP_X_FORWARDED_FOR"] = forwarded
    return RequestFactory().get("/", **extra)


def test_without_a_configured_header_the_peer_is_the_client(settings: Any) -> None:
    settings.TRUSTED_PROXY_HEADER = ""
    assert client_ip(_request("192.0.2.1", "203.0.113.5")) == "192.0.2.1"


def test_the_hop_the_proxies_wrote_is_the_client(proxy: Any) -> None:
    # The client wrote "6.6.6.6" itself; the proxy appended what it saw.
    assert client_ip(_request(forwarded="6.6.6.6, 203.0.113.5")) == "203.0.113.5"
    proxy.TRUSTED_PROXY_COUNT = 2
    chain = "6.6.6.6, 203.0.113.5, 10.0.0.2"
    assert client_ip(_request(forwarded=chain)) == "203.0.113.5"
    # Fewer hops than proxies, no header, or garbage: the peer.
    assert client_ip(_request("192.0.2.1", "203.0.113.5")) == "192.0.2.1"
    proxy.TRUSTED_PROXY_COUNT = 1
    assert client_ip(_request("192.0.2.1")) == "192.0.2.1"
    assert client_ip(_request("192.0.2.1", "unknown")) == "192.0.2.1"


def test_hops_with_ports_and_ipv6(proxy: Any) -> None:
    assert client_ip(_request(forwarded="203.0.113.5:51234")) == "203.0.113.5"
    assert client_ip(_request(forwarded="[2001:db8::7]:443")) == "2001:db8::7"
    assert client_ip(_request(forwarded="2001:db8::7")) == "2001:db8::7"


def test_with_named_proxies_only_their_word_counts(proxy: Any) -> None:
    proxy.TRUSTED_PROXIES = ["10.0.0.0/8", "127.0.0.1"]
    # Through two of our proxies: the right-most hop that is not one of them.
    chain = "6.6.6.6, 203.0.113.5, 10.0.0.3"
    assert client_ip(_request("10.0.0.2", chain)) == "203.0.113.5"
    # Straight from an outsider: its header is ignored.
    assert client_ip(_request("198.51.100.1", "203.0.113.5")) == "198.51.100.1"
    # A health check from the proxy host itself.
    assert client_ip(_request("127.0.0.1", "10.0.0.4")) == "10.0.0.4"
    # Garbage left of our proxies: the last proxy's word.
    assert client_ip(_request("10.0.0.2", "junk, 10.0.0.3")) == "10.0.0.3"


def test_header_names_in_either_spelling() -> None:
    assert meta_key("X-Forwarded-For") == "HTTP_X_FORWARDED_FOR"
    assert meta_key("HTTP_X_FORWARDED_FOR") == "HTTP_X_FORWARDED_FOR"
    assert meta_key("x-real-ip") == "HTTP_X_REAL_IP"
