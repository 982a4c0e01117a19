"""A loopback TCP proxy in front of the real daemon that slows answers and can cut them.

The tiny model streams thousands of tokens a second, so a reply is over before
a test could press Escape.  Through this proxy the answer arrives at a steady,
human pace (``chunk`` bytes every ``delay`` seconds), and ``cut()`` drops every
connection at once, which the app sees exactly as it would see the daemon dying
mid-stream (a chunked body that never ends).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket


class ThrottleProxy:
    def __init__(self, upstream: str, *, chunk: int = 256, delay: float = 0.01) -> None:
        host, _, port = upstream.removeprefix("http://").rpartition(":")
        self.upstream = (host, int(port))
        self.chunk, self.delay = chunk, delay
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.tasks: set[asyncio.Task[None]] = set()
        # Bound now, so the address is known before the event loop runs.
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, sock=self.sock)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self.writers += [writer, up_writer]
        for task in (self._pump(reader, up_writer, 0.0), self._pump(up_reader, writer, self.delay)):
            t = asyncio.create_task(task)
            self.tasks.add(t)
            t.add_done_callback(self.tasks.discard)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float
    ) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            while data := await src.read(self.chunk):
                dst.write(data)
                await dst.drain()
                if delay:
                    await asyncio.sleep(delay)
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            dst.close()

    def cut(self) -> None:
        """Abort every connection, as if the daemon had died."""
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()

    async def stop(self) -> None:
        self.cut()
        for t in list(self.tasks):
            t.cancel()
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
