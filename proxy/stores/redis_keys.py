"""The Redis store's names: its keys, and its URLs (one server or a cluster).

One key scheme serves a standalone server and a Redis Cluster. A hash tag
(the part in braces) puts together what one script touches:
- `rp:{<tenant>:<conversation>}:turns|conv|refs`  one conversation
- `rp:{<tenant>}:index|recent`                     one tenant's index and recency
- `rp:{<tenant>:<response id>}:response`           one stored response
- `rp:recent`, `rp:responses`, `rp:profiles`,
  `rp:secret`                                      global, each a key of its own

Tenants never contain `:` (they are hashes), so a tenant's tag never equals a
conversation's, and every suffix is unique: no two names collide. A
conversation id holding `}` ends its tag early, the same way in all of its
keys: they still share a slot.

URLs: `redis://[user:password@]host:port/db` and `rediss://` (TLS) name one
server; `redis+cluster://[user:password@]host:port[,host:port...]` and
`rediss+cluster://` name a cluster by one or more of its nodes (the rest are
discovered). Query options (`?socket_timeout=3`) are redis-py's, on both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio.connection import SSLConnection, parse_url

from proxy.errors import ConfigError

SEP = "\x1f"
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "rp:"

    def conversation(self, tenant: str, conversation: str) -> list[str]:
        """turns, conv, refs: what an append or a drop touches, in script order."""
        tag = f"{self.prefix}{{{tenant}:{conversation}}}:"
        return [tag + "turns", tag + "conv", tag + "refs"]

    def tenant(self, tenant: str) -> list[str]:
        """index, recent: the tenant's index hash and its recency sorted set."""
        tag = f"{self.prefix}{{{tenant}}}:"
        return [tag + "index", tag + "recent"]

    def response(self, tenant: str, response_id: str) -> str:
        return f"{self.prefix}{{{tenant}:{response_id}}}:response"

    @property
    def recent(self) -> str:
        """Every tenant's conversations (`<tenant>\\x1f<conversation>`) by last write."""
        return f"{self.prefix}recent"

    @property
    def responses(self) -> str:
        """Every stored response (`<tenant>\\x1f<id>`) by write time."""
        return f"{self.prefix}responses"

    @property
    def profiles(self) -> str:
        return f"{self.prefix}profiles"

    @property
    def secret(self) -> str:
        """The tenant secret of a deployment that configures none."""
        return f"{self.prefix}secret"


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


@dataclass(frozen=True, slots=True)
class ClusterURL:
    """A cluster URL taken apart: the nodes to start from, and the
    connection options (credentials, TLS, query options) of every node."""

    nodes: tuple[tuple[str, int], ...]
    options: dict[str, Any]
    first_node_url: str  # the first node as a plain URL (the live feed's pub/sub)


def parse_cluster_url(url: str) -> ClusterURL:
    """Raise ConfigError when it does not parse. Messages never quote the
    URL, which may hold a password."""
    parts = urlsplit(url)
    scheme = CLUSTER_SCHEMES[parts.scheme.lower()]
    userinfo, at, hosts = parts.netloc.rpartition("@")
    nodes = tuple(_host_port(item) for item in hosts.split(","))
    if parts.path.strip("/") not in ("", "0"):
        raise ConfigError("invalid Redis store URL: a cluster has only database 0")
    host, port = nodes[0]
    netloc = f"{userinfo}{at}{'[' + host + ']' if ':' in host else host}:{port}"
    first = urlunsplit((scheme, netloc, "/0", parts.query, ""))
    try:
        options = dict(parse_url(first))
    except ValueError as exc:
        raise ConfigError(f"invalid Redis store URL: {exc}") from None
    for name in ("host", "port", "db"):
        options.pop(name, None)
    if options.pop("connection_class", None) is SSLConnection:
        options["ssl"] = True
    return ClusterURL(nodes, options, first)


def _host_port(item: str) -> tuple[str, int]:
    host, _, port = item.strip().rpartition(":")
    host = host.strip("[]")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            "invalid Redis store URL: a cluster URL lists host:port pairs "
            "(redis+cluster://host:6379,host:6380)"
        )
    return host, int(port)
