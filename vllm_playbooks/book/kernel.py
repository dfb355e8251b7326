"""How the book's notebooks get their Jupyter kernel: quiet, and encrypted where it can be.

Two settings keep ``vllm-playbooks book`` from printing kernel noise without hiding a real error:

- the kernel talks to papermill over local TCP; where pyzmq has CurveZMQ (and the kernel spec declares it, as
  ipykernel's does), the manager provisions keys (``transport_encryption = "auto"``), so the kernel no longer warns
  that it runs "over TCP without encryption" — its traffic is encrypted instead;
- jupyter-client interrupts a kernel (SIGINT) before asking it to shut down; when that lands while the kernel is still
  handling a message, ipykernel logs "KeyboardInterrupt caught in kernel" though nothing went wrong. Papermill shuts a
  kernel down only after its last cell finished, so :class:`FinishedKernelManager` skips that interrupt; a run that
  times out is still stopped (shutdown request, then SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import zmq
from jupyter_client.manager import AsyncKernelManager
from traitlets.config import Config


class FinishedKernelManager(AsyncKernelManager):
    """A kernel manager that shuts its kernel down without interrupting it first."""

    async def _async_interrupt_kernel(self) -> None:
        if not self.shutting_down:
            await super()._async_interrupt_kernel()


def kernel_options() -> dict[str, object]:
    """Keyword arguments for ``papermill.execute_notebook`` (handed to nbclient) that apply the settings above."""
    encryption = "auto" if zmq.has("curve") else "disabled"
    return {
        "kernel_manager_class": FinishedKernelManager,
        "config": Config({"KernelManager": {"transport_encryption": encryption}}),
    }
