"""KV budget, batching defaults and CUDA-graph sizes against hand-computed values and vLLM 0.26's own start-up logs."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import FROZEN
from vllm_playbooks.analysis.calculator import calculator_check
from vllm_playbooks.book.calculator_notes import cudagraph_reserve_note, overheads_note
from vllm_playbooks.config.capacity import (
    BLOCK_SIZE,
    GIB,
    batch_defaults,
    budget_is_modelled,
    check_fits,
    cudagraph_capture_sizes,
    kv_budget,
    max_capture_size_of,
    refusal,
    refused_engines,
)
from vllm_playbooks.config.engine import EngineConfig
from vllm_playbooks.config.sizes import MOE_ARCHITECTURES, kv_bytes_per_token, weight_bytes
from vllm_playbooks.errors import CapacityError, ConfigError, SchemaError
from vllm_playbooks.paths import data_dir
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.results.server_logs import (
    has_started,
    log_name_parts,
    read_startup,
    server_logs,
    unstarted_server_logs,
)
from vllm_playbooks.run.budget import engine_for_log
from vllm_playbooks.run.plan import load_plan
from vllm_playbooks.shapes import get_shape, resolve_model

DATA = data_dir()


@pytest.mark.parametrize(
    ("shape", "kv_dtype", "expected"),
    [
        ("llama-3.1-8b", "auto", 2 * 32 * 8 * 128 * 2),  # 128 KiB: 32 layers, 8 KV heads of 128, bf16
        ("llama-3.2-1b", "auto", 2 * 16 * 8 * 64 * 2),
        ("llama-3.3-70b-awq", "fp8", 2 * 80 * 8 * 128 * 1),  # 160 KiB with an fp8 cache
        ("llama-3.3-70b-awq", "auto", 2 * 80 * 8 * 128 * 2),  # its float16 otherwise
        ("deepseek-v3", "auto", 61 * (512 + 64) * 2),  # MLA: one latent + rotary key per layer
        ("tiny-llama", "auto", 2 * 2 * 2 * 32 * 4),  # float32, head_dim = 128 / 4
    ],
)
def test_kv_bytes_per_token(shape: str, kv_dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(get_shape(shape), kv_dtype) == expected


def test_dense_weights_from_the_shape() -> None:
    # Llama-3.1-8B: 8,030,261,248 parameters in bf16
    assert weight_bytes(get_shape("llama-3.1-8b")) == 2 * 8_030_261_248


def _unknown_moe(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Qwen3MoeForCausalLM"],
                "model_type": "qwen3_moe",
                "vocab_size": 100,
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "intermediate_size": 128,
            }
        )
    )
    return tmp_path


def test_an_unknown_architecture_is_not_guessed(tmp_path: Path) -> None:
    from vllm_playbooks.shapes import resolve_model

    with pytest.raises(CapacityError, match="weights are modelled for dense decoders only"):
        weight_bytes(resolve_model(str(_unknown_moe(tmp_path))))


@pytest.mark.parametrize(
    ("shape", "params", "checkpoint_bytes"),
    [  # the arithmetic in vllm_playbooks/shapes/deepseek-v3-reduced/SOURCE.md (main model + MTP module)
        ("deepseek-v3", 682_636_487_424, 684_868_123_200),
        ("deepseek-v3-reduced", 100_506_564_448, 102_501_329_856),
    ],
)
def test_deepseek_fp8_block_weights_match_the_shape_arithmetic(shape: str, params: int, checkpoint_bytes: int) -> None:
    from vllm_playbooks.config.sizes import moe_layout

    layout = moe_layout(get_shape(shape))
    assert layout.main_params() + layout.mtp_params() == params
    assert layout.checkpoint_bytes() == checkpoint_bytes


def test_deepseek_main_model_is_the_published_671b_and_v2lite_scale_the_published_15_7b() -> None:
    from vllm_playbooks.config.sizes import moe_layout

    assert moe_layout(get_shape("deepseek-v3")).main_params() == 671_026_419_200
    small = moe_layout(get_shape("deepseek-v3-v2lite-scale"))
    assert (small.main_params(), small.mtp_params()) == (15_706_485_888, 593_242_688)  # its SOURCE.md


def test_what_vllm_holds_for_the_reduced_deepseek() -> None:
    from vllm_playbooks.config.sizes import mtp_weight_bytes

    shape = get_shape("deepseek-v3-reduced")
    absorbed = 2 * 512 * 128 * 128 * 2  # W_UK and W_UV in bf16, per attention layer
    assert weight_bytes(shape) == 100_654_442_080 + 61 * absorbed  # main model, SOURCE.md
    assert mtp_weight_bytes(shape) == 1_846_887_776 + absorbed  # the module; its head is the target's lm_head
    assert (weight_bytes(shape) + mtp_weight_bytes(shape)) / 1e9 == pytest.approx(104.6, abs=0.05)  # SOURCE.md


@pytest.mark.parametrize(
    ("shape", "total_b", "active_b", "checkpoint_gib"),
    [("gpt-oss-120b", 116.8, 5.1, 60.8), ("gpt-oss-20b", 20.9, 3.6, 12.8)],  # as published for the two models
)
def test_gpt_oss_mxfp4_weights(shape: str, total_b: float, active_b: float, checkpoint_gib: float) -> None:
    from vllm_playbooks.config.sizes import moe_layout

    layout = moe_layout(get_shape(shape))
    assert layout.main_params() / 1e9 == pytest.approx(total_b, abs=0.05)
    assert layout.active_params() / 1e9 == pytest.approx(active_b, abs=0.05)
    assert weight_bytes(get_shape(shape)) / GIB == pytest.approx(checkpoint_gib, abs=0.05)


def test_linear_bytes_by_scheme() -> None:
    from vllm_playbooks.config.sizes import linear_bytes

    assert linear_bytes(256, 256, "bf16") == 2 * 65536
    assert linear_bytes(256, 200, "fp8_block") == 256 * 200 + 4 * 2 * 2  # 2 × 2 tiles of 128, the last one partial
    assert linear_bytes(64, 64, "mxfp4") == 64 * 64 // 2 + 64 * 2  # half a byte per weight, a byte per 32 inputs
    with pytest.raises(CapacityError, match="unknown weight scheme"):
        linear_bytes(1, 1, "int3")  # type: ignore[arg-type]


def _logs() -> list[Path]:
    return [log for case in sorted((DATA / "runs").iterdir()) if case.is_dir() for log in server_logs(case)]


@functools.cache
def _recorded_engines(case: str) -> dict[str, EngineConfig]:
    """The engine config of each config id with a recorded row in ``case`` (the case replayed once per session)."""
    rows = replay_rows(case, DATA)
    return {row.config_id: EngineConfig.model_validate(json.loads(row.engine_config_json)) for row in rows}


def _engine_of(log: Path) -> EngineConfig:
    """The engine config that wrote ``log``: its config's recorded rows say, else ``engine_for_log`` (the case plan)."""
    recorded = _recorded_engines(log.parent.parent.name)
    config_id = log_name_parts(log)[0]
    return recorded[config_id] if config_id in recorded else engine_for_log(log, DATA)


LOGS = _logs()


def _is_moe(log: Path) -> bool:
    return resolve_model(_engine_of(log).model).architecture in MOE_ARCHITECTURES


#: Dense targets: the activation model was fitted on one of them, and their budgets are checked to 5 %.
DENSE_LOGS = [log for log in LOGS if not _is_moe(log)]


@pytest.mark.recorded_data
def test_there_are_startup_logs() -> None:
    assert LOGS


@pytest.mark.recorded_data
@pytest.mark.parametrize("log", LOGS, ids=[p.name[:24] for p in LOGS])
def test_kv_tokens_follow_from_the_memory_vllm_left_for_them(log: Path) -> None:
    """Exact part: tokens = ⌊available / (bytes per token × 16)⌋ × 16, within 0.1 % or, for a small pool, what the
    log's rounding of the available GiB to 0.01 leaves open (0.005 GiB of tokens and one block); on gpt-oss with an
    EAGLE-3 head the bytes per token include the sliding-window layer vLLM pads in (``padded_kv_layers``)."""
    start, engine = read_startup(log), _engine_of(log)
    budget = kv_budget(engine, start.total_memory_gib)
    tokens = int(start.available_kv_gib * GIB // (budget.kv_bytes_per_token_per_gpu * BLOCK_SIZE)) * BLOCK_SIZE
    rounding = 0.005 * GIB / budget.kv_bytes_per_token_per_gpu + BLOCK_SIZE
    assert abs(tokens - start.kv_cache_tokens) <= max(1e-3 * start.kv_cache_tokens, rounding)


@pytest.mark.recorded_data
@pytest.mark.parametrize("log", DENSE_LOGS, ids=[p.name[:24] for p in DENSE_LOGS])
def test_predicted_budget_within_5_percent_of_vllm(log: Path) -> None:
    start, engine = read_startup(log), _engine_of(log)
    budget = kv_budget(engine, start.total_memory_gib)
    assert budget.kv_tokens == pytest.approx(start.kv_cache_tokens, rel=0.05)
    assert budget.max_concurrency == pytest.approx(start.max_concurrency, rel=0.05)
    assert budget.weight_bytes_per_gpu / GIB == pytest.approx(start.weights_gib, rel=0.05)  # the log is per GPU


@pytest.mark.recorded_data
@pytest.mark.parametrize("log", LOGS, ids=[p.name[:24] for p in LOGS])
def test_cudagraph_sizes_match_what_vllm_profiled(log: Path) -> None:
    text = log.read_text(errors="replace")
    engine = _engine_of(log)
    full = engine.speculative is None or engine.speculative.keeps_full_cudagraphs  # a schedule: PIECEWISE only
    sizes = cudagraph_capture_sizes(
        engine.max_num_seqs or 1024,
        engine.num_speculative_tokens,
        engine.max_num_batched_tokens or 8192,
        full_decode_graphs=full,
        model_max_capture_size=max_capture_size_of(engine.model),
    )
    # logged where vLLM estimates CUDA-graph memory; where it also names a PIECEWISE set (mixed prefill-decode
    # batches), that is the set of sizes: the FULL (decode-only) set of some attention backends stops lower
    profiled = re.search(r"PIECEWISE=(\d+) \(largest=(\d+)\)", text) or re.search(r"FULL=(\d+) \(largest=(\d+)\)", text)
    if profiled:
        assert (len(sizes), sizes[-1]) == (int(profiled.group(1)), int(profiled.group(2)))
    captured = re.search(r"Capturing CUDA graphs \(PIECEWISE\):\s+\d+%\|[^|]*\| \d+/(\d+)", text)
    if captured and not engine.speculative:
        assert len(sizes) == int(captured.group(1))


def test_cudagraph_sizes_by_hand() -> None:
    assert cudagraph_capture_sizes(256, 0)[:5] == [1, 2, 4, 8, 16]
    assert cudagraph_capture_sizes(4, 0) == [1, 2, 4, 8]  # min(4 × 1 × 2, 512) = 8
    assert cudagraph_capture_sizes(8, 3) == [4, 8, 16, 24, 32, 40, 48, 56, 64]  # multiples of 4 up to 64
    assert cudagraph_capture_sizes(256, 3)[-1] == 512
    # gpt-oss: vLLM fixes the largest size at 1024 whatever max_num_seqs is (83 graphs without speculation)
    gpt_oss = cudagraph_capture_sizes(256, 0, model_max_capture_size=max_capture_size_of("gpt-oss-120b"))
    assert len(gpt_oss) == 83 and gpt_oss[-1] == 1024 and max_capture_size_of("llama-3.1-8b") is None


@pytest.mark.parametrize(
    ("memory", "name", "context", "mode", "expected"),
    [
        (139.8, "NVIDIA H200", "server", "balanced", (8192, 1024)),
        (139.8, "NVIDIA H200", "offline", "balanced", (16384, 1024)),
        (79.2, "NVIDIA A100-SXM4-80GB", "server", "balanced", (2048, 256)),
        (79.2, "NVIDIA H100 80GB HBM3", "server", "balanced", (8192, 1024)),
        (44.4, "NVIDIA L40S", "offline", "balanced", (8192, 256)),
        (139.8, "NVIDIA H200", "server", "throughput", (16384, 2048)),
    ],
)
def test_batch_defaults(memory: float, name: str, context: str, mode: str, expected: tuple[int, int]) -> None:
    assert batch_defaults(memory, name, context, mode) == expected  # type: ignore[arg-type]


def test_which_limit_binds() -> None:
    plan = load_plan("discussion-13834", engines=["spec-off"])
    assert kv_budget(plan.engines[0], 139.8).binding == "memory"  # 256 seqs × 4096 tokens do not fit
    assert kv_budget(load_plan("llama-8b-draft-model").engines[0], 139.8).binding == "max_num_seqs"


def test_a_budget_that_cannot_fit_is_refused_before_any_gpu_time() -> None:
    with pytest.raises(CapacityError, match=r"weights \(37.0 GiB\).*exceed 0.9 × 40.0 GiB"):
        load_plan("discussion-13834", gpu_memory_gib=40)
    engine = load_plan("llama-8b-draft-model", engines=["spec-off"]).engines[0]
    budget = kv_budget(engine, 139.8)
    before_kv = budget.requested_bytes - budget.kv_bytes  # weights, activation, non-torch, CUDA graphs
    edge_gib = (before_kv + 1024 * budget.kv_bytes_per_token) / engine.gpu_memory_utilization / GIB
    with pytest.raises(CapacityError, match="fewer than one sequence of max_model_len=2048"):
        load_plan("llama-8b-draft-model", engines=["spec-off"], gpu_memory_gib=edge_gib)
    assert isinstance(CapacityError("x"), ConfigError)


def test_unknown_architectures_are_skipped_not_guessed(tmp_path: Path) -> None:

    assert not budget_is_modelled(EngineConfig(label="q", model=str(_unknown_moe(tmp_path)), max_model_len=64))
    assert budget_is_modelled(EngineConfig(label="g", model="gpt-oss-20b", max_model_len=4096))
    assert budget_is_modelled(load_plan("llama-8b-draft-model").engines[1])
    assert check_fits(load_plan("llama-8b-draft-model").engines[1], 139.8).kv_tokens > 0


def test_mtp_adds_its_modules_and_their_kv_to_the_budget() -> None:
    from vllm_playbooks.config.sizes import mtp_weight_bytes
    from vllm_playbooks.config.speculative import build_speculative_config

    base = EngineConfig(label="off", model="deepseek-v3-reduced", max_model_len=4096, max_num_seqs=128)
    mtp = base.model_copy(
        update={"speculative": build_speculative_config({"method": "mtp", "num_speculative_tokens": 1})}
    )
    off, on = kv_budget(base, 139.8), kv_budget(mtp, 139.8)
    assert on.weight_bytes - off.weight_bytes == mtp_weight_bytes(get_shape("deepseek-v3-reduced"))
    assert on.kv_bytes_per_token == off.kv_bytes_per_token * 62 // 61  # the MTP layer keeps its own MLA cache


@pytest.mark.recorded_data
def test_calculator_check_table_covers_every_log() -> None:
    table = calculator_check(DATA)
    assert len(table) == len(LOGS)
    dense, moe = table[~table.moe], table[table.moe]
    assert dense.kv_tokens_error_pct.abs().max() < 5
    # MoE targets: weights right; without the calibration the large ones' KV tokens are overstated (their activation
    # peak and CUDA-graph reserve are not in the dense estimate); the calibration brings their worst error down
    large = moe[moe.model.isin(["deepseek-v3-reduced", "gpt-oss-120b"])]
    assert set(large.model) == {"deepseek-v3-reduced", "gpt-oss-120b"}
    assert (large.kv_tokens_error_uncalibrated_pct > 4).all()
    assert large.kv_tokens_error_pct.abs().max() < large.kv_tokens_error_uncalibrated_pct.abs().max()
    assert (moe[moe.model == "deepseek-v3-v2lite-scale"].kv_tokens_error_pct.abs() < 10).all()
    assert ((table.weights_gib_ours / table.weights_gib_vllm - 1).abs() < 0.05).all()  # per GPU under TP and PP too
    # with vLLM's logged overheads in place of ours, what is left of each start-up's KV error is our weights' error
    # (in GiB, on any GPU: the same GiB are a larger share of a smaller pool), within 0.2 GiB of rounding and
    # pipeline stages; those weights lie within 1 GiB of what vLLM loaded
    assert (large.cudagraph_gib_vllm > 1).all()
    logged = table.dropna(subset=["kv_tokens_error_with_vllm_overheads_pct"])
    assert len(logged) == len(table)
    kv_error_gib = (
        logged.kv_tokens_vllm
        * logged.kv_tokens_error_with_vllm_overheads_pct
        / 100
        * logged.kv_bytes_per_token_ours
        / GIB
    )
    weights_error_gib = logged.weights_gib_ours - logged.weights_gib_vllm
    assert (kv_error_gib + weights_error_gib).abs().max() < 0.2 and weights_error_gib.abs().max() < 1.0
    note = overheads_note(table)
    assert note.startswith("**Where the MoE budgets go.** `")
    for model, rows in moe.groupby("model"):  # each MoE shape's logged activation peaks beside ours, lowest to highest
        peaks = [f"{rows[column].min():.2f}" for column in ("activation_gib_vllm", "activation_gib_ours")]
        assert f"`{model}`: KV tokens off by " in note and f"vLLM measured a {peaks[0]}" in note
        assert f"{rows.activation_gib_vllm.max():.2f} GiB activation peak against our {peaks[1]}" in note
    assert f"KV tokens of {len(table)} of the {len(table)} start-ups within " in note
    assert overheads_note(dense) == ""
    assert {(1, 2), (2, 1)} <= set(zip(table.tensor_parallel_size, table.pipeline_parallel_size, strict=True))
    graphs = table.dropna(subset=["cudagraph_gib_actual"])  # the pool vLLM logged after capture, where it did
    assert not graphs.empty and (graphs.cudagraph_gib_actual > 0).all() and graphs.cudagraph_gib_vllm.notna().all()


def test_cudagraph_reserve_note_counts_the_kv_an_overestimate_leaves_unused() -> None:
    row = {"model": "m", "engine_label": "a", "kv_bytes_per_token_ours": 2**20}  # 1 MiB per token: 1 GiB = 1,024
    table = pd.DataFrame(
        [
            {**row, "cudagraph_gib_vllm": 4.0, "cudagraph_gib_actual": 1.0},  # 3 GiB set aside and never used
            {**row, "cudagraph_gib_vllm": 4.0, "cudagraph_gib_actual": 1.0},  # the same config started again
            {**row, "engine_label": "b", "cudagraph_gib_vllm": 1.0, "cudagraph_gib_actual": 1.5},  # 0.5 GiB short
            {**row, "engine_label": "c", "cudagraph_gib_vllm": None, "cudagraph_gib_actual": None},  # not logged
        ]
    )
    note = cudagraph_reserve_note(table)
    assert "In 2 of the 3 start-ups that logged both, the estimate was more than 1 GiB too high (one config): " in note
    assert "`m` a (4.00 GiB estimated, 1.00 GiB taken: 3.00 GiB, about 3,072 KV tokens, left unused)" in note
    assert note.endswith("In 1 the estimate fell short, by up to 0.50 GiB: those graphs took more than was set aside.")
    assert cudagraph_reserve_note(table.iloc[3:]) == ""


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"max_model_len": 2048}, (8192, 1024)),
        ({"max_model_len": 4}, (4096, 1024)),  # token budget capped at 1024 × 4
        ({"max_model_len": 2048, "max_num_seqs": 2}, (4096, 2)),  # capped at 2 × 2048
        ({"max_model_len": 2048, "max_num_batched_tokens": 512}, (512, 512)),  # sequence cap follows the budget
        ({"max_model_len": 32768, "chunked_prefill": False}, (32768, 1024)),  # one whole prompt per step
        ({"max_model_len": 2048, "performance_mode": "throughput"}, (16384, 2048)),
        ({"max_model_len": 2048, "performance_mode": "throughput", "max_num_seqs": 64}, (16384, 64)),
    ],
)
def test_resolve_batching_like_vllm(kwargs: dict, expected: tuple[int, int]) -> None:  # type: ignore[type-arg]
    from vllm_playbooks.config.capacity import resolve_batching

    assert resolve_batching(gpu_memory_gib=139.8, gpu_name="NVIDIA H200", **kwargs) == expected


def test_resolve_batching_refuses_a_budget_below_the_cap() -> None:
    from vllm_playbooks.config.capacity import resolve_batching

    with pytest.raises(CapacityError, match=r"max_num_batched_tokens \(128\) < max_num_seqs \(256\)"):
        resolve_batching(2048, 139.8, max_num_seqs=256, max_num_batched_tokens=128)


# --------------------------------------------------------------------------------------------------------------------
# Tensor and pipeline parallelism: weights and KV heads split GPU by GPU, the fullest GPU sets the budget
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "expected"),
    [(32, 1, [32]), (32, 2, [16, 16]), (80, 3, [27, 27, 26]), (61, 4, [15, 15, 16, 15]), (5, 3, [2, 2, 1])],
)
def test_pp_layer_partition_like_vllm(layers: int, pp: int, expected: list[int]) -> None:
    from vllm_playbooks.config.parallel_sizes import pp_layer_partition

    assert pp_layer_partition(layers, pp) == expected


def test_more_stages_than_layers_is_refused() -> None:
    from vllm_playbooks.config.parallel_sizes import pp_layer_partition

    with pytest.raises(CapacityError, match="between 1 and the model's 2 layers, got 3"):
        pp_layer_partition(2, 3)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.2-1b", "llama-3.3-70b", "llama-3.3-70b-awq", "tiny-llama"])
def test_one_stage_on_one_gpu_holds_every_weight(name: str) -> None:
    from vllm_playbooks.config.parallel_sizes import stage_weight_bytes

    shape = get_shape(name)
    assert stage_weight_bytes(shape) == [pytest.approx(weight_bytes(shape), abs=1)]


def test_pipeline_stages_split_the_layers_embedding_first_head_last() -> None:
    from vllm_playbooks.config.parallel_sizes import stage_weight_bytes

    shape = get_shape("llama-3.3-70b")  # untied: the embedding and the LM head are separate 128256 × 8192 tables
    first, last = stage_weight_bytes(shape, pipeline_parallel_size=2)
    table, norm = 128256 * 8192 * 2, 8192 * 2
    assert first + last == pytest.approx(weight_bytes(shape), abs=2)
    assert last - first == pytest.approx(norm, abs=2)  # same 40 layers and one table each; the final norm is last's
    assert first > weight_bytes(shape) / 2 - table


def test_tied_embeddings_are_held_twice_across_stages() -> None:
    from vllm_playbooks.config.parallel_sizes import stage_weight_bytes

    shape = get_shape("llama-3.2-1b")  # tie_word_embeddings: one table on one GPU, a copy on the last stage with PP
    table = shape.vocab_size * shape.hidden_size * 2
    assert sum(stage_weight_bytes(shape, pipeline_parallel_size=2)) == pytest.approx(weight_bytes(shape) + table, abs=2)


def test_tensor_parallelism_halves_all_but_the_norms() -> None:
    from vllm_playbooks.config.parallel_sizes import stage_weight_bytes

    shape = get_shape("llama-3.1-8b")
    norms = (2 * 32 + 1) * 4096 * 2
    assert stage_weight_bytes(shape, tensor_parallel_size=2) == [
        pytest.approx((weight_bytes(shape) - norms) / 2 + norms, abs=1)
    ]


@pytest.mark.parametrize(("tp", "heads"), [(1, 8), (2, 4), (8, 1), (16, 1)])
def test_kv_heads_per_gpu_like_vllm(tp: int, heads: int) -> None:
    from vllm_playbooks.config.parallel_sizes import kv_bytes_per_token_per_gpu, kv_heads_per_gpu

    shape = get_shape("llama-3.1-8b")
    assert kv_heads_per_gpu(shape, tp) == heads  # max(1, 8 // TP): replicas beyond 8 GPUs
    assert kv_bytes_per_token_per_gpu(shape, "auto", tp) == 2 * 32 * heads * 128 * 2
    assert kv_bytes_per_token_per_gpu(get_shape("deepseek-v3"), "auto", tp) == 61 * (512 + 64) * 2  # MLA: not split


def _engine(model: str, tp: int = 1, pp: int = 1):  # type: ignore[no-untyped-def]

    return EngineConfig(
        label="x",
        model=model,
        max_model_len=1024,
        max_num_seqs=256,
        max_num_batched_tokens=8192,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
    )


@pytest.mark.parametrize(("tp", "pp"), [(2, 1), (1, 2)])
def test_two_gpus_hold_more_than_twice_the_kv_of_one(tp: int, pp: int) -> None:
    one, two = kv_budget(_engine("llama-3.1-8b"), 139.8), kv_budget(_engine("llama-3.1-8b", tp, pp), 139.8)
    assert two.gpus == 2 and two.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu // 2 == 64 * 1024
    assert two.weight_bytes == one.weight_bytes and two.weight_bytes_per_gpu == pytest.approx(
        one.weight_bytes / 2, rel=0.01
    )
    # each GPU frees half the weights for KV and keeps half of each token: more than twice the tokens
    assert two.kv_tokens > 2 * one.kv_tokens
    assert two.kv_tokens == (two.kv_bytes // (64 * 1024 * BLOCK_SIZE)) * BLOCK_SIZE


def test_70b_bf16_needs_two_h200s() -> None:
    with pytest.raises(CapacityError, match=r"weights \(131.4 GiB\), activations .* exceed 0.9 × 139.8 GiB per GPU"):
        check_fits(_engine("llama-3.3-70b"), 139.8)
    for tp, pp in [(2, 1), (1, 2)]:
        budget = check_fits(_engine("llama-3.3-70b", tp, pp), 139.8)
        assert budget.weight_bytes_per_gpu / GIB == pytest.approx(65.7, abs=0.05)
        assert budget.kv_tokens > 256 * 1024  # max_num_seqs=256 sequences of 1024 tokens fit: the cap binds
        assert budget.binding == "max_num_seqs"


def test_the_error_names_the_fullest_gpu_when_split() -> None:
    with pytest.raises(CapacityError, match=r"weights \(65.7 GiB on the fullest of 2 GPUs, 131.4 GiB in all\)"):
        check_fits(_engine("llama-3.3-70b", 1, 2), 70.0)


def test_uneven_stages_the_fullest_sets_the_budget() -> None:
    from vllm_playbooks.config.parallel_sizes import kv_bytes_per_token_per_gpu

    budget = kv_budget(_engine("llama-3.3-70b", 1, 3), 139.8)  # 80 layers → 27, 27, 26
    assert budget.kv_bytes_per_token_per_gpu == kv_bytes_per_token_per_gpu(get_shape("llama-3.3-70b"), "auto", 1, 27)


#: Three of the recorded #27462 server logs, frozen (``tests/fixtures/recorded/README.md``).
PP_LOGS = FROZEN / "runs" / "pp-27462" / "logs"


def test_a_server_stopped_during_start_up_is_kept_but_left_out_of_the_checks() -> None:
    """The session's time limit stopped this PP=2 server before its KV cache was allocated: its log stays as the
    record of the attempt, and no start-up check reads it; the server started again a minute later, and the others
    copied beside it, started."""
    stopped = PP_LOGS / "8b-pp2-mns256-81631b9c80-2026-11-30T141113+0000.log.gz"
    assert unstarted_server_logs(PP_LOGS.parent) == [stopped] and stopped not in server_logs(PP_LOGS.parent)
    assert not has_started(stopped)
    with pytest.raises(SchemaError, match="did the server start"):
        read_startup(stopped)
    restarted = PP_LOGS / "8b-pp2-mns256-81631b9c80-2026-11-30T141220+0000.log.gz"
    started = sorted(log for log in PP_LOGS.glob("*.log.gz") if log != stopped)
    assert len(started) == 4 and restarted in started and all(has_started(log) for log in started)
    assert server_logs(PP_LOGS.parent) == started


def test_a_started_server_without_a_finished_point_gets_its_engine_from_the_case_plan() -> None:
    log = PP_LOGS / "8b-tp2-mns128-b1ccc4b388-2026-11-30T141812+0000.log.gz"
    assert "8b-tp2-mns128" not in {row.engine_label for row in replay_rows("pp-27462", FROZEN)}
    engine = engine_for_log(log, FROZEN)
    assert (engine.label, engine.tensor_parallel_size, engine.max_num_seqs) == ("8b-tp2-mns128", 2, 128)


@pytest.mark.parametrize(
    ("layers", "allocated"),
    [
        ({"full_attention": 32}, 32),  # one attention type: no padding
        ({"sliding_attention": 18, "full_attention": 18}, 36),  # gpt-oss-120b
        ({"sliding_attention": 18, "full_attention": 19}, 38),  # gpt-oss-120b + an EAGLE-3 head: one sliding pad
        ({"sliding_attention": 12, "full_attention": 13}, 26),  # vLLM's own example, gpt-oss-20b + EAGLE
        ({"sliding_attention": 25, "full_attention": 5}, 30),  # 5:1 (Gemma 3): groups of 5, none padded
        ({"full_attention": 20, "sliding_attention": 30}, 60),  # 30 >= 1.5 x 20: groups of 20, 10 sliding pads
    ],
)
def test_hybrid_attention_layers_are_padded_into_equal_groups(layers: dict[str, int], allocated: int) -> None:
    from vllm_playbooks.config.sizes import kv_layers_per_stage, padded_kv_layers

    assert padded_kv_layers(layers) == allocated
    assert kv_layers_per_stage([[kind for kind, n in layers.items() for _ in range(n)]]) == [allocated]


@pytest.mark.parametrize(
    ("stages", "allocated"),
    [
        # vLLM's own example: 2 full + 4 sliding make 3 groups; dealt in turn, each stage holds one layer of each
        ([["full", "sw", "sw"], ["full", "sw", "sw"]], [3, 3]),
        # gpt-oss-120b (alternating) on two stages, an EAGLE-3 head on the last: 18 sliding + 19 full, one group each
        ([["sw", "full"] * 9, ["sw", "full"] * 9 + ["full"]], [18, 20]),
        # 5 sliding : 1 full (Gemma 3's pattern), 30 layers over two stages: 6 groups of 5, filled unevenly
        ([(["sw"] * 5 + ["full"]) * 2 + ["sw"] * 3, ["sw"] * 2 + ["full"] + (["sw"] * 5 + ["full"]) * 2], [18, 18]),
        ([["full"] * 16, ["full"] * 16], [16, 16]),  # one attention type: each stage its own layers
    ],
)
def test_pipeline_stages_share_the_whole_models_kv_groups(stages: list[list[str]], allocated: list[int]) -> None:
    from vllm_playbooks.config.sizes import kv_layers_per_stage

    assert kv_layers_per_stage(stages) == allocated


def test_a_dense_hybrid_model_on_three_stages_allocates_its_fullest_stage(tmp_path: Path) -> None:
    # Llama-3.1-8B's layout with alternating sliding and full layers, over PP = 3 (11 + 11 + 10 layers): the first
    # two stages hold 6 of one type and 5 of the other, so each allocates 2 x 6 layers per token
    from vllm_playbooks.shapes import get_shape

    config = get_shape("llama-3.1-8b").config()
    config |= {"layer_types": ["sliding_attention", "full_attention"] * 16, "sliding_window": 4096}
    (tmp_path / "config.json").write_text(json.dumps(config))
    engine = EngineConfig(label="pp3", model=str(tmp_path), max_model_len=4096, pipeline_parallel_size=3)
    one_layer = kv_budget(engine.model_copy(update={"pipeline_parallel_size": 1}), 139.8).kv_bytes_per_token // 32
    assert kv_budget(engine, 139.8).kv_bytes_per_token_per_gpu == 12 * one_layer


def test_an_eagle3_head_on_gpt_oss_costs_two_layers_of_kv() -> None:
    from vllm_playbooks.config.speculative import build_speculative_config

    base = EngineConfig(label="off", model="gpt-oss-120b", max_model_len=4096, max_num_seqs=128)
    head = build_speculative_config({"method": "eagle3", "model": "gpt-oss-120b-eagle3", "num_speculative_tokens": 3})
    off, on = kv_budget(base, 139.8), kv_budget(base.model_copy(update={"speculative": head}), 139.8)
    layer = off.kv_bytes_per_token // 36
    # the head's own full-attention layer, and the sliding-window layer vLLM pads in to keep groups equal
    assert on.kv_bytes_per_token - off.kv_bytes_per_token == 2 * layer


def test_a_grid_with_a_config_too_big_for_the_gpu_is_refused_naming_the_ones_that_fit() -> None:
    small, big, bigger = (
        _engine("llama-3.1-8b").model_copy(update={"label": "8b"}),
        _engine("llama-3.3-70b").model_copy(update={"label": "70b"}),
        _engine("llama-3.3-70b").model_copy(update={"label": "70b-again"}),
    )
    refused = refused_engines([small, big, bigger], 80.0)
    assert list(refused) == ["70b", "70b-again"] and refused["70b"].startswith("engine 70b: weights (131.4 GiB)")
    assert refused_engines([small, big], 200.0) == {}
    error = refusal(refused, [small, big, bigger])
    assert isinstance(error, CapacityError) and str(error).startswith(refused["70b"])
    assert "Also refused there: 70b-again." in str(error)
    assert str(error).endswith("to measure only them, pass --engines 8b (in a notebook, engines=['8b']).")
    alone = str(refusal({"70b": refused["70b"]}, [big]))
    assert alone == refused["70b"]  # nothing else to offer
