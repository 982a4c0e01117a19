"""``GET /metrics``: the daemon's Prometheus metrics, from a registry owned by the app.

Each app gets its own ``CollectorRegistry`` (not prometheus-client's global
one), so several apps in one process — tests — never share counters.

* HTTP: requests by method, endpoint (the route's template, so ``/api/blobs/…``
  is one series whatever the digest) and status; duration by endpoint;
  requests in flight; requests by API key label (``server/apikeys.py``) and
  status, a counter of its own so that the label does not multiply the
  endpoint series: its values are ``default`` and the labels of
  ``LOCALLLM_API_KEYS_FILE``, never a client's input.
* Generation, per model: prompt and generated tokens, time to first token,
  inter-token latency and request duration (from entering the queue to the
  last token), fed by ``InferenceService`` through ``generation_observer``.
* Scheduler state, read at scrape time: queue depth and capacity, loaded
  models, their memory per device and their active requests.
* The event loop's lag, max and p99 over the last minute (``server.looplag``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from localllm.runner.messages import Done, Piece
from localllm.server.looplag import LoopLag, LoopLagCollector

router = APIRouter()

# Latencies of a local model span sub-millisecond (tiny models, cached prompts)
# to minutes (a large prompt on CPU); the defaults stop at 10 s.
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_TOKEN_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

Observer = Callable[[Piece | Done], None]


class Metrics:
    """Every metric the daemon exports, registered in ``self.registry``."""

    def __init__(self, scheduler: Any = None, loop_lag: LoopLag | None = None) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "localllm_http_requests",
            "HTTP requests answered, by endpoint and status.",
            ["method", "endpoint", "status"],
            registry=reg,
        )
        self.request_seconds = Histogram(
            "localllm_http_request_duration_seconds",
            "Time from request to the end of the response (streams included).",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.requests_by_key = Counter(
            "localllm_http_requests_by_key",
            "HTTP requests that carried an accepted API key, by the key's label and status.",
            ["key_label", "status"],
            registry=reg,
        )
        self.in_flight = Gauge(
            "localllm_http_requests_in_flight", "Requests being handled now.", registry=reg
        )

        def per_model(name: str, doc: str) -> Counter:
            return Counter(name, doc, ["model"], registry=reg)

        def timing(name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
            return Histogram(name, doc, ["model"], buckets=buckets, registry=reg)

        self.prompt_tokens = per_model(
            "localllm_prompt_tokens", "Prompt tokens of finished generations (cached included)."
        )
        self.generated_tokens = per_model("localllm_generated_tokens", "Tokens generated.")
        self.draft_tokens = per_model(
            "localllm_draft_tokens", "Tokens drafted by speculative decoding."
        )
        self.draft_accepted = per_model(
            "localllm_draft_accepted_tokens",
            "Drafted tokens the model agreed with (each saved a decode step).",
        )
        self.ttft = timing(
            "localllm_time_to_first_token_seconds",
            "From a generation entering the queue to its first piece of text.",
            _LATENCY_BUCKETS,
        )
        self.inter_token = timing(
            "localllm_inter_token_latency_seconds",
            "Time between consecutive pieces of text.",
            _TOKEN_BUCKETS,
        )
        self.generation_seconds = timing(
            "localllm_generation_duration_seconds",
            "From a generation entering the queue to its end (queue and load included).",
            _LATENCY_BUCKETS,
        )
        if scheduler is not None:
            reg.register(SchedulerCollector(scheduler))
        if loop_lag is not None:
            reg.register(LoopLagCollector(loop_lag))

    def observe_request(
        self, method: str, endpoint: str, status: int, seconds: float, key_label: str = ""
    ) -> None:
        self.requests.labels(method, endpoint, str(status)).inc()
        self.request_seconds.labels(endpoint).observe(seconds)
        if key_label:
            self.requests_by_key.labels(key_label, str(status)).inc()

    def generation_observer(self, model: str) -> Observer:
        """A callback for one generation's events; timing starts now."""
        start = time.perf_counter()
        last: list[float] = []

        def observe(event: Piece | Done) -> None:
            now = time.perf_counter()
            if isinstance(event, Piece):
                if not event.text and event.token < 0:
                    return  # bookkeeping event without output
                if last:
                    self.inter_token.labels(model).observe(now - last[0])
                    last[0] = now
                else:
                    self.ttft.labels(model).observe(now - start)
                    last.append(now)
            elif isinstance(event, Done):
                self.prompt_tokens.labels(model).inc(max(0, event.prompt_tokens))
                self.generated_tokens.labels(model).inc(max(0, event.eval_count))
                if event.drafted:
                    self.draft_tokens.labels(model).inc(event.drafted)
                    self.draft_accepted.labels(model).inc(event.accepted)
                self.generation_seconds.labels(model).observe(now - start)

        return observe

    def render(self) -> bytes:
        return generate_latest(self.registry)


class SchedulerCollector(Collector):
    """Reads the scheduler's live state when Prometheus scrapes (no bookkeeping to drift)."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler

    def collect(self) -> Iterator[Metric]:
        sched = self.scheduler
        yield GaugeMetricFamily(
            "localllm_queue_depth",
            "Requests waiting for a model or a free slot.",
            value=sched.pending,
        )
        yield GaugeMetricFamily(
            "localllm_queue_capacity",
            "Pending requests allowed before the daemon answers 503.",
            value=sched.max_queue,
        )
        loaded = sched.loaded()
        yield GaugeMetricFamily("localllm_loaded_models", "Models loaded now.", value=len(loaded))
        memory = GaugeMetricFamily(
            "localllm_model_memory_bytes",
            "Memory a loaded model holds, by device.",
            labels=["model", "device"],
        )
        active = GaugeMetricFamily(
            "localllm_model_active_requests", "Requests holding a loaded model.", labels=["model"]
        )
        for model in loaded:
            name = model.spec.name
            for device, size in _memory_by_device(model).items():
                memory.add_metric([name, device], size)
            active.add_metric([name], model.refcount)
        yield memory
        yield active


def _memory_by_device(model: Any) -> dict[str, int]:
    # What llama.cpp reported after the load, else the planner's estimate.
    measured = getattr(model.runner, "memory", None) or {}
    out = {device: int(sum(parts.values())) for device, parts in measured.items()}
    if not out:
        placement = model.placement
        out = {"total": int(placement.size)}
    return out


@router.get("/metrics")
def metrics(request: Request) -> Response:
    registry: Metrics = request.app.state.metrics
    return Response(registry.render(), media_type=CONTENT_TYPE_LATEST)
