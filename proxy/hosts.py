"""HostGuard: which `Host` names a request may be sent to.

A web page can point its own DNS name at 127.0.0.1 (DNS rebinding). The
browser then treats the proxy as that page's own origin: it sends no
`Origin` on reads and lets the page read the answers. What gives such a
request away is its `Host`, the page's name. So a browser's request that
arrives at a loopback address must be sent to a name that cannot belong to
a web page: an IP address, `localhost` or a name under `.localhost`, this
machine's own name, or a name `server.allowed_hosts` lists. Requests that
are not a browser's (SDKs, agents, curl: no page can send those), and
requests that arrive at any other address (from a container network, a
LAN), may name any host, unless `server.allowed_hosts` lists names: then
every request must use one. `["*"]` turns the check off.

In: the address a request arrived at, its `Host`, the list and the
machine's names (given by the caller). Out: yes or no. No I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

# Host values seen, with the answer; a client sends few distinct values,
# anything else is decided afresh
REMEMBERED = 64


class HostGuard:
    """Built by `build`, which gives `None` when every name is taken."""

    __slots__ = ("everywhere", "exact", "seen", "suffixes")

    def __init__(self, exact: Iterable[str], suffixes: Iterable[str], everywhere: bool) -> None:
        self.exact = frozenset(exact)
        self.suffixes = tuple(suffixes)
        # names are listed: checked whatever address a request arrived at
        self.everywhere = everywhere
        self.seen: dict[bytes, bool] = {}

    @classmethod
    def build(cls, allowed: Sequence[str], machine: Iterable[str]) -> HostGuard | None:
        if "*" in allowed:
            return None
        exact = {"localhost", *(name.lower().rstrip(".") for name in machine if name)}
        suffixes = [".localhost"]
        for entry in allowed:
            name = entry.lower().rstrip(".")
            if name.startswith("*."):
                suffixes.append(name[1:])
            else:
                exact.add(name)
        return cls(exact, suffixes, bool(allowed))

    def serves(
        self, server: tuple[str, int | None] | None, host: bytes | None, browser: bool
    ) -> bool:
        """Whether a request that arrived at `server` (the ASGI scope's local
        address) with this `Host` value, from a browser or not, may be served."""
        if not self.everywhere and (not browser or server is None or not is_loopback(server[0])):
            return True
        return self.allows(host)

    def allows(self, host: bytes | None) -> bool:
        """Whether a request with this `Host` value (None: no header, an
        HTTP/1.0 client, which no browser is) may be served."""
        if host is None:
            return True
        answer = self.seen.get(host)
        if answer is None:
            answer = self._decide(host)
            if len(self.seen) < REMEMBERED:
                self.seen[host] = answer
        return answer

    def _decide(self, host: bytes) -> bool:
        name = hostname(host.decode("latin-1"))
        if name is None:
            return False
        if name in self.exact or name.endswith(self.suffixes):
            return True
        try:
            ipaddress.ip_address(name)
        except ValueError:
            return False
        return True


def hostname(host: str) -> str | None:
    """The name in a `Host` value, lower case, without port or final dot;
    None for a value that is not one."""
    host = host.strip().lower()
    if host.startswith("["):
        end = host.find("]")
        rest = host[end + 1 :]
        if end < 0 or (rest and not (rest[0] == ":" and rest[1:].isdigit())):
            return None
        return host[1:end] or None
    name, colon, port = host.rpartition(":")
    if not colon:
        name = port
    elif not port.isdigit():
        return None
    name = name.rstrip(".")
    return name or None


def is_loopback(address: str) -> bool:
    """Whether an address (as a socket names it, or `localhost`) is a
    loopback one; 127.x.x.x, ::1 and ::ffff:127.x.x.x."""
    return address.startswith(("127.", "::ffff:127.")) or address in ("::1", "localhost")
