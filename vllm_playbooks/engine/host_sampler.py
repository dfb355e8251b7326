"""The host's CPU read while a point is measured: steal, busy and I/O-wait time, load average and clock frequency.

The draft-model path runs more of each engine step on the CPU (scheduling, the draft's sampling, Python between the
draft's forward passes), so a host whose CPU is taken by a neighbour (steal time, on a virtual machine), busy with
other work (load), or clocked down (frequency) can slow it while a GPU-bound config on the same machine is unmoved.
A run's record of these lets the noise analysis point at the cause instead of only widening the band.

``HostSampler`` reads ``/proc/stat`` at ``start`` and ``stop`` (the share of CPU time spent stolen, busy and in I/O
wait between the two), and every ``interval_s`` in a background thread ``/proc/loadavg`` (1-minute load) and the
cores' current clock (``/sys/devices/system/cpu/cpu*/cpufreq/scaling_cur_freq``, else ``cpu MHz`` in
``/proc/cpuinfo``). Where a file is missing (not Linux, a container that hides it) the reading is ``None`` and the
run goes on: nothing here raises once ``start`` is called.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_INTERVAL_S = 1.0
#: ``/proc/stat``'s per-CPU time columns after the name, in order (Linux ≥ 2.6.33).
_STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time of all cores (``/proc/stat``'s ``cpu`` line), in clock ticks."""

    busy: int
    idle: int
    iowait: int
    steal: int

    @property
    def total(self) -> int:
        """All ticks counted: busy, idle, I/O wait and stolen."""
        return self.busy + self.idle + self.iowait + self.steal


def read_cpu_times(stat: Path = Path("/proc/stat")) -> CpuTimes | None:
    """The all-core ``cpu`` line of ``stat``, or ``None`` where it cannot be read. Busy is user + nice + system + irq
    + softirq (guest time is already inside user)."""
    try:
        for line in stat.read_text(encoding="ascii", errors="replace").splitlines():
            parts = line.split()
            if parts and parts[0] == "cpu":
                values = dict(zip(_STAT_FIELDS, (int(v) for v in parts[1:9]), strict=False))
                busy = sum(values.get(k, 0) for k in ("user", "nice", "system", "irq", "softirq"))
                return CpuTimes(busy, values.get("idle", 0), values.get("iowait", 0), values.get("steal", 0))
    except (OSError, ValueError):
        return None
    return None


def read_load_1m(loadavg: Path = Path("/proc/loadavg")) -> float | None:
    """The 1-minute load average (runnable and waiting tasks), or ``None`` where it cannot be read."""
    try:
        return float(loadavg.read_text(encoding="ascii").split()[0])
    except (OSError, ValueError, IndexError):
        return None


def read_cpu_mhz(
    sys_cpu: Path = Path("/sys/devices/system/cpu"), cpuinfo: Path = Path("/proc/cpuinfo")
) -> float | None:
    """The mean current clock of the host's cores in MHz: cpufreq's ``scaling_cur_freq`` (kHz) where the kernel
    exposes it, else the ``cpu MHz`` lines of ``cpuinfo``; ``None`` where neither can be read."""
    readings: list[float] = []
    for path in sorted(sys_cpu.glob("cpu[0-9]*/cpufreq/scaling_cur_freq")):
        try:
            readings.append(int(path.read_text(encoding="ascii").strip()) / 1000.0)
        except (OSError, ValueError):
            continue
    if not readings:
        try:
            for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "cpu MHz":
                    readings.append(float(value))
        except (OSError, ValueError):
            return None
    return sum(readings) / len(readings) if readings else None


def share_pct(part: int, whole: int) -> float | None:
    """``part`` of ``whole`` in percent, to 0.01; ``None`` for an empty whole."""
    return round(100.0 * part / whole, 2) if whole > 0 else None


class HostSampler:
    """Read the host's CPU between ``start()`` and ``stop()``; ``record()`` is what a point's ``point.json`` keeps.

    ``proc`` and ``sys_cpu`` are the roots the readings come from (tests point them at files of their own).
    """

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        proc: Path = Path("/proc"),
        sys_cpu: Path = Path("/sys/devices/system/cpu"),
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self._proc, self._sys_cpu = proc, sys_cpu
        self._first: CpuTimes | None = None
        self._last: CpuTimes | None = None
        self.load_1m: list[float] = []
        self.cpu_mhz: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample_once(self) -> None:
        load = read_load_1m(self._proc / "loadavg")
        mhz = read_cpu_mhz(self._sys_cpu, self._proc / "cpuinfo")
        if load is not None:
            self.load_1m.append(load)
        if mhz is not None:
            self.cpu_mhz.append(mhz)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample_once()

    def start(self) -> None:
        """Take the first readings and start the thread."""
        self._first = read_cpu_times(self._proc / "stat")
        self._sample_once()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="host-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (idempotent) and take the last readings."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=self.interval_s + 5)
        self._thread = None
        self._last = read_cpu_times(self._proc / "stat")
        self._sample_once()

    def record(self) -> dict[str, Any]:
        """The run's host readings: the shares of CPU time stolen, busy and in I/O wait between start and stop (all
        cores, percent), the highest 1-minute load, the lowest and mean core clock (MHz), the host's logical CPUs;
        a reading that could not be taken is ``None``."""
        steal = busy = iowait = None
        if self._first is not None and self._last is not None:
            whole = self._last.total - self._first.total
            steal = share_pct(self._last.steal - self._first.steal, whole)
            busy = share_pct(self._last.busy - self._first.busy, whole)
            iowait = share_pct(self._last.iowait - self._first.iowait, whole)
        return {
            "cpu_count": os.cpu_count(),
            "steal_pct": steal,
            "busy_pct": busy,
            "iowait_pct": iowait,
            "load_1m_max": max(self.load_1m) if self.load_1m else None,
            "cpu_mhz_mean": round(sum(self.cpu_mhz) / len(self.cpu_mhz), 1) if self.cpu_mhz else None,
            "cpu_mhz_min": round(min(self.cpu_mhz), 1) if self.cpu_mhz else None,
            "samples": len(self.load_1m),
        }
