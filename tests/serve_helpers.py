"""Helpers of the serve tests: a simulated server on a free port, an openai client for a
base url, and /metrics read with prometheus_client's parser."""

from __future__ import annotations

from collections.abc import Callable


def start_sim_server(argv: list[str]) -> tuple[str, Callable[[], None]]:
    """(base url, stop()) of `batchtwin serve --simulate ARGV` on a free loopback port."""
    from experiments.bench.bench_serve_mock import app_thread, free_port
    from experiments.main import build_parser
    from experiments.serve.serve_cmd import build_app

    port = free_port()
    app = build_app(build_parser().parse_args(["serve", "--simulate", *argv]))
    return f"http://127.0.0.1:{port}", app_thread(app, port)


def openai_client(base: str):
    import openai

    return openai.OpenAI(base_url=f"{base}/v1", api_key="none", max_retries=0)


def metric_samples(base: str) -> dict[str, float]:
    """Every sample /metrics exposes, by name (the `_created` timestamps left out)."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    text = httpx.get(f"{base}/metrics").text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if not s.name.endswith("_created")}
