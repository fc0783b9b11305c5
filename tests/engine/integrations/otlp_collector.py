"""An OTLP/HTTP collector for the tests: ``/v1/traces`` and ``/v1/metrics`` on a local port, each
request's protobuf decoded and kept."""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class Collected:
    """What the collector received, and where it listens."""

    url: str = ""
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    collected: Collected

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        reply: bytes
        if self.path == "/v1/traces":
            traces = ExportTraceServiceRequest()
            traces.ParseFromString(body)
            self.collected.traces.append(traces)
            reply = ExportTraceServiceResponse().SerializeToString()
        elif self.path == "/v1/metrics":
            metrics = ExportMetricsServiceRequest()
            metrics.ParseFromString(body)
            self.collected.metrics.append(metrics)
            reply = ExportMetricsServiceResponse().SerializeToString()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


@contextmanager
def otlp_collector() -> Iterator[Collected]:
    """A collector serving on a free local port (``Collected.url``, no trailing slash) until the
    block ends."""
    collected = Collected()
    server = HTTPServer(("127.0.0.1", 0), type("Handler", (_Handler,), {"collected": collected}))
    collected.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield collected
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
