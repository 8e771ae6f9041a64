"""Egress proxies: which HTTP proxy, if any, a request goes through (sans-IO).

A route may name one (`upstream_proxy: http://user:pass@host:port`); else,
when the operator trusts the environment, `HTTPS_PROXY` (for https
upstreams), `HTTP_PROXY` (for http ones) and `NO_PROXY` decide, the lower
case forms winning over the upper case ones, as in curl and Python's
urllib. An upstream on a loopback address (127.0.0.0/8, ::1, localhost) is
never proxied.

Through a proxy, an https upstream is reached by a CONNECT tunnel with TLS
inside it, end to end: the proxy sees the host and port, never the request.
An http upstream is asked in absolute form (`GET http://host/path`), which
the proxy reads; that is what plain HTTP is. There is no third way: an
https request is never written to a proxy as plain text.

Only `http://` proxies: TLS to the proxy itself, and SOCKS, are not spoken.
"""

from __future__ import annotations

import base64
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote, urlsplit

from proxy.http1.request import Origin


class Destination(Protocol):
    """Where a request goes (`Origin` here; the transports' own origins too)."""

    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def tls(self) -> bool: ...


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True, slots=True)
class ProxyURL:
    """An HTTP proxy: where it listens, and the Proxy-Authorization value
    its URL's credentials make (never shown: not in repr nor str)."""

    host: str
    port: int
    authorization: str | None = field(default=None, repr=False)

    @classmethod
    def parse(cls, text: str) -> ProxyURL:
        """`http://[user:password@]host[:port]` (the port defaults to 80; a
        value without a scheme is taken as http://). ValueError otherwise."""
        text = text.strip()
        if "://" not in text:
            text = "http://" + text
        try:
            parts = urlsplit(text)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"not a proxy URL: {exc}") from None
        if parts.scheme.lower() != "http":
            raise ValueError(
                f"proxy URLs must be http:// ({parts.scheme}:// proxies are not supported)"
            )
        if not parts.hostname:
            raise ValueError("the proxy URL has no host")
        if parts.path not in ("", "/") or parts.query or parts.fragment:
            raise ValueError("a proxy URL is scheme, host and port only")
        authorization = None
        if parts.username is not None:
            user = unquote(parts.username)
            password = unquote(parts.password or "")
            token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            authorization = f"Basic {token}"
        return cls(parts.hostname, port if port is not None else 80, authorization)

    @property
    def address(self) -> str:
        """host:port (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        shown = "<credentials>@" if self.authorization else ""
        return f"http://{shown}{self.address}"


def is_loopback(host: str) -> bool:
    """localhost, a name under .localhost, or a loopback address."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    address = _ip(host)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address is not None and address.is_loopback


def _ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class NoProxy:
    """The hosts NO_PROXY sends direct: `*` (all of them), names (the name
    and every name under it; a leading `.` or `*.` changes nothing), IP
    addresses and networks (`10.0.0.0/8`), each optionally with `:port`."""

    everything: bool = False
    names: tuple[tuple[str, int | None], ...] = ()
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, text: str) -> NoProxy:
        names: list[tuple[str, int | None]] = []
        networks: list[tuple[IPNetwork, int | None]] = []
        for raw in text.replace(" ", ",").split(","):
            entry = raw.strip().lower()
            if not entry:
                continue
            if entry == "*":
                return cls(everything=True)
            host, port = _split_port(entry)
            try:
                networks.append((ipaddress.ip_network(host.strip("[]"), strict=False), port))
            except ValueError:
                names.append((host.removeprefix("*").strip(".").rstrip("."), port))
        return cls(False, tuple(names), tuple(networks))

    def matches(self, host: str, port: int) -> bool:
        if self.everything:
            return True
        host = host.lower().rstrip(".")
        address = _ip(host)
        if address is not None:
            return any(
                address in network and (p is None or p == port) for network, p in self.networks
            )
        return any(
            (host == name or host.endswith("." + name)) and (p is None or p == port)
            for name, p in self.names
        )


def _split_port(entry: str) -> tuple[str, int | None]:
    """An entry's host and port: `host:port`, `[v6]:port`; a bare IPv6
    address or network has no port."""
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None


@dataclass(frozen=True, slots=True)
class EnvProxies:
    """The proxies of the environment's `HTTP_PROXY`, `HTTPS_PROXY` and
    `NO_PROXY` (each also in lower case, which wins)."""

    http: ProxyURL | None = None
    https: ProxyURL | None = None
    no_proxy: NoProxy = field(default_factory=NoProxy)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> EnvProxies:
        """ValueError naming the variable whose value is not an http:// proxy."""

        def value(name: str) -> str:
            return (env.get(name.lower()) or env.get(name.upper()) or "").strip()

        def proxy(name: str) -> ProxyURL | None:
            text = value(name)
            if not text:
                return None
            try:
                return ProxyURL.parse(text)
            except ValueError as exc:
                raise ValueError(f"{name}: {exc}") from None

        return cls(proxy("HTTP_PROXY"), proxy("HTTPS_PROXY"), NoProxy.parse(value("NO_PROXY")))

    def for_origin(self, origin: Destination) -> ProxyURL | None:
        proxy = self.https if origin.tls else self.http
        if proxy is None or self.no_proxy.matches(origin.host, origin.port):
            return None
        return proxy


def proxy_for(
    origin: Destination, configured: ProxyURL | None, env: EnvProxies | None
) -> ProxyURL | None:
    """The proxy a request to `origin` goes through: none for a loopback
    upstream; else the route's own; else the environment's, when trusted."""
    if is_loopback(origin.host):
        return None
    if configured is not None:
        return configured
    return env.for_origin(origin) if env is not None else None


def connect_request(origin: Origin, proxy: ProxyURL) -> bytes:
    """The CONNECT request that opens a tunnel to `origin` through `proxy`."""
    host = f"[{origin.host}]" if ":" in origin.host else origin.host
    lines = [f"CONNECT {host}:{origin.port} HTTP/1.1", f"host: {host}:{origin.port}"]
    if proxy.authorization is not None:
        lines.append(f"proxy-authorization: {proxy.authorization}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
