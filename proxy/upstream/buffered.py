"""A response made of bytes in hand (the `Response` protocol without a
connection)."""

from __future__ import annotations

from collections.abc import Sequence

from proxy.upstream.errors import TransportError
from proxy.upstream.headers import first_header


class BufferedResponse:
    """A response whose body is in hand: bytes, or pieces read one by one (a
    `TransportError` among them is raised at its read, a stream that
    breaks). The mock transport answers with it, and a door hands one on
    after reading the upstream's whole body (a mode the client did not ask
    for, converted)."""

    __slots__ = ("_pieces", "closed", "decoded", "headers", "released", "status")

    def __init__(
        self,
        status: int = 200,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes | Sequence[bytes | TransportError] = b"",
    ) -> None:
        self.status = status
        self.headers = list(headers)
        self.decoded = False
        pieces = [body] if isinstance(body, bytes) else body
        self._pieces = [p for p in pieces if p != b""]  # b"" is the end
        self._pieces.reverse()  # popped from the end
        self.released = False
        self.closed = False

    def header(self, name: str) -> str | None:
        return first_header(self.headers, name)

    async def read(self) -> bytes:
        if self.closed:
            raise TransportError("reset", "the connection was closed")
        if not self._pieces:
            return b""
        piece = self._pieces.pop()
        if isinstance(piece, TransportError):
            self._pieces.clear()
            self.closed = True
            raise piece
        return piece

    @property
    def complete(self) -> bool:
        return not self._pieces and not self.closed

    def release(self) -> None:
        self.released = True
        if self._pieces:
            self.closed = True

    def close(self) -> None:
        self.closed = True
