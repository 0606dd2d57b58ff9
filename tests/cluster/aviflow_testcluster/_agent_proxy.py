"""The node agent's kube-proxy data path: TCP listeners on each Service's loopback address.

kube-proxy rewrites a connection to ``<clusterIP>:<port>`` to one of the Service's ready
endpoints in the kernel. The agent has no such hook in the shared host network, so it does
what the old userspace kube-proxy did: it listens on ``<service address>:<port>`` and pumps
the bytes of each accepted connection to ``<podIP>:<targetPort>`` of one endpoint, picked
round-robin. Everything runs on one asyncio loop in one thread (``ProxyLoop``): no thread
per connection and no polling.

A port whose Service has no ready endpoint does not listen at all, so a client's connect is
refused at once, as kube-proxy's ``REJECT`` rule makes it. Half-closes pass through (a
client's ``shutdown(SHUT_WR)`` reaches the pod as EOF while the reply still flows back); a
reset on one side resets the other.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from ._agent_common import log
from ._agent_service_model import Target

__all__ = ["ProxyLoop", "ServiceProxy", "Target"]

T = TypeVar("T")

DIAL_TIMEOUT = 3.0
CHUNK = 65536


class ProxyLoop:
    """The asyncio loop, in a thread of its own, on which every Service's proxy runs."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="service-proxy")

    def start(self) -> None:
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        """Run ``coro`` on the loop and wait for its result (from another thread)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        """Stop the loop and join its thread; call once every proxy is closed."""
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
        self.loop.close()


class ServiceProxy:
    """One Service's listeners (one per TCP port) on its address, and their connections."""

    def __init__(self, label: str, address: str) -> None:
        self.label = label
        self.address = address
        self.servers: dict[int, asyncio.Server] = {}
        self.targets: dict[int, list[Target]] = {}
        self.turn: dict[int, int] = {}
        self.connections: set[asyncio.Task] = set()

    async def apply(self, targets: dict[int, list[Target]]) -> dict[int, str]:
        """Route each port to its endpoints: listen where there are some, stop listening
        where there are none (connections are then refused). Returns the ports that could
        not be bound, with why (typically one a process bound on ``0.0.0.0``); the caller
        retries."""
        self.targets = {port: list(ts) for port, ts in targets.items() if ts}
        errors = {}
        for port in [p for p in self.servers if p not in self.targets]:
            self.servers.pop(port).close()
        for port in self.targets:
            if port in self.servers:
                continue
            try:
                self.servers[port] = await asyncio.start_server(
                    functools.partial(self._serve, port), self.address, port, reuse_address=True
                )
            except OSError as e:
                errors[port] = e.strerror or str(e)
        return errors

    async def close(self) -> None:
        """Stop listening and reset every open connection (the address is given up)."""
        for server in self.servers.values():
            server.close()
        self.servers.clear()
        for task in list(self.connections):
            task.cancel()
        if self.connections:
            await asyncio.gather(*self.connections, return_exceptions=True)

    # ------------------------------------------------------------ connections
    async def _dial(self, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Connect to the next endpoint, round-robin; try the others if it refuses (it may
        be going away before its endpoint is removed). None if none answers."""
        targets = self.targets.get(port, [])
        for _ in range(len(targets)):
            i = self.turn.get(port, 0) % len(targets)
            self.turn[port] = i + 1
            ip, target_port = targets[i]
            try:
                return await asyncio.wait_for(
                    asyncio.open_connection(ip, target_port), DIAL_TIMEOUT
                )
            except (OSError, TimeoutError) as e:
                log.info("service %s: endpoint %s:%d: %s", self.label, ip, target_port, e)
        return None

    async def _serve(
        self, port: int, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.connections.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            dialed = await self._dial(port)
            if dialed is None:
                writer.transport.abort()  # no endpoint answered: reset, as a refused connect
                return
            up_reader, upstream = dialed
            await asyncio.gather(
                _pump(reader, upstream, writer), _pump(up_reader, writer, upstream)
            )
        except asyncio.CancelledError:
            writer.transport.abort()
            if upstream is not None:
                upstream.transport.abort()
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()
            self.connections.discard(task)


async def _pump(
    src: asyncio.StreamReader, dst: asyncio.StreamWriter, src_writer: asyncio.StreamWriter
) -> None:
    """Copy ``src`` to ``dst`` until EOF, then half-close ``dst``; on a reset or error on
    either side, reset both connections."""
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()
        if dst.can_write_eof() and not dst.is_closing():
            dst.write_eof()
    except (ConnectionError, OSError):
        dst.transport.abort()
        src_writer.transport.abort()
    except asyncio.CancelledError:
        dst.transport.abort()
        src_writer.transport.abort()
        raise
