"""A stand-in for `vllm serve` in tests: /health, /metrics with growing spec-decode counters, and a child process.

Options let a test make it crash, never become healthy, or exit at once, or answer ``/metrics`` or ``/health`` in
ways that break HTTP or cannot be trusted, so the runner's failure paths run for real.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

parser = argparse.ArgumentParser()
parser.add_argument("--port", type=int, required=True)
parser.add_argument("--child-pid-file", default=None, help="spawn a child process and write its pid here")
parser.add_argument("--die-after-scrapes", type=int, default=0, help="exit after this many /metrics scrapes")
parser.add_argument("--never-healthy", action="store_true")
parser.add_argument("--exit-at-start", type=int, default=None, help="exit with this code before serving")
parser.add_argument("--ignore-sigterm", action="store_true")
parser.add_argument(
    "--stall-at-scrapes",
    type=int,
    nargs="*",
    default=[],
    help="at these /metrics scrapes, 10 more output-token gaps of 2.5-5 s have been observed",
)
#: Answers that break HTTP or cannot be trusted (``--bad-metrics``, ``--bad-health``).
BAD = ("cut", "garbage", "reset", "html", "empty", "no-spec")
parser.add_argument("--bad-metrics", choices=BAD, default=None, help="answer /metrics so at --bad-metrics-at")
parser.add_argument("--bad-metrics-at", type=int, default=1, help="the /metrics scrape answered --bad-metrics")
parser.add_argument("--bad-health", choices=BAD[:3], default=None, help="answer every /health so")
args, _ = parser.parse_known_args()

if args.exit_at_start is not None:
    print("fake server: failing at start-up as asked", flush=True)
    print(
        "(EngineCore pid=1) ERROR 12-06 02:18:07 [core.py:1330] ValueError: No available memory for the cache "
        "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
        flush=True,
    )
    sys.exit(args.exit_at_start)
if args.ignore_sigterm:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if args.child_pid_file:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])  # noqa: S603
    # written whole, then renamed: a reader polling for the file never sees it empty
    with open(f"{args.child_pid_file}.part", "w") as handle:
        handle.write(str(child.pid))
    os.replace(f"{args.child_pid_file}.part", args.child_pid_file)

state = {"scrapes": 0, "stalled_gaps": 0}


def inter_token_histogram(fast: int, stalled: int) -> str:
    """vLLM's inter-token latency histogram (abridged buckets): ``fast`` gaps of ≤ 50 ms, ``stalled`` of 2.5-5 s."""
    name = "vllm:inter_token_latency_seconds"
    buckets = {"0.05": fast, "2.5": fast, "5.0": fast + stalled, "+Inf": fast + stalled}
    lines = [f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{engine="0",le="{le}",model_name="m"}} {count}.0' for le, count in buckets.items()]
    lines += [
        f'{name}_count{{engine="0",model_name="m"}} {fast + stalled}.0',
        f'{name}_sum{{engine="0",model_name="m"}} {0.02 * fast + 3.0 * stalled}',
    ]
    return "\n".join(lines) + "\n"


def spec_lines(n: int) -> str:
    """The speculative-decoding counters at the ``n``-th scrape."""
    return (
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.\n"
        "# TYPE vllm:spec_decode_num_drafts_total counter\n"
        f'vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {100 * n}.0\n'
        "# TYPE vllm:spec_decode_num_draft_tokens_total counter\n"
        f'vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {400 * n}.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_total counter\n"
        f'vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {236 * n}.0\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter\n"
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} {80 * n}.0\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="1"}} {64 * n}.0\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="2"}} {51 * n}.0\n'
        f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="3"}} {41 * n}.0\n'
    )


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a: object) -> None:
        pass

    def answer_badly(self, how: str) -> bool:
        """Answer as ``how`` says when it breaks HTTP or is not a scrape (True); False for ``no-spec`` or none."""
        if how == "reset":  # nothing: the connection is closed without an answer
            return True
        if how == "garbage":  # another service on the port
            self.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
            return True
        if how in ("cut", "html", "empty"):
            body = {
                "cut": b"# TYPE vllm:num_preemptions_total counter\nvllm:num_pre",
                "html": b"<!DOCTYPE html><html><body><h1>502 Bad Gateway</h1></body></html>",
                "empty": b"",
            }[how]
            self.send_response(200)
            self.send_header("Content-Type", "text/html" if how == "html" else "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body) + (4096 if how == "cut" else 0)))
            self.end_headers()
            self.wfile.write(body)
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/health":
            if args.bad_health and self.answer_badly(args.bad_health):
                return
            self.send_response(503 if args.never_healthy else 200)
            self.end_headers()
            return
        if self.path == "/metrics":
            state["scrapes"] += 1
            n = state["scrapes"]
            if n in args.stall_at_scrapes:
                state["stalled_gaps"] += 10
            if args.die_after_scrapes and n > args.die_after_scrapes:
                os._exit(3)
            bad = args.bad_metrics if n == args.bad_metrics_at else None
            if bad and self.answer_badly(bad):
                return
            body = (
                ("" if bad == "no-spec" else spec_lines(n)) + "# TYPE vllm:num_preemptions_total counter\n"
                'vllm:num_preemptions_total{engine="0",model_name="m"} 0.0\n'
                + inter_token_histogram(100 * n, state["stalled_gaps"])
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(404)
        self.end_headers()


time.sleep(0.3)  # a server takes a moment to come up
print(f"fake server: listening on 127.0.0.1:{args.port}", flush=True)
ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()
