"""An OTLP/HTTP trace receiver and a test origin, for switchyard's tracing tests.

The receiver decodes each POST to /v1/traces with the OpenTelemetry project's
generated protobuf classes (the `opentelemetry-proto` package), not with
switchyard's code, and appends one JSON line per span to DIR/spans.jsonl.
Every other request is answered as an origin would (200, small body) and its
trace headers are appended to DIR/requests.jsonl.

    collector.py DIR [--stall]

Prints "listening PORT" once ready. With --stall, a POST to /v1/traces is
held for 60 s before its answer (a collector that is too slow).
"""

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

DIR = sys.argv[1]
STALL = "--stall" in sys.argv[2:]
LOCK = threading.Lock()


def append(name, record):
    with LOCK, open(f"{DIR}/{name}", "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(key_values):
    return {kv.key: value(kv.value) for kv in key_values}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body=b"", content_type="text/plain"):
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces":
            self.answer(404)
            return
        if STALL:
            time.sleep(60)
        if self.headers.get("content-type") != "application/x-protobuf":
            self.answer(415)
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    append("spans.jsonl", {
                        "resource": resource,
                        "scope": scope_spans.scope.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "trace_state": span.trace_state,
                        "name": span.name,
                        "kind": span.kind,
                        "start": span.start_time_unix_nano,
                        "end": span.end_time_unix_nano,
                        "attributes": attributes(span.attributes),
                        "status": span.status.code,
                    })
        self.answer(200, trace_service_pb2.ExportTraceServiceResponse().SerializeToString(),
                    "application/x-protobuf")

    def do_GET(self):
        append("requests.jsonl", {
            "path": self.path,
            "traceparent": self.headers.get_all("traceparent") or [],
            "tracestate": self.headers.get_all("tracestate") or [],
        })
        self.answer(200, b"hello from the test origin\n")


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
