"""What a recorded point's identity is made of: the hardware it ran on, its engine config, its load and its repeat.

A point's id is ``<hardware>/<config id>/<load slug>-r<repeat>``, also its folder under ``data/runs/<case>/raw/``:

- ``hardware`` (``hardware_key``) names what a result depends on besides the config: the GPU model, how many of
  them the server uses and the vLLM version (``nvidia-h200-x1-vllm0.26.0``). The driver and torch versions are
  recorded beside it (``provenance.json``, the row's columns) but do not separate points.
- the config id is ``EngineConfig.config_id``: the label and a hash of what the server sees (its flags and
  environment), so it survives code changes that the server never sees.

Everything here is read from a point's own files, so a row, its folder and its id can always be rebuilt from them.
"""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.errors import SchemaError

#: What ``query_gpus`` records on a machine without an NVIDIA GPU.
NO_GPU = "cpu"


def _slug(text: str) -> str:
    """Lower case, runs of anything but letters, digits and dots turned into one ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-") or "unknown"


def hardware_key(gpu_name: str, gpus: int, vllm_version: str) -> str:
    """The hardware part of a point's identity: ``<GPU model>-x<GPUs the server uses>-vllm<version>``, as a folder
    name (``nvidia-h200-x1-vllm0.26.0``); on a machine without a GPU, ``cpu-vllm<version>``."""
    version = _slug(vllm_version)
    if gpu_name == NO_GPU:
        return f"{NO_GPU}-vllm{version}"
    return f"{_slug(gpu_name)}-x{gpus}-vllm{version}"


def engine_of(record: dict[str, Any]) -> EngineConfig:
    """The engine config a point's ``point.json`` stores (its ``engine``), as today's code reads it; advisories about
    the speculative config are not repeated here."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return EngineConfig.model_validate(record["engine"])


def engine_gpus(engine: EngineConfig) -> int:
    """GPUs one server of ``engine`` uses: tensor × pipeline parallel size."""
    return engine.tensor_parallel_size * engine.pipeline_parallel_size


def read_json(path: Path) -> dict[str, Any]:
    """A JSON file of a point folder; ``SchemaError`` naming it when it is missing or damaged."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SchemaError(f"{path}: {error}") from None


def point_hardware(record: dict[str, Any], provenance: dict[str, Any]) -> str:
    """The hardware key of a point from its ``point.json`` and ``provenance.json`` (as dicts)."""
    return hardware_key(provenance["gpu_name"], engine_gpus(engine_of(record)), provenance["vllm_version"])


def point_key(config_id: str, load_slug: str, repeat: int) -> str:
    """A point's id within one hardware's rows: ``<config_id>/<load slug>-r<repeat>``."""
    return f"{config_id}/{load_slug}-r{repeat}"


def point_id(hardware: str, config_id: str, load_slug: str, repeat: int) -> str:
    """A point's id, which is also its folder under ``raw/``: ``<hardware>/<config_id>/<load slug>-r<repeat>``."""
    return f"{hardware}/{point_key(config_id, load_slug, repeat)}"
