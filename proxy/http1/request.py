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
    """The request's bytes. Names and values are encoded as latin-1, one
    byte per character: the proxy reads a client's header bytes as latin-1,
    so they go upstream unchanged. ValueError for a header that could split
    the message (CR, LF or NUL in a name or value), an invalid name, or a
    character that is not one byte (above U+00FF)."""
    lines = [f"{method} {target} HTTP/1.1", f"host: {origin.host_header}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if body is not None or method in ("POST", "PUT", "PATCH"):
        lines.append(f"content-length: {len(body or b'')}")
    text = "\r\n".join(lines)
    if text.count("\n") != len(lines) - 1 or text.count("\r") != len(lines) - 1 or "\0" in text:
        raise ValueError("a header name or value holds a line break or NUL")
    if any(not name or ":" in name or " " in name for name, _ in headers):
        raise ValueError("invalid header name")
    try:
        head = text.encode("latin-1") + b"\r\n\r\n"
    except UnicodeEncodeError:
        raise ValueError("a header holds a character that is not one byte (latin-1)") from None
    return head + body if body else head
