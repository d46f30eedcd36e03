"""The address guard's classification, without connecting anywhere."""

from __future__ import annotations

import pytest

from tasks.rules import guard


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("169.254.169.254", "link-local (cloud metadata lives here)"),
        ("fe80::1", "link-local (cloud metadata lives here)"),
        ("100.64.0.1", "shared (CGNAT)"),
        ("100.127.255.254", "shared (CGNAT)"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("192.0.2.10", "private"),  # documentation (TEST-NET-1)
        ("198.18.0.1", "private"),  # benchmarking
        ("::ffff:127.0.0.1", "loopback (inside an IPv6 form)"),
        ("::ffff:169.254.169.254", "link-local (cloud metadata lives here) (inside an IPv6 form)"),
        ("2002:7f00:1::", "loopback (inside an IPv6 form)"),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", "private (inside an IPv6 form)"),  # NAT64 of 10.0.0.1
        ("fec0::1", "site-local"),  # deprecated, yet routed inside some networks
        ("64:ff9b:1:ffff::808:808", "reserved"),  # local-use NAT64: not judged by its low bits
    ],
)
def test_non_public_addresses_are_named(address, kind):
    assert guard.kind(guard.ipaddress.ip_address(address)) == kind


@pytest.mark.parametrize("address", ["8.8.8.8", "151.101.0.223", "2a04:4e42::223", "1.1.1.1"])
def test_public_addresses_pass(address):
    assert guard.kind(guard.ipaddress.ip_address(address)) == ""
    guard.check("example.com", address, ())


def test_a_refusal_says_how_to_allow_it():
    with pytest.raises(guard.BlockedAddress) as refused:
        guard.check("localhost", "127.0.0.1", ())
    text = str(refused.value)
    assert "127.0.0.1 (localhost) is a loopback address" in text
    assert "CRAWL_ALLOWED_NETWORKS=127.0.0.0/8" in text and "--allow-network" in text


def test_allowed_networks_let_their_addresses_through_and_no_others():
    allow = guard.networks("127.0.0.1/32, 10.0.0.0/8")
    guard.check("a", "127.0.0.1", allow)
    guard.check("a", "10.9.8.7", allow)
    guard.check("a", "::ffff:127.0.0.1", allow)  # the same address, spelt in IPv6
    for address in ("127.0.0.2", "192.168.0.1", "169.254.169.254"):
        with pytest.raises(guard.BlockedAddress):
            guard.check("a", address, allow)


def test_a_network_that_is_not_one_is_named():
    with pytest.raises(ValueError, match="'10.0.0.0/33' is not a network"):
        guard.networks("127.0.0.0/8,10.0.0.0/33")
