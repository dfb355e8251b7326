"""A speculative config against its target model: advisories, draft tensor parallelism, and what vLLM 0.26 refuses."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path

from vllm_playbooks.config.spec_detection import (
    SpeculativeConfigWarning,
    draft_type_after_override,
    vllm_detected_method,
)
from vllm_playbooks.config.spec_input import SPEC_METHODS
from vllm_playbooks.config.speculative import SpeculativeConfig
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.shapes import ModelShape, resolve_model, vllm_path


def _as_shape(model: ModelShape | str | Path) -> ModelShape:

    return model if isinstance(model, ModelShape) else resolve_model(model)


def target_advisories(
    spec: SpeculativeConfig, target_shape: ModelShape | str | Path, target_tp: int, model_type: str | None = None
) -> list[str]:
    """The sentences ``check_against_target`` warns with: consequences that depend on the target."""
    target = _as_shape(target_shape)
    target_type = model_type or target.model_type
    out: list[str] = []
    if spec.method == "mtp" and spec.model is None and target_type == "deepseek_v32":
        out.append(
            "a deepseek_v32 target makes vLLM 0.26 force enforce_eager=True on its MTP drafter (CUDA graphs with "
            "V3.2 MTP are unsupported), so every draft step runs without CUDA graphs whatever enforce_eager says."
        )
    if spec.method == "mlp_speculator" and spec.draft_tensor_parallel_size is None and target_tp > 1:
        out.append(
            f"mlp_speculator cannot run with tensor parallelism in vLLM 0.26, so its draft runs with "
            f"draft_tensor_parallel_size=1 while the target uses {target_tp}."
        )
    return out


def check_draft_tp(spec: SpeculativeConfig, target_tp: int) -> None:
    """vLLM's rule for every method: the draft runs at TP 1 or at the target's TP. Returns nothing; raises
    ``ConfigError`` (a ``ValueError``, so a pydantic validator reports it as its own) where the draft breaks it."""
    draft_tp = spec.draft_tensor_parallel_size
    if draft_tp is not None and draft_tp not in (1, target_tp):
        raise ConfigError(
            f"draft_tensor_parallel_size={draft_tp} must be 1 or the target's tensor_parallel_size={target_tp}"
        )


def check_against_target(
    spec: SpeculativeConfig,
    target_shape: ModelShape | str | Path,
    target_tp: int,
    model_type: str | None = None,
    *,
    target_max_model_len: int | None = None,
) -> None:
    """The checks that need the target: draft TP, MTP layers and k, the draft's method and vocabulary.

    ``target_shape`` is a ``ModelShape``, a shape name or a model folder; ``model_type`` overrides the target's
    ``model_type`` (for a target whose real type the shape does not carry, e.g. ``deepseek_v32``);
    ``target_max_model_len`` is the engine's ``max_model_len``. Returns nothing; raises ``ConfigError`` (an unknown
    shape or a bad path raises it from the lookup) and warns, as ``SpeculativeConfigWarning``, with
    ``target_advisories``.
    """

    target = _as_shape(target_shape)
    if isinstance(target_tp, bool) or not isinstance(target_tp, int) or target_tp < 1:
        raise ConfigError(f"target tensor_parallel_size must be an int >= 1, got {target_tp!r}")
    draft_tp = spec.draft_tensor_parallel_size
    check_draft_tp(spec, target_tp)
    if spec.method == "draft_model" and draft_tp is not None and draft_tp != target_tp:
        raise ConfigError(
            f"method 'draft_model' needs draft_tensor_parallel_size equal to the target's tensor_parallel_size="
            f"{target_tp} in vLLM 0.26 (got {draft_tp}): its draft proposer refuses any other value"
        )
    if (
        spec.max_model_len is not None
        and target_max_model_len is not None
        and spec.max_model_len > target_max_model_len
    ):
        raise ConfigError(
            f"speculative max_model_len={spec.max_model_len} cannot be larger than the target's max_model_len="
            f"{target_max_model_len}"
        )

    target_config = target.config()
    if model_type:
        target_config["model_type"] = model_type
    if spec.method == "mtp":
        # Without a model, vLLM drafts with the target's own MTP layers.
        source, config = (_as_shape(spec.model), None) if spec.model else (target, target_config)
        config = config if config is not None else source.config()
        detected_type, n_predict = draft_type_after_override(config)
        layers = n_predict if n_predict is not None else source.num_mtp_layers
        if layers < 1:
            role = "a draft" if spec.model else "a target"
            raise ConfigError(
                f"method 'mtp' needs {role} with MTP layers; {source.name} has num_nextn_predict_layers=0. "
                "Use a model whose config has num_nextn_predict_layers >= 1 (e.g. deepseek-v3, mimo-7b)."
            )
        if vllm_detected_method(str(vllm_path(source)), config, "mtp") != "mtp":
            raise ConfigError(
                f"vLLM 0.26 has no MTP drafter for {source.name} (model_type {config.get('model_type')!r}, "
                f"architecture {(config.get('architectures') or ['?'])[0]!r}): it stops with "
                "\"Unsupported speculative method: 'mtp'\""
            )
        k = spec.num_speculative_tokens
        if k > layers and k % layers != 0:
            raise ConfigError(
                f"num_speculative_tokens={k} must be divisible by the MTP layer count {layers} of {source.name}"
            )
        if detected_type == "inkling_mtp" and k != 1:
            raise ConfigError(f"Inkling MTP in vLLM 0.26 supports exactly one speculative token, not {k}")
    elif spec.model:
        draft = _as_shape(spec.model)
        draft_config = draft.config()
        detected = vllm_detected_method(str(vllm_path(draft)), draft_config, spec.method)
        if detected is None:
            raise ConfigError(
                f"method {spec.method!r} does not fit draft {draft.name} (model_type {draft.model_type!r}): vLLM "
                f"0.26 stops with \"Unsupported speculative method: '{spec.method}'\""
            )
        if detected != spec.method:
            fix = f"set method: {detected}" if detected in SPEC_METHODS else "this package does not run that method"
            raise ConfigError(
                f"vLLM 0.26 would run draft {draft.name} as method {detected!r}, not {spec.method!r} (it re-detects "
                f"the method from the draft's path and model_type); {fix}"
            )
        if spec.method == "draft_model" and draft.vocab_size != target.vocab_size:
            raise ConfigError(
                f"draft_model needs the target's vocabulary: {draft.name} has {draft.vocab_size} tokens, "
                f"{target.name} has {target.vocab_size}"
            )
        if spec.parallel_drafting:
            dflash = draft_config.get("dflash_config")
            if not (
                "pard_token" in draft_config
                or "ptd_token_id" in draft_config
                or (isinstance(dflash, Mapping) and "mask_token_id" in dflash)
            ):
                raise ConfigError(
                    f"parallel_drafting needs a draft trained for it: {draft.name}'s config.json has no pard_token, "
                    "ptd_token_id or dflash_config.mask_token_id, and vLLM 0.26 stops at start-up without one"
                )
    for advisory in target_advisories(spec, target, target_tp, model_type):
        warnings.warn(advisory, SpeculativeConfigWarning, stacklevel=2)
