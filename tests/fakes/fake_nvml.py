"""A stand-in for the ``pynvml`` module (nvidia-ml-py) in tests: a few GPUs with scripted readings.

It answers the calls ``vllm_playbooks.engine.gpu_sampler`` makes, with pynvml's names and return shapes, and raises
``NVMLError`` subclasses the way the real module does, so the sampler's paths (no driver, a reading not supported,
an error mid-run) run for real.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

NVML_CLOCK_SM = 1


class NVMLError(Exception):
    """pynvml's base error."""


class NVMLError_NotSupported(NVMLError):  # noqa: N801 (pynvml's name)
    """A reading this GPU does not support."""


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    """No NVIDIA driver."""


@dataclass
class _Utilization:
    gpu: int
    memory: int


@dataclass
class _Memory:
    total: int
    used: int
    free: int


@dataclass
class FakeGpu:
    """One GPU: its UUID and name, and an iterator of utilisation percentages (cycled) its readings follow."""

    uuid: str
    name: str = "NVIDIA H200"
    util: Iterable[int] = (100,)
    power_supported: bool = True
    _values: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._values = itertools.cycle(list(self.util))


class FakeNvml:
    """The module-level functions of pynvml, over ``gpus``. ``fail_init`` makes ``nvmlInit`` raise (no driver);
    ``fail_after`` makes the utilisation call raise a plain ``RuntimeError`` after that many calls (a sampler bug)."""

    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVMLError = NVMLError

    def __init__(
        self,
        gpus: list[FakeGpu],
        fail_init: bool = False,
        fail_after: int | None = None,
        on_read: Callable[[int], None] | None = None,
    ) -> None:
        self.gpus = gpus
        self.fail_init = fail_init
        self.fail_after = fail_after
        self.on_read = on_read
        self.initialised = 0
        self.util_calls = 0

    def nvmlInit(self) -> None:  # noqa: N802 (pynvml's names)
        if self.fail_init:
            raise NVMLError_DriverNotLoaded("Driver Not Loaded")
        self.initialised += 1

    def nvmlShutdown(self) -> None:  # noqa: N802
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "580.159.04"

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:  # noqa: N802
        if not 0 <= index < len(self.gpus):
            raise NVMLError("Invalid Argument")
        return index

    def nvmlDeviceGetUUID(self, handle: int) -> bytes:  # noqa: N802 (old pynvml returns bytes; the sampler takes both)
        return self.gpus[handle].uuid.encode()

    def nvmlDeviceGetName(self, handle: int) -> str:  # noqa: N802
        return self.gpus[handle].name

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> _Utilization:  # noqa: N802
        self.util_calls += 1
        if self.fail_after is not None and self.util_calls > self.fail_after:
            raise RuntimeError("fake NVML broke as the test asked")
        if self.on_read:
            self.on_read(handle)
        value = next(self.gpus[handle]._values)
        return _Utilization(gpu=value, memory=value // 2)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> _Memory:  # noqa: N802
        total = 143771 * 1024**2
        used = (70000 + 1000 * handle) * 1024**2
        return _Memory(total=total, used=used, free=total - used)

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int:  # noqa: N802
        assert clock == NVML_CLOCK_SM
        return 1980

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802 (milliwatts)
        if not self.gpus[handle].power_supported:
            raise NVMLError_NotSupported("Not Supported")
        return 650_000 - 1000 * handle


def two_h200(util0: Iterable[int] = (100,), util1: Iterable[int] = (100,), **kwargs: Any) -> FakeNvml:
    """Two H200s with the given utilisation sequences."""
    return FakeNvml([FakeGpu("GPU-aaaa1111-0000", util=util0), FakeGpu("GPU-bbbb2222-0000", util=util1)], **kwargs)
