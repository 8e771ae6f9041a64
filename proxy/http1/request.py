"""Where a request goes (`Origin`) and the bytes of its head (sans-IO)."""

from __future__ import annotations


class Origin:
    """Where requests go: scheme, host, port (the pool's key)."""

    __slots__ = ("host", "host_header", "key", "port", "tls")

    def __init__(self, scheme: str, host: str, port: int | None) -> None:
        if scheme not in ("http", "https"):
            raise ValueError(f"unsupported URL scheme {scheme!r}")
        self.tls = scheme == "https"
        self.host = host
        self.port = port if port is not None else (443 if self.tls else 80)
        shown = f"[{host}]" if ":" in host else host
        default = self.port == (443 if self.tls else 80)
        self.host_header = shown if default else f"{shown}:{self.port}"
        self.key = (scheme, host, self.port)


def encode_request(
    method: str, target: str, origin: Origin, headers: list[tuple[str, str]], body: bytes | None
) -> bytes:
    """The request's bytes. ValueError for a header that could split the
    message (CR or LF in a name or value) or is not encodable."""
    lines = [f"{method} {target} HTTP/1.1", f"host: {origin.host_header}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    text = "\r\n".join(lines)
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1:
        raise ValueError("a header name or value holds a line break")
    if any(not name or ":" in name or " " in name for name, _ in headers):
        raise ValueError("invalid header name")
    head = text.encode("utf-8") + b"\r\n\r\n"
    return head + body if body else head
