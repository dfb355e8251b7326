"""Reproducible tuning playbooks for vLLM."""

import os as _os

if _os.environ.get("VLLM_PLAYBOOKS_READ_LOG"):  # a notebook kernel whose data reads `vllm-playbooks book` records
    from vllm_playbooks.book.cache import record_reads_from_environment

    record_reads_from_environment()
