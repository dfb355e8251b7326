"""The sentences about the runs: where a GPU's memory figure comes from, and the memory a case's quick check needs."""

from __future__ import annotations

from vllm_playbooks.book.run_notes import memory_source, quick_check_memory
from vllm_playbooks.run.hardware_plan import GpuMemory, quick_check_gib


def test_a_memory_figure_names_its_source() -> None:
    assert memory_source(GpuMemory(79.6, "here")) == "this machine's GPU"
    assert memory_source(GpuMemory(139.8, "log")) == "vLLM's log of a recorded start-up on it"
    assert memory_source(GpuMemory(80.0, "datasheet", "A100-80GB")) == "the A100-80GB datasheet"


def test_the_quick_checks_memory_reads_as_a_figure_or_says_why_not() -> None:
    assert quick_check_memory("llama-8b-draft-model") == f"{quick_check_gib('llama-8b-draft-model'):.1f} GiB"
    assert quick_check_memory("nope").startswith("an unknown amount (Unknown case 'nope'")
