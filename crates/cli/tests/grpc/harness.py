#!/usr/bin/env python3
"""A gRPC server and client on Python grpcio, for switchyard's end-to-end tests.

Neither side is ours: grpcio (the C core under Python) frames messages, speaks HTTP/2,
sends `te: trailers`, `grpc-timeout`, RST_STREAM on cancel, and reads `grpc-status`,
`grpc-message` and trailing metadata from the trailers. Messages are raw bytes through
generic handlers, so no generated code is committed.

  harness.py serve --h2c HOST:PORT [--tls HOST:PORT --cert F --key F]
      Serves `switchyard.test.Probe` and the standard `grpc.health.v1.Health` on both
      ports; prints "ready" once listening; runs until killed.

  harness.py client --target HOST:PORT [--ca F --authority NAME] CASE...
      Runs each case, prints "ok CASE" or "FAIL CASE: why" per case, exits 1 when any
      failed. Cases: unary server-stream client-stream bidi error long-stream cancel
      deadline (or "all").

  harness.py set-health --target HOST:PORT [--service NAME] STATUS
      Sets the health servicer's status of a service ("" is the server) to SERVING or
      NOT_SERVING.
"""

import argparse
import hashlib
import sys
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

SERVICE = "switchyard.test.Probe"
# How long the long-stream case lasts: longer than the `client_body` the tests configure
# (2 s), so a whole-body deadline applied to an HTTP/2 stream would cut it.
LONG_STREAM_MESSAGES = 9
LONG_STREAM_GAP = 0.5
# The status the `Fail` method ends with, and what it carries.
FAIL_CODE = grpc.StatusCode.FAILED_PRECONDITION
FAIL_MESSAGE = "the widget is broken: ünïcode & 100%"
FAIL_TRAILERS = (("x-failure-reason", "widget"), ("x-failure-bin", b"\x00\x01\xfe\xff"))


def status_details(code, message):
    """A google.rpc.Status (field 1: code, field 2: message), protobuf-encoded by hand."""
    text = message.encode()
    return bytes([0x08, code]) + bytes([0x12, len(text)]) + text


FAIL_DETAILS = status_details(FAIL_CODE.value[0], "widget broken")


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


class Probe:
    """The test service's methods; `outcomes` records how each `Hang` call ended."""

    def __init__(self, health_servicer):
        self.health = health_servicer
        self.lock = threading.Lock()
        self.outcomes = {}
        self.calls = {}

    def count(self, method):
        with self.lock:
            self.calls[method] = self.calls.get(method, 0) + 1

    def unary(self, request, context):
        """Echoes the request with its `x-probe` metadata; a trailer on success too."""
        self.count("Unary")
        probe = dict(context.invocation_metadata()).get("x-probe", "")
        context.send_initial_metadata((("x-initial", "yes"),))
        context.set_trailing_metadata((("x-trailer", "done"), ("x-probe-echo", probe)))
        return b"echo:" + request

    def server_stream(self, request, context):
        """`request` is "COUNT SIZE": COUNT messages of SIZE bytes, each naming its index."""
        self.count("ServerStream")
        count, size = (int(x) for x in request.split())
        for i in range(count):
            head = b"%d:" % i
            yield head + b"x" * max(0, size - len(head))
        context.set_trailing_metadata((("x-sent", str(count)),))

    def client_stream(self, request_iterator, context):
        """Answers "COUNT BYTES SHA256" of everything received."""
        self.count("ClientStream")
        digest, count, total = hashlib.sha256(), 0, 0
        for message in request_iterator:
            digest.update(message)
            count += 1
            total += len(message)
        return b"%d %d %s" % (count, total, digest.hexdigest().encode())

    def bidi(self, request_iterator, context):
        """Answers each message at once (reversed), so a client can ping-pong."""
        self.count("Bidi")
        for message in request_iterator:
            yield message[::-1]
        context.set_trailing_metadata((("x-bidi", "closed"),))

    def fail(self, request, context):
        """Ends with a non-OK status, a message, trailing metadata and status details."""
        self.count("Fail")
        context.set_trailing_metadata(FAIL_TRAILERS + (("grpc-status-details-bin", FAIL_DETAILS),))
        context.abort(FAIL_CODE, FAIL_MESSAGE)

    def hang(self, request, context):
        """Sends one message, then waits (up to 30 s) for the call to end; records how.

        The end is recorded by a termination callback, not only after the wait: grpcio
        stops iterating a response generator whose call ended while a message was being
        sent, so a cancel that arrives before the send of "started" has completed would
        otherwise leave no record at all. The first record wins: a call that outlived the
        wait stays "timed out" even though its termination follows."""
        self.count("Hang")
        token = request.decode()
        context.add_callback(lambda: self.record(token, "ended"))
        yield b"started"
        deadline = time.monotonic() + 30
        while context.is_active() and time.monotonic() < deadline:
            time.sleep(0.02)
        self.record(token, "ended" if not context.is_active() else "timed out")

    def record(self, token, outcome):
        """Records how a `Hang` call ended, unless it already was."""
        with self.lock:
            self.outcomes.setdefault(token, outcome)

    def outcome(self, request, context):
        """How the `Hang` call with this token ended ("" while it has not)."""
        with self.lock:
            return self.outcomes.get(request.decode(), "").encode()

    def calls_of(self, request, context):
        """How many calls of a method the server has served."""
        with self.lock:
            return str(self.calls.get(request.decode(), 0)).encode()

    def big(self, request, context):
        """A large, very compressible answer that says it may be cached."""
        self.count("Big")
        context.send_initial_metadata((("cache-control", "public, max-age=3600"),))
        return b"compress me " * 4096

    def set_health(self, request, context):
        """`request` is "SERVICE=STATUS" (STATUS a ServingStatus name)."""
        service, _, status = request.decode().partition("=")
        self.health.set(service, health_pb2.HealthCheckResponse.ServingStatus.Value(status))
        return b"ok"


def handlers(probe):
    u, s = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
    methods = {
        "Unary": u(probe.unary),
        "ServerStream": s(probe.server_stream),
        "ClientStream": grpc.stream_unary_rpc_method_handler(probe.client_stream),
        "Bidi": grpc.stream_stream_rpc_method_handler(probe.bidi),
        "Fail": u(probe.fail),
        "Hang": s(probe.hang),
        "Outcome": u(probe.outcome),
        "Calls": u(probe.calls_of),
        "Big": u(probe.big),
        "SetHealth": u(probe.set_health),
    }
    return grpc.method_handlers_generic_handler(SERVICE, methods)


def serve(args):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    server.add_generic_rpc_handlers((handlers(Probe(servicer)),))
    if server.add_insecure_port(args.h2c) == 0:
        sys.exit(f"cannot listen on {args.h2c}")
    if args.tls:
        with open(args.cert, "rb") as c, open(args.key, "rb") as k:
            credentials = grpc.ssl_server_credentials(((k.read(), c.read()),))
        if server.add_secure_port(args.tls, credentials) == 0:
            sys.exit(f"cannot listen on {args.tls}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


# --------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------


class Failed(Exception):
    pass


def expect(condition, why):
    if not condition:
        raise Failed(why)


def method(channel, name, kind):
    path = f"/{SERVICE}/{name}"
    return getattr(channel, kind)(path)


def case_unary(channel):
    call = method(channel, "Unary", "unary_unary")
    response, info = call.with_call(b"hello", metadata=(("x-probe", "p-1"),), timeout=20)
    expect(response == b"echo:hello", f"response {response!r}")
    initial = dict(info.initial_metadata())
    trailing = dict(info.trailing_metadata())
    expect(initial.get("x-initial") == "yes", f"initial metadata {initial}")
    expect(trailing.get("x-trailer") == "done", f"trailing metadata {trailing}")
    expect(trailing.get("x-probe-echo") == "p-1", f"request metadata did not arrive: {trailing}")
    expect(info.code() == grpc.StatusCode.OK, f"status {info.code()}")


def case_server_stream(channel):
    call = method(channel, "ServerStream", "unary_stream")(b"200 3000", timeout=20)
    messages = list(call)
    expect(len(messages) == 200, f"{len(messages)} messages of 200")
    for i, m in enumerate(messages):
        expect(m.startswith(b"%d:" % i) and len(m) == 3000, f"message {i}: {m[:20]!r}... ({len(m)} bytes)")
    expect(call.code() == grpc.StatusCode.OK, f"status {call.code()}")
    expect(dict(call.trailing_metadata()).get("x-sent") == "200", f"trailers {call.trailing_metadata()}")


def case_client_stream(channel):
    sent = [bytes([i % 251]) * (i * 1000) for i in range(40)] + [b"\x07" * (1 << 20)]
    digest = hashlib.sha256(b"".join(sent)).hexdigest()
    response = method(channel, "ClientStream", "stream_unary")(iter(sent), timeout=30)
    want = b"%d %d %s" % (len(sent), sum(map(len, sent)), digest.encode())
    expect(response == want, f"response {response!r}, want {want!r}")


def case_bidi(channel):
    """Ping-pong: each answer is read before the next message is sent (full duplex)."""
    outbox = Outbox()
    call = method(channel, "Bidi", "stream_stream")(outbox, timeout=20)
    for i in range(20):
        message = b"ping-%d-" % i + b"z" * (i * 100)
        outbox.put(message)
        answer = next(call)
        expect(answer == message[::-1], f"answer {i}: {answer[:30]!r}")
    outbox.close()
    rest = list(call)
    expect(rest == [], f"extra answers {rest!r}")
    expect(call.code() == grpc.StatusCode.OK, f"status {call.code()}")
    expect(dict(call.trailing_metadata()).get("x-bidi") == "closed", f"trailers {call.trailing_metadata()}")


def case_error(channel):
    try:
        method(channel, "Fail", "unary_unary")(b"", timeout=20)
    except grpc.RpcError as e:
        expect(e.code() == FAIL_CODE, f"status {e.code()} ({e.details()!r})")
        expect(e.details() == FAIL_MESSAGE, f"message {e.details()!r}")
        trailing = dict(e.trailing_metadata() or ())
        for key, value in FAIL_TRAILERS:
            expect(trailing.get(key) == value, f"trailing {key}: {trailing.get(key)!r} of {trailing}")
        details = trailing.get("grpc-status-details-bin")
        expect(details == FAIL_DETAILS, f"grpc-status-details-bin {details!r}")
        return
    raise Failed("the call succeeded")


def case_long_stream(channel):
    """A bidirectional stream that lasts ~4.5 s, one message every 0.5 s each way."""
    outbox = Outbox()
    call = method(channel, "Bidi", "stream_stream")(outbox, timeout=30)
    for i in range(LONG_STREAM_MESSAGES):
        outbox.put(b"tick-%d" % i)
        answer = next(call)
        expect(answer == (b"tick-%d" % i)[::-1], f"answer {i}: {answer!r}")
        time.sleep(LONG_STREAM_GAP)
    outbox.close()
    list(call)
    expect(call.code() == grpc.StatusCode.OK, f"status {call.code()} ({call.details()!r})")


def hang_outcome(channel, token):
    """Polls the server for how the `Hang` call `token` ended: until it records "ended"
    or, past its own 30 s, "timed out" (a loaded machine can be slow to deliver a cancel;
    only an answer of the server's decides)."""
    outcome = method(channel, "Outcome", "unary_unary")
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        result = outcome(token.encode(), timeout=5)
        if result:
            return result.decode()
        time.sleep(0.05)
    return "still running after 40 s"


def case_cancel(channel):
    token = f"cancel-{time.monotonic_ns()}"
    call = method(channel, "Hang", "unary_stream")(token.encode(), timeout=30)
    first = next(call)
    expect(first == b"started", f"first message {first!r}")
    call.cancel()
    expect(call.code() == grpc.StatusCode.CANCELLED, f"status {call.code()}")
    seen = hang_outcome(channel, token)
    expect(seen == "ended", f"the server saw the call {seen}, not cancelled")


def case_deadline(channel):
    token = f"deadline-{time.monotonic_ns()}"
    call = method(channel, "Hang", "unary_stream")(token.encode(), timeout=1.5)
    try:
        list(call)
    except grpc.RpcError as e:
        expect(e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, f"status {e.code()} ({e.details()!r})")
    else:
        raise Failed("the call ended without an error")
    seen = hang_outcome(channel, token)
    expect(seen == "ended", f"the server saw the call {seen}, not ended by the deadline")


CASES = {
    "unary": case_unary,
    "server-stream": case_server_stream,
    "client-stream": case_client_stream,
    "bidi": case_bidi,
    "error": case_error,
    "long-stream": case_long_stream,
    "cancel": case_cancel,
    "deadline": case_deadline,
}


class Outbox:
    """A request iterator fed by the test: `put` a message, `close` to end the stream."""

    def __init__(self):
        self.items = []
        self.cond = threading.Condition()
        self.closed = False

    def put(self, item):
        with self.cond:
            self.items.append(item)
            self.cond.notify()

    def close(self):
        with self.cond:
            self.closed = True
            self.cond.notify()

    def __iter__(self):
        return self

    def __next__(self):
        with self.cond:
            while not self.items and not self.closed:
                self.cond.wait()
            if self.items:
                return self.items.pop(0)
            raise StopIteration


def channel_for(args):
    # No retries of grpcio's own and no proxy from the environment: what reaches the
    # server is what the client sent once.
    options = [("grpc.enable_retries", 0), ("grpc.enable_http_proxy", 0)]
    if args.ca:
        with open(args.ca, "rb") as f:
            credentials = grpc.ssl_channel_credentials(root_certificates=f.read())
        if args.authority:
            options.append(("grpc.ssl_target_name_override", args.authority))
        return grpc.secure_channel(args.target, credentials, options=options)
    return grpc.insecure_channel(args.target, options=options)


def client(args):
    names = list(CASES) if args.cases == ["all"] else args.cases
    failed = 0
    with channel_for(args) as channel:
        grpc.channel_ready_future(channel).result(timeout=20)
        for name in names:
            try:
                CASES[name](channel)
                print(f"ok {name}", flush=True)
            except (Failed, grpc.RpcError, StopIteration) as e:
                why = f"{e.code()} {e.details()!r}" if isinstance(e, grpc.RpcError) else str(e) or type(e).__name__
                print(f"FAIL {name}: {why}", flush=True)
                failed += 1
    sys.exit(1 if failed else 0)


def set_health(args):
    with channel_for(args) as channel:
        call = method(channel, "SetHealth", "unary_unary")
        call(f"{args.service}={args.status}".encode(), timeout=10)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--h2c", required=True)
    s.add_argument("--tls")
    s.add_argument("--cert")
    s.add_argument("--key")
    for name in ("client", "set-health"):
        c = sub.add_parser(name)
        c.add_argument("--target", required=True)
        c.add_argument("--ca")
        c.add_argument("--authority")
        if name == "client":
            c.add_argument("cases", nargs="+", choices=list(CASES) + ["all"])
        else:
            c.add_argument("--service", default="")
            c.add_argument("status", choices=["SERVING", "NOT_SERVING"])
    args = parser.parse_args()
    {"serve": serve, "client": client, "set-health": set_health}[args.command](args)


if __name__ == "__main__":
    main()
