"""Which addresses a request may be sent to: public ones, and networks a setting allows.

Reads ``ALLOWED_NETWORKS`` (comma-separated CIDRs; environment ``CRAWL_ALLOWED_NETWORKS`` or
the job's settings; ``manage.py crawl --allow-network CIDR``).

A crawler fetches URLs other people chose, next to its own database, Redis and Flower. Every
connection the transport makes (pages, every redirect hop, robots.txt, sitemaps, the proxies
they go through) is checked here *after* its host name was resolved, and goes to the address
that was checked: a name cannot resolve to a public address for the check and to a private
one for the connection (DNS rebinding). Refused unless inside an allowed network:

* loopback, private (RFC 1918, unique-local), link-local (which holds the cloud metadata
  service, 169.254.169.254), shared address space (CGNAT, 100.64.0.0/10), multicast,
  reserved, unspecified, documentation and benchmarking ranges: everything that is not
  globally routable;
* the same addresses written as IPv6: IPv4-mapped (``::ffff:127.0.0.1``), 6to4, Teredo and
  NAT64 (``64:ff9b::/96``) forms are judged by the IPv4 address inside them; deprecated
  site-local (``fec0::/10``) and local-use NAT64 (``64:ff9b:1::/48``) addresses are refused.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from tasks.defaults import JOB_PERMISSIONS, setting

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# The well-known NAT64 prefix embeds an IPv4 address in its last 32 bits; the local-use prefix
# (64:ff9b:1::/48, RFC 8215) embeds it where its operator chose: judged as itself (reserved).
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_CGNAT = ipaddress.ip_network("100.64.0.0/10")
NETWORK_PERMISSION = JOB_PERMISSIONS["ALLOWED_NETWORKS"]  # a job's owner needs it to widen this


class BlockedAddress(Exception):
    """A connection to a non-public address that no allowed network covers."""

    def __init__(self, host: str, address: str, kind: str) -> None:
        self.host, self.address, self.kind = host, address, kind
        network = "127.0.0.0/8" if kind == "loopback" else f"{address}/32"
        if ":" in address:
            network = f"{address}/128"
        super().__init__(
            f"{address} ({host}) is a {kind} address, not a public one; to crawl it, allow its "
            f"network: CRAWL_ALLOWED_NETWORKS={network} (environment or the job's settings) or "
            f"--allow-network {network} (manage.py crawl, manage.py parse)"
        )


@lru_cache(maxsize=64)
def networks(raw: str) -> tuple[Network, ...]:
    """Parse a comma-separated list of CIDRs; ValueError names the one that is not."""
    out = []
    for item in raw.split(","):
        item = item.strip()
        if item:
            try:
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError as exc:
                raise ValueError(f"{item!r} is not a network (CIDR): {exc}") from None
    return tuple(out)


def allowed(job=None) -> tuple[Network, ...]:
    """The networks a job (or, with none, the environment) allows beyond public addresses. A
    job's own ``ALLOWED_NETWORKS`` counts only while its owner holds the permission for it (a
    value stored before the rule held, or kept after the permission went, is not)."""
    widens = job is not None and "ALLOWED_NETWORKS" in (getattr(job, "settings", None) or {})
    if widens and not getattr(job, "may", lambda permission: True)(NETWORK_PERMISSION):
        job = None  # the owner's permission is looked up only for a job that widens the guard
    return networks(setting("ALLOWED_NETWORKS", job))


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def kind(ip: Address) -> str:
    """Why ``ip`` is not public ('' if it is)."""
    if isinstance(ip, ipaddress.IPv6Address):
        inner = _embedded_v4(ip)
        if inner is not None:
            inside = kind(inner)
            return f"{inside} (inside an IPv6 form)" if inside else ""
    checks = [
        (ip.is_unspecified, "unspecified"),
        (ip.is_loopback, "loopback"),
        (ip.is_link_local, "link-local (cloud metadata lives here)"),
        (ip.is_multicast, "multicast"),
        (isinstance(ip, ipaddress.IPv4Address) and ip in _CGNAT, "shared (CGNAT)"),
        (ip.is_reserved, "reserved"),
        (isinstance(ip, ipaddress.IPv6Address) and ip.is_site_local, "site-local"),
        (ip.is_private, "private"),
        (not ip.is_global, "non-global"),
    ]
    return next((name for hit, name in checks if hit), "")


def check(host: str, address: str, allow: tuple[Network, ...]) -> None:
    """Raise BlockedAddress unless ``address`` (resolved from ``host``) may be connected to."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # one address, two spellings: judged once
    if any(ip.version == net.version and ip in net for net in allow):
        return
    found = kind(ip)
    if found:
        raise BlockedAddress(host, str(ip), found)
