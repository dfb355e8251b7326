"""The host's CPU read around a measured run: shares of stolen, busy and I/O-wait time, load and clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_playbooks.engine.host_sampler import HostSampler, read_cpu_mhz, read_cpu_times, read_load_1m

#            user nice system idle iowait irq softirq steal
BEFORE = "cpu  1000 0 200 8000 100 0 0 50\ncpu0 500 0 100 4000 50 0 0 25\n"
AFTER = "cpu  1600 0 300 8800 120 10 0 170\ncpu0 800 0 150 4400 60 5 0 85\n"


def _host(tmp_path: Path, stat: str = BEFORE) -> tuple[Path, Path]:
    proc, sys_cpu = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    sys_cpu.mkdir()
    (proc / "stat").write_text(stat)
    (proc / "loadavg").write_text("3.50 2.00 1.00 2/300 12345\n")
    (proc / "cpuinfo").write_text("processor\t: 0\ncpu MHz\t\t: 2000.0\nprocessor\t: 1\ncpu MHz\t\t: 3000.0\n")
    return proc, sys_cpu


def test_the_shares_of_cpu_time_between_start_and_stop(tmp_path: Path) -> None:
    proc, sys_cpu = _host(tmp_path)
    sampler = HostSampler(interval_s=60, proc=proc, sys_cpu=sys_cpu)
    sampler.start()
    (proc / "stat").write_text(AFTER)
    (proc / "loadavg").write_text("7.25 2.00 1.00 9/300 12345\n")
    sampler.stop()
    record = sampler.record()
    # ticks between the two readings: busy 600 + 100 + 10 = 710, idle 800, iowait 20, steal 120: 1650 in all
    assert record["steal_pct"] == pytest.approx(100 * 120 / 1650, abs=0.01)
    assert record["busy_pct"] == pytest.approx(100 * 710 / 1650, abs=0.01)
    assert record["iowait_pct"] == pytest.approx(100 * 20 / 1650, abs=0.01)
    assert record["load_1m_max"] == 7.25 and record["samples"] == 2
    assert record["cpu_mhz_mean"] == 2500.0 and record["cpu_mhz_min"] == 2500.0


def test_cpufreq_is_preferred_to_cpuinfo(tmp_path: Path) -> None:
    proc, sys_cpu = _host(tmp_path)
    for core, khz in ((0, 1200000), (1, 3400000)):
        (sys_cpu / f"cpu{core}" / "cpufreq").mkdir(parents=True)
        (sys_cpu / f"cpu{core}" / "cpufreq" / "scaling_cur_freq").write_text(f"{khz}\n")
    assert read_cpu_mhz(sys_cpu, proc / "cpuinfo") == 2300.0


def test_a_host_that_hides_its_files_gives_empty_readings(tmp_path: Path) -> None:
    nowhere = tmp_path / "none"
    assert read_cpu_times(nowhere / "stat") is None and read_load_1m(nowhere / "loadavg") is None
    assert read_cpu_mhz(nowhere, nowhere / "cpuinfo") is None
    sampler = HostSampler(interval_s=60, proc=nowhere, sys_cpu=nowhere)
    sampler.start()
    sampler.stop()
    record = sampler.record()
    assert record["steal_pct"] is None and record["load_1m_max"] is None and record["cpu_mhz_mean"] is None


def test_the_real_host_is_read_where_it_is_linux() -> None:
    if not Path("/proc/stat").exists():
        pytest.skip("not Linux")
    sampler = HostSampler(interval_s=0.05)
    sampler.start()
    sum(i * i for i in range(200_000))
    sampler.stop()
    record = sampler.record()
    assert 0.0 <= record["steal_pct"] <= 100.0 and 0.0 < record["busy_pct"] <= 100.0
    assert record["load_1m_max"] is not None and record["samples"] >= 2
