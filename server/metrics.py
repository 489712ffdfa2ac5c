"""Prometheus metrics (prometheus-client), served on their own HTTP port.

| metric                                     | type      | labels              |
|--------------------------------------------|-----------|---------------------|
| `graphengine_request_duration_seconds`     | histogram | api, model, stage   |
| `graphengine_requests_total`               | counter   | api, model, code    |
| `graphengine_errors_total`                 | counter   | api, code           |
| `graphengine_compile_duration_seconds`     | histogram | stage               |
| `graphengine_batch_size`                   | histogram | model               |
| `graphengine_sessions`                     | gauge     |                     |
| `graphengine_loaded_models`                | gauge     | source              |
| `graphengine_repository_models`            | gauge     | state               |
| `graphengine_device_memory_bytes`          | gauge     | owner               |
| `graphengine_inflight_requests`            | gauge     |                     |
| `graphengine_model_runs_total`             | counter   | model               |
| `graphengine_model_device_seconds_total`   | counter   | model               |
| `graphengine_model_stream_busy_seconds_total` | counter | model, stream      |
| `graphengine_model_io_bytes_total`         | counter   | model, binding      |
| `graphengine_model_memory_bytes`           | gauge     | model, kind         |
| `graphengine_compile_cache_hits_total`     | counter   |                     |
| `graphengine_compile_cache_misses_total`   | counter   |                     |
| `graphengine_compile_cache_rejected_total` | counter   |                     |
| `graphengine_compile_cache_evictions_total` | counter  |                     |
| `graphengine_compile_cache_bytes`          | gauge     |                     |
| `process_*`                                | (client)  | RSS, CPU, open fds  |

Request stages: `queue` (waiting for a worker thread, a batch or a model instance),
`input_copy` (decoding, batching, padding), `execute` (the device run), `output_copy`
(slicing, encoding) and `total`. `api` is the RPC method name (RunGraph, ModelInfer, ...;
one item of a stream counts under the stream's name); `model` is the repository model's
name, empty for session graphs (whose ids would make unbounded label sets). Compile
stages are the compile report's pass stages plus `load` and `total`.

The `graphengine_model_*` families are the runtime's own statistics of each repository
model (every gear summed): native launches, their time, each stream's busy time, input and
output bytes bound in place or copied (`binding`: in_place, copied), and device memory by
`kind` (arena: all instances; weights; prepared: weights reordered for the kernels).

With `compile_cache_dir`, a model loaded from the compile cache is not a compile: it adds
to `graphengine_compile_cache_hits_total` and to no compile stage (neither does an offline
model's load); a compile the cache could not spare is a miss; `rejected` counts entries
that failed verification (deleted and compiled again), `evictions` those deleted for the
size bound, and `graphengine_compile_cache_bytes` is the folder's size as last seen.

Each server owns a registry, so several servers in one process (tests) do not collide.
The port answers `/metrics` only (404 elsewhere), so a readiness probe aimed at it fails
instead of passing on any path; health is on the KServe HTTP port.

The registry leaves out the `*_created` series prometheus-client adds to every counter and
histogram child (a timestamp per label set, doubling the series for no use here); it does
so itself rather than by prometheus-client's process-wide switch, which would change the
metrics of a program that embeds the server.
"""

from __future__ import annotations

import collections
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, generate_latest, make_wsgi_app

from .timing import StageTimes

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
COMPILE_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                   120.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)

# name -> (help, label names); each source returns {label values tuple: value}.
_GAUGES = {
    "graphengine_sessions": ("open sessions", ()),
    "graphengine_loaded_models": ("loaded compiled models (each signature of each graph)",
                                  ("source",)),
    "graphengine_repository_models": ("repository models by state", ("state",)),
    "graphengine_device_memory_bytes": ("device memory held by loaded models", ("owner",)),
    "graphengine_inflight_requests": ("RPCs being handled", ()),
    "graphengine_model_memory_bytes": ("device memory of a repository model", ("model", "kind")),
    "graphengine_compile_cache_bytes": ("bytes of the compile cache's entries", ()),
}
# Totals read from the runtime at scrape time (exposed with the _total suffix).
_COUNTERS = {
    "graphengine_model_runs": ("native launches of a repository model", ("model",)),
    "graphengine_model_device_seconds": ("seconds in a repository model's native launches",
                                         ("model",)),
    "graphengine_model_stream_busy_seconds": ("seconds each stream spent running tasks",
                                              ("model", "stream")),
    "graphengine_model_io_bytes": ("input and output bytes bound in place or copied",
                                   ("model", "binding")),
    "graphengine_compile_cache_hits": ("models loaded from the compile cache", ()),
    "graphengine_compile_cache_misses": ("compiles the compile cache did not hold", ()),
    "graphengine_compile_cache_rejected": ("compile cache entries that failed verification",
                                           ()),
    "graphengine_compile_cache_evictions": ("compile cache entries deleted for its size bound",
                                            ()),
}


_CREATED_TYPES = frozenset({"counter", "histogram", "summary"})


def _without_created(metrics: Iterable[Metric]) -> Iterable[Metric]:
    for metric in metrics:
        if metric.type in _CREATED_TYPES:
            created = metric.name + "_created"
            metric.samples = [s for s in metric.samples if s.name != created]
        yield metric


class _Filtered:
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def collect(self) -> Iterable[Metric]:
        return _without_created(self._inner.collect())


class NoCreatedRegistry(CollectorRegistry):
    """A registry whose exposition has no `*_created` series (also for `?name[]=` queries,
    which the HTTP endpoint answers from `restricted_registry`)."""

    def collect(self) -> Iterable[Metric]:
        return _without_created(super().collect())

    def restricted_registry(self, names: Iterable[str]) -> Any:
        return _Filtered(super().restricted_registry(names))


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or NoCreatedRegistry()
        r = self.registry
        self.latency = Histogram("graphengine_request_duration_seconds",
                                 "request latency by stage", ["api", "model", "stage"],
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.requests = Counter("graphengine_requests", "requests by final status code",
                                ["api", "model", "code"], registry=r)
        self.errors = Counter("graphengine_errors", "failed requests by status code",
                              ["api", "code"], registry=r)
        self.compile = Histogram("graphengine_compile_duration_seconds",
                                 "compile time by stage", ["stage"], buckets=COMPILE_BUCKETS,
                                 registry=r)
        self.batch_size = Histogram("graphengine_batch_size",
                                    "rows per execution of a repository model", ["model"],
                                    buckets=BATCH_BUCKETS, registry=r)
        ProcessCollector(registry=r)
        self._sources: dict[str, Callable[[], dict[tuple[str, ...], float]]] = {}
        r.register(_StateCollector(self._sources))
        self._http: Any = None

    # ---- recording ---------------------------------------------------------------------
    def observe_request(self, times: StageTimes, code: str) -> None:
        api, model = times.api, times.model
        for stage, seconds in times.seconds.items():
            self.latency.labels(api, model, stage).observe(seconds)
        self.latency.labels(api, model, "total").observe(times.total())
        self.requests.labels(api, model, code).inc()
        if code != "OK":
            self.errors.labels(api, code).inc()

    def observe_compile(self, report: Any, load_seconds: float) -> None:
        """One compile (+ load): the report's pass records summed per stage."""
        per_stage: dict[str, float] = collections.defaultdict(float)
        for record in getattr(report, "passes", ()):
            per_stage[record.stage] += record.seconds
        for stage, seconds in per_stage.items():
            self.compile.labels(stage).observe(seconds)
        self.compile.labels("load").observe(load_seconds)
        self.compile.labels("total").observe(report.total_seconds + load_seconds)

    def observe_batch(self, model: str, rows: int) -> None:
        self.batch_size.labels(model).observe(rows)

    def gauge(self, name: str, source: Callable[[], dict[tuple[str, ...], float]]) -> None:
        """Read `source` at every scrape for gauge or counter `name` (one of _GAUGES or
        _COUNTERS; a counter's source returns running totals)."""
        if name not in _GAUGES and name not in _COUNTERS:
            raise KeyError(f"unknown gauge {name}")
        self._sources[name] = source

    def gauges(self, source: Callable[[], dict[str, dict[tuple[str, ...], float]]],
               names: Sequence[str]) -> None:
        """Several gauges or counters from one source, read once per scrape: it returns
        {name: {labels: value}} for `names` (for state that is costly to walk)."""
        for name in names:
            if name not in _GAUGES and name not in _COUNTERS:
                raise KeyError(f"unknown gauge {name}")
        group = _Group(source)
        for name in names:
            self._sources[name] = group

    # ---- exposition --------------------------------------------------------------------
    def render(self) -> bytes:
        """The Prometheus text format, as the HTTP endpoint serves it."""
        return generate_latest(self.registry)

    def start_http(self, host: str, port: int) -> int:
        """Serve /metrics on host:port in a daemon thread; returns the bound port. Every
        other path is 404: health checks belong on the KServe HTTP port (/v2/health/ready),
        and a probe aimed here by mistake must fail rather than pass."""
        family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                      flags=socket.AI_PASSIVE)[0]

        class Server(ThreadingWSGIServer):
            address_family = family

        server = make_server(address[0], port, _only_metrics(make_wsgi_app(self.registry)),
                             Server, handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, name="graphengine-metrics",
                         daemon=True).start()
        self._http = server
        return server.server_address[1]

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None


METRICS_PATH = "/metrics"


def _only_metrics(app: Callable) -> Callable:
    def serve(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != METRICS_PATH:
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"this port serves /metrics only; health checks are on the HTTP port "
                    b"(/v2/health/live, /v2/health/ready)\n"]
        return app(environ, start_response)
    return serve


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass  # a scrape is not an event


class _Group:
    """One source of several families (Metrics.gauges)."""

    def __init__(self, source: Callable[[], dict[str, dict[tuple[str, ...], float]]]) -> None:
        self.source = source


class _StateCollector:
    """Gauges computed at scrape time from the server's state."""

    def __init__(self, sources: dict[str, Callable[[], dict[tuple[str, ...], float]]]) -> None:
        self._sources = sources

    def _families(self):
        for table, kind in ((_GAUGES, GaugeMetricFamily), (_COUNTERS, CounterMetricFamily)):
            for name, (help_text, labels) in table.items():
                yield name, kind(name, help_text, labels=list(labels))

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        groups: dict[int, dict] = {}  # each group's reading, this scrape
        for name, family in self._families():
            source = self._sources.get(name)
            if isinstance(source, _Group):
                if id(source) not in groups:
                    groups[id(source)] = source.source()
                values = groups[id(source)].get(name, {})
            else:
                values = source() if source else {}
            for labels, value in values.items():
                family.add_metric(list(labels), value)
            yield family

    def describe(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        for _name, family in self._families():
            yield family
