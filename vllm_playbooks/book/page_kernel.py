"""What a book page's kernel sets up before it reads or shows anything: each page's import cell calls
``set_up_page_kernel``.

In an IPython kernel every DataFrame a page displays becomes a table for people (``book.tables.use_people_tables``);
where ``vllm-playbooks book`` executes the page (``VLLM_PLAYBOOKS_READ_LOG`` set), the data files the kernel opens
and the folders it lists are recorded (``book.cache.record_reads_from_environment``). Outside a kernel and without
that variable it does nothing.
"""

from __future__ import annotations

from vllm_playbooks.book.cache import record_reads_from_environment
from vllm_playbooks.book.tables import use_people_tables


def set_up_page_kernel() -> None:
    """Record the kernel's data reads where ``vllm-playbooks book`` asks for it, and show DataFrames for people."""
    record_reads_from_environment()
    use_people_tables()
