"""Accelerator peak figures (memory, HBM bandwidth, dense BF16/FP8 tensor throughput), each row with its source.

The numbers live in ``data/reference/hardware.csv``; ``data/reference/README.md`` says where each came from and which
are secondary. Peaks are dense (no 2:4 sparsity). The roofline in ``vllm_playbooks.model`` scales them by fitted
efficiencies; never read them as achievable rates.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from vllm_playbooks import paths
from vllm_playbooks.errors import ConfigError, SchemaError

__all__ = [
    "REFERENCE_DATASHEET",
    "REFERENCE_GPU",
    "Gpu",
    "as_gpu",
    "datasheet_gpu",
    "get_gpu",
    "hardware_file",
    "list_gpus",
    "load_gpus",
    "measured_on",
]

#: The GPU the book's own rows were measured on, as its rows name it (nvidia-smi's name): what a case page, the
#: ledger's first line and the advisor's evaluation read unless asked for another...
REFERENCE_GPU = "NVIDIA H200"
#: ...and its datasheet row: the GPU a model calibrated on the book's rows (efficiencies, the what-if, the roofline
#: checks) describes unless given another.
REFERENCE_DATASHEET = "H200-SXM"

_COLUMNS = (
    "gpu",
    "memory_gb",
    "hbm_bandwidth_tb_s",
    "bf16_dense_tflops",
    "fp8_dense_tflops",
    "source_url",
    "source_title",
    "note",
)


@dataclass(frozen=True)
class Gpu:
    """One accelerator's peak figures. ``fp8_dense_tflops`` is None where the part has no FP8 tensor cores."""

    name: str
    memory_gb: float
    hbm_bandwidth_tb_s: float
    bf16_dense_tflops: float
    fp8_dense_tflops: float | None
    source_url: str
    source_title: str
    note: str

    @property
    def bandwidth_bytes_s(self) -> float:
        """Peak HBM bandwidth in bytes per second."""
        return self.hbm_bandwidth_tb_s * 1e12

    @property
    def bf16_flops_s(self) -> float:
        """Peak dense BF16 tensor throughput in FLOP per second."""
        return self.bf16_dense_tflops * 1e12

    @property
    def ridge_point_bf16(self) -> float:
        """FLOP per byte at which a BF16 kernel turns from memory- to compute-bound."""
        return self.bf16_flops_s / self.bandwidth_bytes_s


class _HardwareRow(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu: str = Field(min_length=1)
    memory_gb: float = Field(gt=0)
    hbm_bandwidth_tb_s: float = Field(gt=0)
    bf16_dense_tflops: float = Field(gt=0)
    fp8_dense_tflops: float | None = Field(None, gt=0)
    source_url: str
    source_title: str = Field(min_length=1)
    note: str = ""

    @field_validator("fp8_dense_tflops", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("source_url")
    @classmethod
    def _https(cls, value: str) -> str:
        if not value.startswith("https://"):
            raise ValueError(f"source_url must be an https URL, got {value!r}")
        return value


def hardware_file(start: Path | None = None) -> Path:
    """``data/reference/hardware.csv``."""
    return paths.data_dir(start) / "reference" / "hardware.csv"


def load_gpus(path: Path | None = None) -> dict[str, Gpu]:
    """Every row of the hardware table, validated, by name. Raises ``SchemaError`` on a bad file."""
    source = path if path is not None else hardware_file()
    with source.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != _COLUMNS:
            raise SchemaError(f"{source}: columns must be {', '.join(_COLUMNS)}; got {reader.fieldnames}")
        gpus: dict[str, Gpu] = {}
        for number, record in enumerate(reader, start=1):
            try:
                row = _HardwareRow(**record)
            except ValidationError as exc:
                raise SchemaError(f"{source} row {number}: {exc}") from exc
            if row.gpu in gpus:
                raise SchemaError(f"{source} row {number}: GPU {row.gpu!r} appears twice")
            gpus[row.gpu] = Gpu(
                name=row.gpu,
                memory_gb=row.memory_gb,
                hbm_bandwidth_tb_s=row.hbm_bandwidth_tb_s,
                bf16_dense_tflops=row.bf16_dense_tflops,
                fp8_dense_tflops=row.fp8_dense_tflops,
                source_url=row.source_url,
                source_title=row.source_title,
                note=row.note,
            )
    return gpus


@lru_cache(maxsize=1)
def _default_gpus() -> dict[str, Gpu]:
    return load_gpus()


def list_gpus() -> list[str]:
    """Names in the packaged hardware table, in file order."""
    return list(_default_gpus())


def get_gpu(name: str) -> Gpu:
    """The row called ``name``; ``ConfigError`` listing the known names otherwise."""
    gpus = _default_gpus()
    if name not in gpus:
        raise ConfigError(f"Unknown GPU {name!r}. Known: {', '.join(gpus)} (data/reference/hardware.csv).")
    return gpus[name]


def as_gpu(gpu: Gpu | str) -> Gpu:
    return get_gpu(gpu) if isinstance(gpu, str) else gpu


#: The datasheet row each GPU family's token in a lower-cased GPU name or hardware key stands for.
_FAMILY_TOKENS = (
    ("H200-SXM", "h200"),
    ("H100-SXM", "h100"),
    ("A100-80GB", "a100"),
    ("B200", "b200"),
    ("MI300X", "mi300x"),
    ("L40S", "l40s"),
)


def datasheet_gpu(name: str) -> Gpu:
    """The datasheet row of a GPU named as nvidia-smi names it ('NVIDIA H100 80GB HBM3'), as a hardware key names it
    ('nvidia-h200-x1-vllm0.26.0') or as the datasheet does ('H200-SXM'): the family's one row, so an H100 PCIe reads
    as the H100-SXM; ``ConfigError`` for a family the table lacks, or a name that gives another memory size than its
    family's row (an A100-SXM4-40GB is no A100-80GB)."""
    lowered = name.lower()
    for row, token in _FAMILY_TOKENS:
        if token in lowered:
            gpu = get_gpu(row)
            size = re.search(r"(\d+)\s*gb", lowered)
            if size and int(size.group(1)) != round(gpu.memory_gb):
                raise ConfigError(
                    f"{name!r} has {size.group(1)} GB; the {row} row of the hardware table has "
                    f"{gpu.memory_gb:g} GB and no row has this part"
                )
            return gpu
    return get_gpu(name)


def measured_on(gpu_name: str, gpu: Gpu | str) -> bool:
    """Whether a recorded row's ``gpu_name`` (as nvidia-smi names it) is of the datasheet GPU ``gpu``; False for a GPU
    the table lacks (a CPU-only run among them)."""
    try:
        return datasheet_gpu(gpu_name).name == as_gpu(gpu).name
    except ConfigError:
        return False
