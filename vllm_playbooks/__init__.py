"""Reproducible tuning playbooks for vLLM."""

import os as _os

if _os.environ.get("VLLM_PLAYBOOKS_READ_LOG"):  # a notebook kernel whose data reads `vllm-playbooks book` records
    from vllm_playbooks.book.cache import record_reads_from_environment

    record_reads_from_environment()

if "IPython" in __import__("sys").modules:  # a notebook kernel: every DataFrame a page displays is a table for people
    from vllm_playbooks.book.tables import use_people_tables

    use_people_tables()
