"""The kernel settings papermill runs the book's notebooks with: an encrypted channel and no interrupt at shutdown."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import zmq

from vllm_playbooks.book import kernel

EXECUTE = (
    "from pathlib import Path\n"
    "from vllm_playbooks.book.notebooks import execute\n"
    "execute(Path('notebooks/tiny.ipynb').resolve(), Path('out/tiny.ipynb'), {'mode': 'replay'})\n"
)


def test_executing_a_notebook_prints_no_kernel_noise(tiny_repo: Path) -> None:
    run = subprocess.run([sys.executable, "-c", EXECUTE], capture_output=True, text=True, check=True)
    assert (tiny_repo / "out" / "tiny.ipynb").exists()
    assert run.stdout == "" and run.stderr == ""  # no "Kernel is running over TCP without encryption" warning


def test_the_channel_is_encrypted_where_pyzmq_can() -> None:
    options = kernel.kernel_options()
    expected = "auto" if zmq.has("curve") else "disabled"
    assert options["config"]["KernelManager"]["transport_encryption"] == expected  # type: ignore[index]
    assert options["kernel_manager_class"] is kernel.FinishedKernelManager


def test_a_finished_kernel_is_shut_down_without_an_interrupt(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[str] = []

    async def interrupt(self: object) -> None:
        sent.append("SIGINT")

    monkeypatch.setattr(kernel.AsyncKernelManager, "_async_interrupt_kernel", interrupt)
    manager = kernel.FinishedKernelManager()
    asyncio.run(manager._async_interrupt_kernel())  # an interrupt while running (a timeout) still goes through
    manager.shutting_down = True
    asyncio.run(manager._async_interrupt_kernel())
    assert sent == ["SIGINT"]
