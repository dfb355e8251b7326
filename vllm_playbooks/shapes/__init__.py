"""Config-only model shapes: one folder per shape, holding a real model's ``config.json`` and a ``SOURCE.md``.

vLLM runs a folder that holds only ``config.json`` with ``load_format="dummy"``: real kernels and tensor
shapes, random weights, nothing downloaded. Each shape here copies the dimensions of a published Hugging Face
config; its ``SOURCE.md`` names the model, the URL the config was read from and anything changed.

``resolve_model`` accepts either a shape name or the path of a user's own model folder, so the same code runs
the packaged shapes and real checkpoints. ``TOKENIZER_DIR`` is the offline tokenizer that ``vllm bench
serve`` and the server share when the model has no tokenizer of its own.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_playbooks.errors import ConfigError

__all__ = [
    "SHAPES_DIR",
    "TOKENIZER_DIR",
    "VLLM_NAME_MARKERS",
    "ModelShape",
    "get_shape",
    "list_shapes",
    "resolve_model",
    "vllm_path",
]

#: The folder holding one sub-folder per shape (``<name>/config.json`` + ``<name>/SOURCE.md``).
SHAPES_DIR: Path = Path(__file__).resolve().parent

#: The packaged offline tokenizer (``tokenizer.json`` + ``tokenizer_config.json``); see its README.md.
TOKENIZER_DIR: Path = SHAPES_DIR.parent / "tokenizer"

_CONFIG = "config.json"
#: The keys vLLM 0.26 reads a model's longest sequence from (``_get_and_verify_max_len``), the smallest winning.
_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
_SOURCE = "SOURCE.md"

#: Substrings vLLM 0.26 looks for in a draft's model string to switch the speculative method
#: (``SpeculativeConfig.__post_init__``: ``eagle-`` → eagle, ``eagle3`` → eagle3, then dflash, dspark). It reads
#: the whole string, folders included, so a checkout under a folder named like ``…-eagle3`` would turn an MTP or
#: draft_model config into eagle3.
VLLM_NAME_MARKERS = ("eagle-", "eagle3", "dflash", "dspark")


@dataclass(frozen=True)
class ModelShape:
    """The facts about one model folder that the playbooks need, read from its ``config.json``.

    ``path`` is the folder to pass to vLLM as ``--model``. ``quantization`` is the config's
    ``quantization_config.quant_method`` (``"awq"``, ``"fp8"``, ``"mxfp4"``…) or ``None`` for an unquantized
    model. ``num_mtp_layers`` is ``num_nextn_predict_layers`` (0 when absent): the MTP layers that
    ``method="mtp"`` speculative decoding drafts with. ``source`` is the first line of ``SOURCE.md`` (the
    model id), or the folder path for a folder without one.
    """

    name: str
    path: Path
    architecture: str
    model_type: str
    torch_dtype: str
    vocab_size: int
    num_hidden_layers: int
    hidden_size: int
    quantization: str | None
    num_mtp_layers: int
    source: str

    def config(self) -> dict[str, Any]:
        """The parsed ``config.json`` (read again on each call, so a caller may modify its copy freely)."""
        return _read_config(self.path)

    def attention_types(self) -> list[str]:
        """Each decoder layer's attention type, in layer order: the config's ``layer_types`` (gpt-oss:
        ``sliding_attention`` and ``full_attention``), ``full_attention`` for every layer it does not list."""
        listed = list(self.config().get("layer_types") or [])[: self.num_hidden_layers]
        return listed + ["full_attention"] * (self.num_hidden_layers - len(listed))

    def max_model_len(self) -> int | None:
        """The longest ``max_model_len`` vLLM 0.26 allows without ``VLLM_ALLOW_LONG_MAX_MODEL_LEN``
        (``_get_and_verify_max_len``): the smallest of the config's length keys (``max_position_embeddings``…),
        scaled by the RoPE factor for RoPE types other than ``su``, ``longrope`` and ``llama3`` (``yarn``: its
        ``original_max_position_embeddings`` times the factor); ``None`` for a config with no length key."""
        config = self.config()
        text = config["text_config"] if isinstance(config.get("text_config"), dict) else config
        lengths = [text[key] for key in _LENGTH_KEYS if _number(text.get(key))]
        if not lengths:
            return None
        derived = float(text["model_max_length"] if _number(text.get("model_max_length")) else min(lengths))
        rope = text.get("rope_scaling") or text.get("rope_parameters")
        if isinstance(rope, dict) and "gemma3" not in self.model_type:
            rope_type = rope.get("rope_type") or rope.get("type") or "default"
            factor = rope.get("factor", 1.0) if _number(rope.get("factor")) else 1.0
            if rope_type not in ("su", "longrope", "llama3"):
                original = rope.get("original_max_position_embeddings")
                derived = (original if rope_type == "yarn" and _number(original) else derived) * factor
        return int(derived)


def list_shapes() -> list[str]:
    """Names of the packaged shapes, sorted: every sub-folder of ``SHAPES_DIR`` that has a ``config.json``."""
    return sorted(p.name for p in SHAPES_DIR.iterdir() if p.is_dir() and (p / _CONFIG).is_file())


def _is_shape(name: str) -> bool:
    """Whether ``name`` is in :func:`list_shapes`, asked of its one folder (a pre-flight check asks thousands of
    times, and listing every shape's folder each time was most of what it cost)."""
    return Path(name).name == name and name not in ("", ".", "..") and (SHAPES_DIR / name / _CONFIG).is_file()


def get_shape(name: str) -> ModelShape:
    """The packaged shape called ``name``.

    Raises ``ConfigError`` listing the known names when there is no such shape, or when its
    ``config.json`` lacks a field a shape must have.
    """
    if not _is_shape(name):
        raise ConfigError(
            f"Unknown shape {name!r}. Known: {', '.join(list_shapes())}. Shapes live in vllm_playbooks/shapes/."
        )
    path = SHAPES_DIR / name
    return _shape_from_dir(name, path, strict=True)


def resolve_model(model: str | Path) -> ModelShape:
    """A packaged shape by name, or a user's model folder by path (a shape name wins over a same-named path).

    A path must be a directory holding a ``config.json``; anything else raises ``ConfigError`` saying what
    was found and what is expected. Fields a real checkpoint may nest (``text_config``) or name differently
    (``dtype`` for ``torch_dtype``) are looked up there too; a missing dtype reads as ``"auto"``.
    """
    text = str(model)
    if isinstance(model, str) and _is_shape(text):
        return _shape_from_dir(text, SHAPES_DIR / text, strict=True)
    path = Path(text).expanduser()
    if not path.exists():
        raise ConfigError(
            f"{text!r} is neither a known shape nor an existing directory. Known shapes: "
            f"{', '.join(list_shapes())}. For your own model, pass the folder that holds its config.json."
        )
    if not path.is_dir():
        raise ConfigError(
            f"{text!r} is a file, not a model directory. Pass the folder that holds config.json "
            f"(for example {path.parent}), or a shape name."
        )
    if not (path / _CONFIG).is_file():
        raise ConfigError(
            f"{text!r} is a directory without a config.json. A model folder needs at least config.json "
            "(with architectures, model_type, vocab_size); weights are optional with load_format=dummy."
        )
    return _shape_from_dir(path.name, path.resolve(), strict=False)


def _served_root() -> Path:
    """A folder outside the checkout, named after it, whose path holds none of ``VLLM_NAME_MARKERS``."""
    digest = hashlib.sha256(str(SHAPES_DIR).encode()).hexdigest()[:12]  # hex digits cannot spell a marker
    base = Path(tempfile.gettempdir())
    if any(marker in str(base).lower() for marker in VLLM_NAME_MARKERS):
        base = Path("/tmp")
    return base / f"vllm-playbooks-shapes-{digest}"


def vllm_path(shape: ModelShape, *, create: bool = False) -> Path:
    """The path vLLM is given for ``shape`` (``--model``, a draft's ``model``, ``bench serve --model``).

    A packaged shape is served through a symlink ``<tmp>/vllm-playbooks-shapes-<hash>/<name>`` so that only the
    shape's own name reaches vLLM's name-based method detection, not the folders the checkout happens to sit in
    (see ``VLLM_NAME_MARKERS``). ``create=True`` makes the link (and replaces a stale one); without it the path is
    only computed, as the pre-flight checks do. A user's own model folder is given to vLLM as it is.
    """
    if shape.path.parent != SHAPES_DIR:
        return shape.path
    link = _served_root() / shape.name
    if create:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() and link.resolve() != shape.path.resolve():
            link.unlink()
        if not link.is_symlink():
            try:
                link.symlink_to(shape.path, target_is_directory=True)
            except FileExistsError:  # made by a concurrent process in between: check what it points at
                if link.resolve() != shape.path.resolve():
                    raise ConfigError(f"{link} exists and does not point at {shape.path}") from None
    return link


def _read_config(path: Path) -> dict[str, Any]:
    file = path / _CONFIG
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{file} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{file} must hold a JSON object, not {type(data).__name__}")
    return data


def _field(config: dict[str, Any], key: str) -> Any:
    """``config[key]``, or ``config["text_config"][key]`` for models that nest their language-model config."""
    if key in config:
        return config[key]
    nested = config.get("text_config")
    if isinstance(nested, dict) and key in nested:
        return nested[key]
    return None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


def _source_line(path: Path) -> str | None:
    file = path / _SOURCE
    if not file.is_file():
        return None
    for line in file.read_text(encoding="utf-8").splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return stripped
    return None


def _shape_from_dir(name: str, path: Path, *, strict: bool) -> ModelShape:
    """Build a ``ModelShape``; ``strict`` (packaged shapes) also requires ``torch_dtype`` and a ``SOURCE.md``."""
    config = _read_config(path)
    where = path / _CONFIG
    architectures = config.get("architectures")
    if not (isinstance(architectures, list) and architectures and isinstance(architectures[0], str)):
        raise ConfigError(f"{where} needs 'architectures', a non-empty list of class names")
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise ConfigError(f"{where} needs 'model_type'")

    ints: dict[str, int] = {}
    for key in ("vocab_size", "num_hidden_layers", "hidden_size"):
        value = _field(config, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError(f"{where} needs a positive integer {key!r}, found {value!r}")
        ints[key] = value

    dtype = config.get("torch_dtype") if strict else (_field(config, "torch_dtype") or _field(config, "dtype"))
    if strict and not (isinstance(dtype, str) and dtype):
        raise ConfigError(f"{where} needs 'torch_dtype' (every packaged shape names its dtype)")
    torch_dtype = dtype if isinstance(dtype, str) and dtype else "auto"

    quant = _field(config, "quantization_config")
    quantization = quant.get("quant_method") if isinstance(quant, dict) else None
    mtp = _field(config, "num_nextn_predict_layers") or 0
    if isinstance(mtp, bool) or not isinstance(mtp, int) or mtp < 0:
        raise ConfigError(f"{where}: 'num_nextn_predict_layers' must be a non-negative integer, found {mtp!r}")

    source = _source_line(path)
    if source is None:
        if strict:
            raise ConfigError(f"{path / _SOURCE} is missing: every packaged shape names its source")
        source = str(path)

    return ModelShape(
        name=name,
        path=path,
        architecture=architectures[0],
        model_type=model_type,
        torch_dtype=torch_dtype,
        vocab_size=ints["vocab_size"],
        num_hidden_layers=ints["num_hidden_layers"],
        hidden_size=ints["hidden_size"],
        quantization=quantization if isinstance(quantization, str) else None,
        num_mtp_layers=mtp,
        source=source,
    )
