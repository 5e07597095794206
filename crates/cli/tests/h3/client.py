"""An HTTP/3 client switchyard did not write: aioquic's QUIC and HTTP/3 stacks,
driven by a JSON plan read from stdin, answering JSON on stdout.

Plan:
  {"host", "port", "ca", "server_name",
   "requests": [{"method", "path", "headers": [[name, value]...], "body_hex"}...],
   "concurrent": bool   -- every request at once on the one connection (else in order),
   "cookie_jar": bool   -- keep `set-cookie` values and send them back (in order only),
   "rebind_after": int  -- after that many requests, move the connection to a new
                           local UDP port (new socket, new connection ID) and go on,
   "rebind_every": int  -- the same after every that many requests (in order only),
   "connections": int   -- run the requests that many times, each time on a new
                           connection from a new socket (default 1; results and
                           ports of all of them, in order),
   "reset_streams": int -- first open that many request streams (headers, no end)
                           and reset each at once (a rapid-reset client),
   "half_open": int     -- before connecting, send that many connection attempts
                           (each its first Initial datagram) from a socket closed
                           at once: handshakes the server keeps in flight}

Answer: {"results": [{"status", "headers", "body_hex", "trailers"} or {"error"}...],
         "ports": [local port of each socket used],
         "closed": the server's connection close code (of the last connection), or null,
         "retried": Retry packets the client followed (0 or 1 per connection)}
"""

import asyncio
import json
import socket
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamReset


class Exchange:
    """One request's response as it arrives."""

    def __init__(self) -> None:
        self.status = None
        self.headers = []
        self.trailers = []
        self.body = bytearray()
        self.done = asyncio.get_running_loop().create_future()

    def finish(self, error=None) -> None:
        if not self.done.done():
            self.done.set_result(error)


class Client(QuicConnectionProtocol):
    """A QUIC connection speaking HTTP/3."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.http = H3Connection(self._quic)
        self.exchanges = {}
        self.closed = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            self.closed = event.error_code
            for exchange in self.exchanges.values():
                exchange.finish(f"connection closed with code {event.error_code}: {event.reason_phrase}")
            return
        if isinstance(event, StreamReset) and event.stream_id in self.exchanges:
            self.exchanges[event.stream_id].finish(f"stream reset with code {event.error_code}")
        for h3_event in self.http.handle_event(event):
            exchange = self.exchanges.get(getattr(h3_event, "stream_id", None))
            if exchange is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                fields = [(k.decode(), v.decode()) for k, v in h3_event.headers]
                if exchange.status is None:
                    status = dict(fields).get(":status", "0")
                    if not status.startswith("1"):
                        exchange.status = int(status)
                        exchange.headers = [f for f in fields if not f[0].startswith(":")]
                else:
                    exchange.trailers = fields
            elif isinstance(h3_event, DataReceived):
                exchange.body.extend(h3_event.data)
            if getattr(h3_event, "stream_ended", False):
                exchange.finish()

    async def request(self, method, authority, path, headers, body) -> Exchange:
        if self.closed is not None:
            raise RuntimeError(f"connection closed with code {self.closed}")
        stream_id = self._quic.get_next_available_stream_id()
        exchange = Exchange()
        self.exchanges[stream_id] = exchange
        fields = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
        ] + [(k.lower().encode(), v.encode()) for k, v in headers]
        self.http.send_headers(stream_id, fields, end_stream=not body)
        if body:
            # In pieces, so a large body spans many DATA frames.
            for at in range(0, len(body), 64 * 1024):
                last = at + 64 * 1024 >= len(body)
                self.http.send_data(stream_id, body[at : at + 64 * 1024], end_stream=last)
        self.transmit()
        error = await asyncio.wait_for(exchange.done, 60)
        if error:
            raise RuntimeError(error)
        return exchange

    async def reset_streams(self, count, authority) -> None:
        for _ in range(count):
            stream_id = self._quic.get_next_available_stream_id()
            fields = [(b":method", b"POST"), (b":scheme", b"https"), (b":authority", authority.encode()),
                      (b":path", b"/reset")]
            self.http.send_headers(stream_id, fields, end_stream=False)
            self._quic.reset_stream(stream_id, 0x10C)  # H3_REQUEST_CANCELLED
            self.transmit()
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.5)


def answer(exchange: Exchange) -> dict:
    return {
        "status": exchange.status,
        "headers": exchange.headers,
        "trailers": exchange.trailers,
        "body_hex": bytes(exchange.body).hex(),
    }


async def one(client, plan, req, jar) -> dict:
    headers = list(req.get("headers", []))
    if jar:
        headers.append(["cookie", "; ".join(f"{k}={v}" for k, v in jar.items())])
    body = bytes.fromhex(req.get("body_hex", ""))
    authority = f"{plan['server_name']}:{plan['port']}"
    try:
        exchange = await client.request(req.get("method", "GET"), authority, req["path"], headers, body)
    except Exception as e:  # reported per request: the test decides
        return {"error": f"{type(e).__name__}: {e}"}
    if plan.get("cookie_jar"):
        for name, value in exchange.headers:
            if name == "set-cookie":
                pair = value.split(";", 1)[0]
                k, _, v = pair.partition("=")
                jar[k.strip()] = v.strip()
    return answer(exchange)


async def rebind(client: Client) -> int:
    """Moves the connection to a new local UDP socket (a new port, as after a
    NAT rebinding) and a new connection ID; the old socket is closed."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::", 0, 0, 0))
    old = client._transport
    await loop.create_datagram_endpoint(lambda: client, sock=sock)
    old.close()
    client.change_connection_id()
    client.transmit()
    return sock.getsockname()[1]


def half_open(plan, count) -> None:
    """Sends the first flight of `count` connections and never answers: the
    server holds each handshake until its own timeout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(count):
        config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=plan["server_name"])
        conn = QuicConnection(configuration=config)
        conn.connect((plan["host"], plan["port"]), now=time.time())
        for data, addr in conn.datagrams_to_send(now=time.time()):
            sock.sendto(data, addr)
    sock.close()


def moves_before(plan, i) -> bool:
    """Whether the connection moves to a new port before request `i`."""
    if plan.get("rebind_after") is not None and i == plan["rebind_after"]:
        return True
    every = plan.get("rebind_every")
    return bool(every) and i > 0 and i % every == 0


async def session(plan, config, results, ports):
    """One connection running the plan's requests; its close code and Retry count."""
    jar = {}
    async with connect(plan["host"], plan["port"], configuration=config, create_protocol=Client) as client:
        ports.append(client._transport.get_extra_info("sockname")[1])
        if plan.get("reset_streams"):
            await client.reset_streams(plan["reset_streams"], f"{plan['server_name']}:{plan['port']}")
        requests = plan["requests"]
        if plan.get("concurrent"):
            results.extend(await asyncio.gather(*(one(client, plan, r, None) for r in requests)))
        else:
            for i, req in enumerate(requests):
                if moves_before(plan, i):
                    ports.append(await rebind(client))
                results.append(await one(client, plan, req, jar))
        client.close()
    return client.closed, client._quic._retry_count


async def main() -> None:
    plan = json.load(sys.stdin)
    if plan.get("half_open"):
        half_open(plan, plan["half_open"])
        await asyncio.sleep(0.2)
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=plan["server_name"])
    config.load_verify_locations(plan["ca"])
    config.verify_mode = ssl.CERT_REQUIRED
    results, ports, retried = [], [], 0
    for _ in range(plan.get("connections", 1)):
        closed, retries = await session(plan, config, results, ports)
        retried += retries
    json.dump({"results": results, "ports": ports, "closed": closed, "retried": retried}, sys.stdout)


asyncio.run(main())
