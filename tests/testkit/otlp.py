"""A local OTLP/HTTP traces receiver for tests and benchmarks: POST /v1/traces, decoded.

It decodes `ExportTraceServiceRequest` protobuf (opentelemetry-proto, which comes with the
exporter) and keeps every span as a plain dict; point a process at it with
`OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url` (the exporter appends /v1/traces).

    with OtlpReceiver() as rx:
        ... run processes with rx.env("agentchat-agent") ...
        spans = rx.wait_for(lambda spans: ..., timeout=10)
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def _value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in v.kvlist_value.values}
    return getattr(v, kind) if kind else None


def decode(body: bytes) -> list[dict[str, Any]]:
    """Every span of one export request, with its service and scope."""
    req = ExportTraceServiceRequest()
    req.ParseFromString(body)
    spans = []
    for rs in req.resource_spans:
        resource = {kv.key: _value(kv.value) for kv in rs.resource.attributes}
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append({
                    "service": resource.get("service.name"),
                    "scope": ss.scope.name,
                    "name": s.name,
                    "kind": s.kind,  # 1 internal, 2 server, 3 client
                    "trace_id": s.trace_id.hex(),
                    "span_id": s.span_id.hex(),
                    "parent_id": s.parent_span_id.hex() or None,
                    "start_ns": s.start_time_unix_nano,
                    "end_ns": s.end_time_unix_nano,
                    "attributes": {kv.key: _value(kv.value) for kv in s.attributes},
                    "events": [{"name": e.name,
                                "attributes": {kv.key: _value(kv.value) for kv in e.attributes}}
                               for e in s.events],
                    "resource": resource,
                })
    return spans


class OtlpReceiver:
    def __init__(self, *, keep: bool = True) -> None:
        self.spans: list[dict[str, Any]] = []
        self.requests = 0
        self.span_count = 0
        self.keep = keep  # False: count only (benchmarks)
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces":
                    self.send_response(404)
                    self.end_headers()
                    return
                spans = decode(body)
                with receiver._lock:
                    receiver.requests += 1
                    receiver.span_count += len(spans)
                    if receiver.keep:
                        receiver.spans.extend(spans)
                out = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def env(self, service: str | None = None) -> dict[str, str]:
        """OTEL_* for a process that exports here, quickly (tests wait on it)."""
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": self.url, "OTEL_TRACES_EXPORTER": "otlp",
               "OTEL_BSP_SCHEDULE_DELAY": "200"}
        if service:
            env["OTEL_SERVICE_NAME"] = service
        return env

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.spans)

    def wait_for(self, check: Callable[[list[dict[str, Any]]], Any],
                 timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = check(self.snapshot())
            if found or time.monotonic() > deadline:
                return found
            time.sleep(0.1)

    def start(self) -> OtlpReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> OtlpReceiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
