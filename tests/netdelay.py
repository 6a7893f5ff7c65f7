"""A TCP relay that delays every byte by a fixed time in each direction: `tc netem delay` in user space, for kernels
built without sch_netem (the CI VM's is one). Test support for test_rpc_netns.py, run inside a namespace:

    python netdelay.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS

Data read at time t is written at t + DELAY_MS, in order, per direction, so a request/response exchange sees
2 × DELAY_MS more round-trip time — what `netem delay DELAY_MS` on both ends of a link gives. It prints `ready`
once it listens.
"""

from __future__ import annotations

import asyncio
import sys
import time


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay_s: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def read() -> None:
        try:
            while data := await reader.read(1 << 16):
                queue.put_nowait((time.monotonic() + delay_s, data))
        except OSError:
            pass
        queue.put_nowait((time.monotonic() + delay_s, b""))

    async def write() -> None:
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except OSError:
            pass

    await asyncio.gather(read(), write())


async def _serve(listen_host: str, listen_port: int, target_host: str, target_port: int, delay_s: float) -> None:
    async def handle(c_reader: asyncio.StreamReader, c_writer: asyncio.StreamWriter) -> None:
        try:
            s_reader, s_writer = await asyncio.open_connection(target_host, target_port)
        except OSError:
            c_writer.close()
            return
        for w in (c_writer, s_writer):
            sock = w.get_extra_info("socket")
            if sock is not None:
                import socket

                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        await asyncio.gather(_pump(c_reader, s_writer, delay_s), _pump(s_reader, c_writer, delay_s))
        for w in (c_writer, s_writer):
            w.close()

    server = await asyncio.start_server(handle, listen_host, listen_port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> None:
    listen_host, listen_port, target_host, target_port, delay_ms = argv
    asyncio.run(_serve(listen_host, int(listen_port), target_host, int(target_port), float(delay_ms) / 1000))


if __name__ == "__main__":
    main(sys.argv[1:])
