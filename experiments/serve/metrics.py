"""`/metrics` in Prometheus text format with vLLM's names and meanings (prometheus_client,
one registry per server): `vllm:num_requests_running` / `vllm:num_requests_waiting`,
`vllm:kv_cache_usage_perc` (0-1), `vllm:prompt_tokens_total`, `vllm:generation_tokens_total`,
`vllm:request_success_total`, `vllm:prefix_cache_queries_total` / `_hits_total` (prompt
tokens looked up / found), and the histograms `vllm:time_to_first_token_seconds`,
`vllm:inter_token_latency_seconds`, `vllm:e2e_request_latency_seconds`, in the engine's
clock (simulated seconds for the simulator).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from shared.online.online_engine import OnlineEngine, TokenEvent

BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
           7.5, 10.0, 20.0, 40.0, 80.0)


class ServerMetrics:
    def __init__(self, engine: OnlineEngine) -> None:
        self.engine, r = engine, CollectorRegistry()
        self.registry = r
        name = {"labelnames": ["model_name"], "registry": r}
        self.running = Gauge("vllm:num_requests_running", "requests running", **name)
        self.waiting = Gauge("vllm:num_requests_waiting", "requests waiting", **name)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "KV cache usage (1 = full)", **name)
        self.prompt = Counter("vllm:prompt_tokens", "prompt tokens", **name)
        self.generation = Counter("vllm:generation_tokens", "generated tokens", **name)
        self.success = Counter("vllm:request_success", "finished requests", **name)
        self.queries = Counter("vllm:prefix_cache_queries", "prompt tokens looked up", **name)
        self.hits = Counter("vllm:prefix_cache_hits", "prompt tokens found cached", **name)
        self.ttft = Histogram("vllm:time_to_first_token_seconds", "TTFT", buckets=BUCKETS, **name)
        self.itl = Histogram("vllm:inter_token_latency_seconds", "ITL", buckets=BUCKETS, **name)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds", "E2E", buckets=BUCKETS, **name)
        self._open: dict[str, list[float]] = {}   # rid -> [arrival, last token time, prompt]

    def submitted(self, rid: str, prompt_len: int, now: float) -> None:
        self._open[rid] = [now, now, prompt_len]

    def forget(self, rid: str) -> None:
        """The request's client went away: nothing more of it is counted."""
        self._open.pop(rid, None)

    def event(self, rid: str, e: TokenEvent) -> None:
        m = self.engine.model_name
        state = self._open.get(rid)
        if state is None:
            return
        if e.token_ids:
            (self.ttft if state[1] == state[0] else self.itl).labels(m).observe(e.time - state[1])
            state[1] = e.time
            self.generation.labels(m).inc(len(e.token_ids))
        if e.finish is not None:
            del self._open[rid]
            self.prompt.labels(m).inc(state[2])
            self.queries.labels(m).inc(state[2])
            self.hits.labels(m).inc(e.cached_tokens)
            self.e2e.labels(m).observe(e.time - state[0])
            if e.finish.type in ("length", "stop"):
                self.success.labels(m).inc()

    def render(self) -> tuple[bytes, str]:
        s, m = self.engine.stats(), self.engine.model_name
        self.running.labels(m).set(s.running)
        self.waiting.labels(m).set(s.waiting)
        self.kv.labels(m).set(s.kv_usage)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
