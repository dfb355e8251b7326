"""GPU utilisation sampled through NVML while a point is measured, so a page can show idle bubbles per GPU.

A background thread reads, every ``interval_s`` for each GPU the engine uses: NVML's utilisation (the share of the
last sample period in which a kernel was running), memory-controller utilisation, memory used, SM clock and power.
It runs in the runner's process, beside the load generator, and never touches the server.

- **Which GPUs.** The engine uses the first ``tensor_parallel_size × pipeline_parallel_size`` devices CUDA shows it.
  ``CUDA_VISIBLE_DEVICES`` (the server's environment: the runner's plus the engine's ``env``) is honoured: integer
  entries are read as NVML indices (the same order as CUDA's when ``CUDA_DEVICE_ORDER=PCI_BUS_ID``, and for identical
  GPUs, which CUDA orders by PCI bus too), ``GPU-…`` entries as UUIDs or unique UUID prefixes; as in CUDA, the list
  ends at the first entry that names no device. Each device's NVML index and UUID is recorded, so a reader can check.
- **Without NVML** (no ``pynvml``, from the ``nvidia-ml-py`` package, no driver, a CPU machine, CI) the sampler says
  why in its ``record()`` and the runner goes on; nothing here raises once ``start`` is called.
- **What utilisation means.** NVML counts a period as busy when any kernel runs, however few SMs it occupies; a GPU
  spinning in an NCCL receive while it waits for the previous pipeline stage counts as busy. Power draw separates
  the two (a waiting GPU draws far less than one running GEMMs), so it is sampled too.
"""

from __future__ import annotations

import csv
import importlib
import io
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

#: Columns of ``gpu_samples.csv``: seconds since the sampler started, the GPU's position in the engine (0 = first
#: device the server sees), its NVML index, then the readings (an empty cell: NVML could not read it).
SAMPLE_COLUMNS = ("t_s", "gpu", "nvml_index", "util_pct", "mem_util_pct", "mem_used_mib", "sm_clock_mhz", "power_w")
DEFAULT_INTERVAL_S = 0.1
MIB = 1024**2


class GpuSamplerUnavailable(Exception):
    """NVML cannot sample the engine's GPUs here; the message says why."""


@dataclass(frozen=True)
class GpuDevice:
    """One GPU the engine uses: its position in the engine, NVML index, UUID and name."""

    gpu: int
    nvml_index: int
    uuid: str
    name: str


def _text(value: Any) -> str:
    """pynvml returns ``bytes`` in old releases and ``str`` in new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_device_entries(cuda_visible_devices: str | None) -> list[str] | None:
    """The entries of ``CUDA_VISIBLE_DEVICES``; ``None`` when it is unset (every device is visible)."""
    if cuda_visible_devices is None:
        return None
    return [entry.strip() for entry in cuda_visible_devices.split(",") if entry.strip()]


def resolve_devices(nvml: Any, count: int | None, cuda_visible_devices: str | None) -> list[GpuDevice]:
    """NVML handles' indices for the first ``count`` devices CUDA shows a process with this ``CUDA_VISIBLE_DEVICES``
    (``None``: every visible device, perhaps none).

    Raises ``GpuSamplerUnavailable`` when fewer than ``count`` devices are visible or a UUID prefix is ambiguous.
    """
    total = int(nvml.nvmlDeviceGetCount())
    uuids = [_text(nvml.nvmlDeviceGetUUID(nvml.nvmlDeviceGetHandleByIndex(i))) for i in range(total)]
    entries = visible_device_entries(cuda_visible_devices)
    indices: list[int] = []
    if entries is None:
        indices = list(range(total))
    else:
        for entry in entries:
            if entry.lstrip("-").isdigit():
                index = int(entry)
                if not 0 <= index < total:
                    break  # CUDA stops at the first entry that names no device
                indices.append(index)
                continue
            matches = [i for i, uuid in enumerate(uuids) if uuid.startswith(entry)]
            if len(matches) > 1:
                raise GpuSamplerUnavailable(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(matches)} GPUs")
            if not matches:
                break
            indices.append(matches[0])
    count = len(indices) if count is None else count
    if len(indices) < count:
        shown = "unset" if cuda_visible_devices is None else repr(cuda_visible_devices)
        raise GpuSamplerUnavailable(
            f"the engine uses {count} GPU(s) but only {len(indices)} are visible "
            f"({total} in NVML, CUDA_VISIBLE_DEVICES {shown})"
        )
    devices = []
    for position, index in enumerate(indices[:count]):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        devices.append(GpuDevice(position, index, uuids[index], _text(nvml.nvmlDeviceGetName(handle))))
    return devices


#: Where NVML's Python bindings are looked for, in order: ``nvidia-ml-py``'s module, then the copy vLLM vendors
#: (``vllm/third_party/pynvml.py``, the same bindings), so a machine with vLLM alone can still sample.
NVML_MODULES = ("pynvml", "vllm.third_party.pynvml")


def _import_nvml(modules: tuple[str, ...] = NVML_MODULES) -> Any:
    errors = []
    for name in modules:
        try:
            return importlib.import_module(name)
        except ImportError as error:
            errors.append(f"{name}: {error}")
    raise GpuSamplerUnavailable(f"no NVML bindings (pip install nvidia-ml-py): {'; '.join(errors)}")


class GpuSampler:
    """Sample the engine's GPUs in a background thread between ``start()`` and ``stop()``.

    ``count`` GPUs are sampled (tensor × pipeline parallel size); ``env`` is the server's environment, read for
    ``CUDA_VISIBLE_DEVICES``; ``nvml`` is the NVML module (default: the first of ``NVML_MODULES`` that imports, at
    ``start``; tests pass a fake). ``status`` is ``'sampled'``, ``'unavailable'`` (NVML could not be used: see
    ``reason``) or ``'failed'`` (sampling stopped on an error part-way: the samples taken so far are kept).
    """

    def __init__(
        self, count: int, env: Mapping[str, str] | None = None, interval_s: float = DEFAULT_INTERVAL_S, nvml: Any = None
    ) -> None:
        if count < 1:
            raise ValueError(f"count must be >= 1, got {count}")
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.count = count
        self.cuda_visible_devices = (env or {}).get("CUDA_VISIBLE_DEVICES")
        self.interval_s = interval_s
        self._nvml = nvml
        self.devices: list[GpuDevice] = []
        self.samples: list[tuple[Any, ...]] = []
        self.status = "not started"
        self.reason: str | None = None
        self.duration_s: float | None = None
        self._handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def __enter__(self) -> GpuSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Initialise NVML, find the devices and start sampling; on any NVML problem, record why and return."""
        try:
            nvml = self._nvml if self._nvml is not None else _import_nvml()
            self._nvml = nvml
            try:
                nvml.nvmlInit()
            except Exception as error:  # NVMLError_LibraryNotFound, _DriverNotLoaded, …
                raise GpuSamplerUnavailable(f"NVML could not start: {type(error).__name__}: {error}") from None
            try:
                self.devices = resolve_devices(nvml, self.count, self.cuda_visible_devices)
                self._handles = [nvml.nvmlDeviceGetHandleByIndex(d.nvml_index) for d in self.devices]
            except Exception as error:
                nvml.nvmlShutdown()
                if isinstance(error, GpuSamplerUnavailable):
                    raise
                raise GpuSamplerUnavailable(f"NVML could not list the GPUs: {type(error).__name__}: {error}") from None
        except GpuSamplerUnavailable as error:
            self.status, self.reason = "unavailable", str(error)
            return
        self.status = "sampled"
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="gpu-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (idempotent) and release NVML."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=10 * self.interval_s + 5)
        self._thread = None
        self.duration_s = time.monotonic() - self._t0
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # noqa: S110 (shutting down: nothing left to do with the error)
            pass

    def _read(self, call: str, *args: Any) -> Any:
        error_type = getattr(self._nvml, "NVMLError", None)
        try:
            return getattr(self._nvml, call)(*args)
        except Exception as error:
            if (error_type is not None and isinstance(error, error_type)) or type(error).__name__.startswith(
                "NVMLError"
            ):
                return None  # this reading is not supported on this GPU or failed once: an empty cell
            raise

    def _sample_once(self) -> None:
        nvml, t = self._nvml, round(time.monotonic() - self._t0, 4)
        clock_sm = getattr(nvml, "NVML_CLOCK_SM", 1)
        for device, handle in zip(self.devices, self._handles, strict=True):
            rates = self._read("nvmlDeviceGetUtilizationRates", handle)
            memory = self._read("nvmlDeviceGetMemoryInfo", handle)
            clock = self._read("nvmlDeviceGetClockInfo", handle, clock_sm)
            power = self._read("nvmlDeviceGetPowerUsage", handle)
            self.samples.append(
                (
                    t,
                    device.gpu,
                    device.nvml_index,
                    None if rates is None else int(rates.gpu),
                    None if rates is None else int(rates.memory),
                    None if memory is None else round(memory.used / MIB, 1),
                    None if clock is None else int(clock),
                    None if power is None else round(power / 1000.0, 1),
                )
            )

    def _run(self) -> None:
        try:
            while True:
                self._sample_once()
                if self._stop.wait(self.interval_s):
                    break
        except Exception as error:  # keep what was sampled; the point is still measured
            self.status, self.reason = "failed", f"sampling stopped: {type(error).__name__}: {error}"

    def csv_text(self) -> str:
        """The samples as ``gpu_samples.csv`` (header and one line per GPU per sample)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(SAMPLE_COLUMNS)
        for sample in self.samples:
            writer.writerow(["" if v is None else v for v in sample])
        return buffer.getvalue()

    def record(self) -> dict[str, Any]:
        """What a point's ``point.json`` says about the sampling: status, why not, interval, devices, sample count."""
        return {
            "status": self.status,
            "reason": self.reason,
            "interval_s": self.interval_s,
            "cuda_visible_devices": self.cuda_visible_devices,
            "devices": [asdict(d) for d in self.devices],
            "samples": len(self.samples) // max(len(self.devices), 1),
            "duration_s": None if self.duration_s is None else round(self.duration_s, 3),
        }


def nvml_sampler(count: int, env: Mapping[str, str] | None = None) -> GpuSampler:
    """The live runner's default: NVML through ``pynvml`` every ``DEFAULT_INTERVAL_S``."""
    return GpuSampler(count, env, DEFAULT_INTERVAL_S)


GIB = 1024**3


@dataclass(frozen=True)
class GpuAtHand:
    """One GPU this process sees, as NVML reports it: its model, its total memory and the driver that runs it."""

    name: str
    memory_gib: float
    driver_version: str = "unknown"


def visible_gpus(cuda_visible_devices: str | None = None, nvml: Any = None) -> list[GpuAtHand]:
    """The GPUs a process with this ``CUDA_VISIBLE_DEVICES`` sees (``None``: every GPU), in CUDA's order, read through
    NVML (``nvml``: the module, default the first of ``NVML_MODULES``, which vLLM vendors too). The one GPU detector
    of the package: the runner's provenance, its live-mode check and ``vllm-playbooks plan`` all ask it. Empty where
    there are no bindings, no driver, no visible GPU, or an entry that names several (an ambiguous UUID prefix)."""
    try:
        nvml = nvml if nvml is not None else _import_nvml()
        nvml.nvmlInit()
    except Exception:  # no bindings, NVMLError_LibraryNotFound, _DriverNotLoaded, …
        return []
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus = []
        for device in resolve_devices(nvml, None, cuda_visible_devices):
            memory = nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(device.nvml_index))
            gpus.append(GpuAtHand(device.name, memory.total / GIB, driver))
        return gpus
    except Exception:  # an ambiguous entry, or NVML could not read a GPU
        return []
    finally:
        nvml.nvmlShutdown()


def gpu_at_hand(cuda_visible_devices: str | None = None, nvml: Any = None) -> GpuAtHand | None:
    """The first of ``visible_gpus``; ``None`` where there is none."""
    gpus = visible_gpus(cuda_visible_devices, nvml)
    return gpus[0] if gpus else None
