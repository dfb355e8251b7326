"""Load generation with ``vllm bench serve``."""
