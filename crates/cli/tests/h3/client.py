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
                           at once: handshakes the server keeps in flight,
   "stop_streams": int  -- first send that many complete GET requests (to
                           "stop_path"), each stopped at once (STOP_SENDING and
                           RESET_STREAM): rapid reset of complete requests,
   "control_flood": int -- first send that many reserved frames on the control stream,
   "uni_flood": int     -- first open that many unidirectional streams of a reserved
                           type, each finished at once,
   "flood_pause": float -- seconds to wait after a flood before the requests,
   "early_requests": [...] -- after the requests, each of these on a new connection
                           that resumes a session (a fresh ticket each) and sends it at
                           once, in 0-RTT when the server allows it (results in
                           "early_results")}

A request may carry "expect_continue": true: its body is sent only once a
`100 Continue` came (the request's headers should include expect: 100-continue);
and "raw_names": true: its header names are sent as given, not lower-cased; and
"late_hex": its body is sent without ending the stream, then, "late_pause" seconds
later (default 0.2), these bytes as one more DATA frame that ends it; and
"trailers": [[name, value]...]: sent as trailing HEADERS that end the stream, after
the body.

Answer: {"results": [{"status", "headers", "body_hex", "trailers", "interim"} or {"error"}...],
         "ports": [local port of each socket used],
         "closed": the server's connection close code (of the last connection), or null,
         "retried": Retry packets the client followed (0 or 1 per connection),
         "early_results": [...], "resumed": [bool...], "early_accepted": [bool...] (with early_requests)}
"""

import asyncio
import json
import socket
import ssl
import sys
import time

from aioquic.asyncio.client import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import H3_ALPN, H3Connection, encode_frame
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
        self.interim = []
        self.done = asyncio.get_running_loop().create_future()
        self.continued = asyncio.get_running_loop().create_future()

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
                        exchange.interim.append(int(status))
                        if status == "100" and not exchange.continued.done():
                            exchange.continued.set_result(None)
                else:
                    exchange.trailers = fields
            elif isinstance(h3_event, DataReceived):
                exchange.body.extend(h3_event.data)
            if getattr(h3_event, "stream_ended", False):
                exchange.finish()

    async def request(self, method, authority, path, headers, body, expect_continue=False, raw_names=False,
                      late=None, late_pause=0.2, trailers=None) -> Exchange:
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
        ] + [((k if raw_names else k.lower()).encode(), v.encode()) for k, v in headers]
        ends = late is None and not trailers
        self.http.send_headers(stream_id, fields, end_stream=not body and ends)
        if body and expect_continue:
            self.transmit()
            await asyncio.wait_for(asyncio.shield(exchange.continued), 30)
        if body:
            # In pieces, so a large body spans many DATA frames.
            for at in range(0, len(body), 64 * 1024):
                last = at + 64 * 1024 >= len(body)
                self.http.send_data(stream_id, body[at : at + 64 * 1024], end_stream=last and ends)
        if trailers:
            self.http.send_headers(stream_id, [(k.encode(), v.encode()) for k, v in trailers], end_stream=True)
        self.transmit()
        if late is not None:
            await asyncio.sleep(late_pause)
            if not exchange.done.done():
                self.http.send_data(stream_id, late, end_stream=True)
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


    async def stop_streams(self, count, authority, path) -> None:
        for _ in range(count):
            stream_id = self._quic.get_next_available_stream_id()
            fields = [(b":method", b"GET"), (b":scheme", b"https"), (b":authority", authority.encode()),
                      (b":path", path.encode())]
            self.http.send_headers(stream_id, fields, end_stream=True)
            self._quic.stop_stream(stream_id, 0x10C)  # H3_REQUEST_CANCELLED
            self.transmit()
            await asyncio.sleep(0.002)

    async def control_flood(self, count) -> None:
        control = self.http._local_control_stream_id
        for i in range(count):
            # Reserved frame types (0x1f * N + 0x21) must be ignored (RFC 9114 7.2.8).
            self._quic.send_stream_data(control, encode_frame(0x1F * (i % 50) + 0x21, b"x"))
            if i % 20 == 19:
                self.transmit()
                await asyncio.sleep(0.002)
        self.transmit()

    async def uni_flood(self, count) -> None:
        for i in range(count):
            stream_id = self._quic.get_next_available_stream_id(is_unidirectional=True)
            self._quic.send_stream_data(stream_id, encode_uint_var(0x1F * (i % 50) + 0x21), end_stream=True)
            self.transmit()
            await asyncio.sleep(0.002)


def answer(exchange: Exchange) -> dict:
    return {
        "interim": exchange.interim,
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
        exchange = await client.request(
            req.get("method", "GET"),
            authority,
            req["path"],
            headers,
            body,
            req.get("expect_continue", False),
            req.get("raw_names", False),
            bytes.fromhex(req["late_hex"]) if "late_hex" in req else None,
            req.get("late_pause", 0.2),
            req.get("trailers"),
        )
    except Exception as e:  # reported per request: the test decides
        return {"error": f"{type(e).__name__}: {e}"}
    if plan.get("cookie_jar"):
        for name, value in exchange.headers:
            if name == "set-cookie":
                pair = value.split(";", 1)[0]
                k, _, v = pair.partition("=")
                jar[k.strip()] = v.strip()
    return answer(exchange)


def fresh_socket(used) -> socket.socket:
    """A UDP socket on a port not in `used`: the kernel may hand a port back once
    its socket is closed, and a move to a port used before is no move. Rejected
    sockets stay open until one is found, so each try gets another port."""
    rejected = []
    try:
        while True:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(("::", 0, 0, 0))
            if sock.getsockname()[1] not in used:
                return sock
            rejected.append(sock)
    finally:
        for sock in rejected:
            sock.close()


async def rebind(client: Client, used) -> int:
    """Moves the connection to a new local UDP socket (a port not in `used`, as
    after a NAT rebinding) and a new connection ID; the old socket is closed."""
    loop = asyncio.get_running_loop()
    sock = fresh_socket(used)
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


def configuration(plan, tickets) -> QuicConfiguration:
    config = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN, server_name=plan["server_name"])
    config.load_verify_locations(plan["ca"])
    config.verify_mode = ssl.CERT_REQUIRED
    if tickets:
        config.session_ticket = tickets[-1]
    return config


async def session(plan, tickets, results, ports):
    """One connection running the plan's requests; its close code and Retry count."""
    jar = {}
    authority = f"{plan['server_name']}:{plan['port']}"
    async with connect(plan["host"], plan["port"], configuration=configuration(plan, None), create_protocol=Client,
                       session_ticket_handler=tickets.append) as client:
        ports.append(client._transport.get_extra_info("sockname")[1])
        if plan.get("reset_streams"):
            await client.reset_streams(plan["reset_streams"], authority)
        if plan.get("stop_streams"):
            await client.stop_streams(plan["stop_streams"], authority, plan.get("stop_path", "/stop"))
        if plan.get("control_flood"):
            await client.control_flood(plan["control_flood"])
        if plan.get("uni_flood"):
            await client.uni_flood(plan["uni_flood"])
        if plan.get("flood_pause"):
            await asyncio.sleep(plan["flood_pause"])
        requests = plan["requests"]
        if plan.get("concurrent"):
            results.extend(await asyncio.gather(*(one(client, plan, r, None) for r in requests)))
        else:
            for i, req in enumerate(requests):
                if moves_before(plan, i):
                    ports.append(await rebind(client, ports))
                results.append(await one(client, plan, req, jar))
        if plan.get("early_requests"):
            await ticket_from(tickets, 0)
        client.close()
    return client.closed, client._quic._retry_count


async def early(plan, tickets, req) -> tuple:
    """A new connection that resumes a session (each ticket once) and sends
    its one request at once: in 0-RTT when the ticket allows early data."""
    config = configuration(plan, tickets)
    tickets.pop()
    async with connect(plan["host"], plan["port"], configuration=config, create_protocol=Client,
                       session_ticket_handler=tickets.append, wait_connected=False) as client:
        result = await one(client, plan, req, None)
        tls = client._quic.tls
        resumed, accepted = bool(tls.session_resumed), bool(tls.early_data_accepted)
        await ticket_from(tickets, 0)
        client.close()
    return result, resumed, accepted


async def ticket_from(tickets, had) -> None:
    """Waits (a bounded time) for the server's session ticket, which may come
    after the answers."""
    for _ in range(200):
        if len(tickets) > had:
            return
        await asyncio.sleep(0.01)


async def main() -> None:
    plan = json.load(sys.stdin)
    if plan.get("half_open"):
        half_open(plan, plan["half_open"])
        await asyncio.sleep(0.2)
    tickets = []
    results, ports, retried, closed = [], [], 0, None
    for _ in range(plan.get("connections", 1)):
        closed, retries = await session(plan, tickets, results, ports)
        retried += retries
    out = {"results": results, "ports": ports, "closed": closed, "retried": retried}
    if plan.get("early_requests"):
        out["early_results"], out["resumed"], out["early_accepted"] = [], [], []
        for req in plan["early_requests"]:
            result, resumed, accepted = await early(plan, tickets, req)
            out["early_results"].append(result)
            out["resumed"].append(resumed)
            out["early_accepted"].append(accepted)
    json.dump(out, sys.stdout)


asyncio.run(main())
