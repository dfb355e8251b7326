"""The vLLM server as a subprocess, and its Prometheus metrics."""
