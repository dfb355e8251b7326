"""Which speculative method vLLM 0.26 detects for a draft model, and the method a config leaves to it."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_playbooks.shapes import ModelShape, list_shapes, resolve_model, vllm_path

#: vLLM 0.26's ``MTPModelTypes`` (config/speculative.py): as a method each is rewritten to ``mtp``; as a draft's
#: ``model_type`` (after vLLM's ``hf_config_override``) each makes the inferred method ``mtp``.
MTP_MODEL_TYPES: tuple[str, ...] = (
    "deepseek_mtp",
    "mimo_mtp",
    "mimo_v2_mtp",
    "glm4_moe_mtp",
    "glm4_moe_lite_mtp",
    "glm_ocr_mtp",
    "ernie_mtp",
    "nemotron_h_mtp",
    "exaone_moe_mtp",
    "exaone4_5_mtp",
    "qwen3_next_mtp",
    "qwen3_5_mtp",
    "longcat_flash_mtp",
    "minimax_m3_mtp",
    "bailing_hybrid_mtp",
    "mtp",
    "pangu_ultra_moe_mtp",
    "step3p5_mtp",
    "hy_v3_mtp",
    "gemma4_mtp",
    "inkling_mtp",
)


_DSPARK_ARCHITECTURES = frozenset({"Qwen3DSparkModel", "Gemma4DSparkModel"})


class SpeculativeConfigWarning(UserWarning):
    """A valid speculative config with a consequence vLLM 0.26 only logs at start-up (or not at all)."""


def _is_custom_proposer_path(model: str) -> bool:
    """vLLM's ``_is_custom_proposer_path``: a dotted import path such as ``pkg.MyProposer``."""
    if model.startswith(("http://", "https://", "file://")) or "/" in model:
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(part.isidentifier() for part in parts)


def _local_model(model: str) -> ModelShape | None:
    """The shape or model folder ``model`` names, or ``None`` for anything else (a Hugging Face id, say).

    A folder that exists but holds no usable ``config.json`` raises ``ConfigError`` from ``resolve_model``.
    """

    if not model.strip():
        return None
    if model in list_shapes() or Path(model).expanduser().exists():
        return resolve_model(model)
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def draft_type_after_override(config: Mapping[str, Any]) -> tuple[str, int | None]:
    """``(model_type, n_predict)`` of a draft config after vLLM 0.26's ``hf_config_override``.

    That override turns a target checkpoint with MTP layers into its MTP drafter: ``deepseek_v3`` becomes
    ``deepseek_mtp``, ``MiMoForCausalLM`` becomes ``mimo_mtp``, and so on; ``n_predict`` is the MTP layer count
    vLLM divides k by (``None`` when vLLM sets none). Configs the override leaves alone come back unchanged.
    """
    cfg: Mapping[str, Any] = config
    model_type = str(cfg.get("model_type") or "")
    archs = [a for a in (cfg.get("architectures") or []) if isinstance(a, str)]
    arch = archs[0] if archs else ""
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), Mapping) else {}

    def layers(source: Mapping[str, Any], key: str = "num_nextn_predict_layers", default: int | None = None):
        value = _int_or_none(source.get(key))
        return default if value is None else value

    if model_type in ("deepseek_v3", "deepseek_v32", "glm_moe_dsa", "deepseek_v4", "deepseek_mtp"):
        return "deepseek_mtp", layers(cfg)
    if model_type in ("pangu_ultra_moe", "pangu_ultra_moe_mtp"):
        return "pangu_ultra_moe_mtp", layers(cfg)
    if arch == "MiMoForCausalLM":
        return "mimo_mtp", layers(cfg)
    if arch in ("MiMoV2ForCausalLM", "MiMoV2OmniForCausalLM", "MiMoV2FlashForCausalLM"):
        return "mimo_v2_mtp", 1  # vLLM 0.26 uses only the first MiMo-V2 MTP layer
    if arch == "Glm4MoeForCausalLM":
        return "glm4_moe_mtp", layers(cfg)
    if arch == "Glm4MoeLiteForCausalLM":
        return "glm4_moe_lite_mtp", layers(cfg)
    if arch == "GlmOcrForConditionalGeneration":
        return "glm_ocr_mtp", layers(cfg)
    if model_type in ("ernie4_5_moe", "ernie_mtp"):
        return "ernie_mtp", layers(cfg)
    nemotron = text if arch == "NemotronH_Super_Omni_Reasoning_V3" and text else cfg
    nemotron_type = str(nemotron.get("model_type") or "")
    if (nemotron_type in ("nemotron_h", "nemotron_h_puzzle") and (layers(nemotron) or 0) > 0) or (
        nemotron_type == "nemotron_h_mtp"
    ):
        return "nemotron_h_mtp", layers(nemotron, default=1)
    if model_type in ("qwen3_next", "qwen3_next_mtp"):
        return "qwen3_next_mtp", layers(cfg)
    if model_type in ("bailing_hybrid", "bailing_hybrid_mtp") or "BailingMoeV2_5ForCausalLM" in archs:
        return "bailing_hybrid_mtp", layers(cfg)
    if model_type in ("exaone_moe", "exaone_moe_mtp"):
        return "exaone_moe_mtp", layers(cfg)
    if "exaone4_5" in model_type:
        return "exaone4_5_mtp", layers(cfg)
    if model_type in ("qwen3_5", "qwen3_5_moe", "intern_s2_preview", "qwen3_5_mtp"):
        key = "mtp_num_hidden_layers"
        return "qwen3_5_mtp", layers(cfg, key) if key in cfg else layers(text, key)
    if model_type in ("longcat_flash", "longcat_flash_ngram", "longcat_flash_mtp"):
        return "longcat_flash_mtp", layers(cfg, default=1)
    if model_type in ("step3p5", "step3p7", "step3p5_mtp") or arch in (
        "Step3p5ForCausalLM",
        "Step3p7ForConditionalGeneration",
    ):
        return "step3p5_mtp", layers(text or cfg, default=1)
    if model_type in ("hy_v3", "hy_v3_mtp"):
        return "hy_v3_mtp", layers(cfg)
    if model_type in ("inkling_mm_model", "inkling_model", "inkling_mtp"):
        mtp = cfg.get("mtp_config") if isinstance(cfg.get("mtp_config"), Mapping) else {}
        return "inkling_mtp", 1 if (layers(mtp, default=0) or 0) >= 1 else 0
    if model_type in ("gemma4_assistant", "gemma4_unified_assistant", "gemma4_mtp"):
        return "gemma4_mtp", 1
    if model_type in ("minimax_m3_vl", "minimax_m3_mtp") or arch in (
        "MiniMaxM3SparseForConditionalGeneration",
        "MiniMaxM3MTP",
    ):
        source = text if model_type == "minimax_m3_vl" and text else cfg
        return "minimax_m3_mtp", layers(source, "num_mtp_modules", default=1)
    return model_type, layers(cfg, "n_predict")


def vllm_detected_method(name: str, config: Mapping[str, Any] | None, method: str = "draft_model") -> str | None:
    """The method vLLM 0.26 ends up with once it has loaded the draft, or ``None`` where it raises.

    ``name`` is the model string vLLM sees (a path or a hub id), ``config`` the draft's ``config.json`` (``None``
    when it cannot be read here), ``method`` the method going in. vLLM keeps eagle/eagle3/dflash/dspark; otherwise
    it switches to eagle when the name holds ``eagle-``, eagle3 for ``eagle3`` (then dflash, dspark), to medusa,
    mlp_speculator or mtp by the draft's ``model_type``, and keeps draft_model; any other method that matched
    nothing raises ``NotImplementedError('Unsupported speculative method')``.
    """
    if method in ("eagle", "eagle3", "dflash", "dspark"):
        return method
    lowered = name.lower()
    archs = set((config or {}).get("architectures") or [])
    if "eagle-" in lowered:
        return "eagle"
    if "eagle3" in lowered:
        return "eagle3"
    if "dflash" in lowered:
        return "dflash"
    if "dspark" in lowered or archs & _DSPARK_ARCHITECTURES:
        return "dspark"
    if method == "medusa":
        model_type = "medusa"  # vLLM forces model_type=medusa for old Medusa checkpoints
    else:
        model_type = draft_type_after_override(config)[0] if config is not None else ""
    if model_type in ("medusa", "mlp_speculator"):
        return model_type
    if model_type in MTP_MODEL_TYPES:
        return "mtp"
    return "draft_model" if method == "draft_model" else None


def inferred_method(spec: Mapping[str, Any]) -> str:
    """The method vLLM 0.26 uses for the speculative config ``spec`` (a dict as a user writes it).

    * ``method`` given: that method, except that an MTP model-type name (``deepseek_mtp``…) becomes ``mtp`` with a
      ``SpeculativeConfigWarning``.
    * neither ``method`` nor ``model``: ``draft_model`` (vLLM then refuses the config: there is no draft).
    * ``model`` is ``ngram`` or ``[ngram]``: ``ngram``; a dotted import path (``pkg.MyProposer``): ``custom_class``.
    * otherwise the draft decides, as in ``vllm_detected_method``: a shape name or a model folder is resolved with
      ``vllm_playbooks.shapes.resolve_model`` and both its path and its ``config.json`` are read; any other string
      (a Hugging Face id) is judged by its name alone: ``draft_model`` unless it names eagle, eagle3, dflash or
      dspark.

    May return a method this package does not run (``dflash``, ``dspark``, ``custom_class``); ``SpeculativeConfig``
    refuses those with a clear message.
    """
    method = spec.get("method")
    if method is not None:
        if isinstance(method, str) and method in MTP_MODEL_TYPES and method != "mtp":
            warnings.warn(
                f"method {method!r} is deprecated in vLLM 0.26, which rewrites it to 'mtp'; write method: mtp.",
                SpeculativeConfigWarning,
                stacklevel=2,
            )
            return "mtp"
        return method
    model = spec.get("model")
    if model is None:
        return "draft_model"
    text = str(model)
    if text in ("ngram", "[ngram]"):
        return "ngram"
    local = _local_model(text)
    if local is None:
        if _is_custom_proposer_path(text):
            return "custom_class"
        return vllm_detected_method(text, None) or "draft_model"

    return vllm_detected_method(str(vllm_path(local)), local.config()) or "draft_model"
