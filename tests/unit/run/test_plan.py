"""Case plans and engine configs: the argv a server gets, and every bad input refused before GPU time."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pytest

from vllm_playbooks.config.case_file import grid_names
from vllm_playbooks.config.engine import EngineConfig, check_engine_against_shapes, cudagraph_mode_forced_by
from vllm_playbooks.config.speculative import build_speculative_config
from vllm_playbooks.errors import ConfigError
from vllm_playbooks.run.plan import load_plan, plan_from_dict
from vllm_playbooks.shapes import SHAPES_DIR, TOKENIZER_DIR, VLLM_NAME_MARKERS


def test_shipped_cases_load() -> None:
    assert {"llama-8b-draft-model", "discussion-13834"} <= set(grid_names())
    plan = load_plan("llama-8b-draft-model")
    assert [e.label for e in plan.engines] == ["spec-off", "draft-1b-k4-a0.8", "draft-1b-k4-a0.8-async"]
    assert [load.concurrency for load in plan.loads] == [1, 4, 16, 64]
    assert len(plan.points()) == 12
    assert "--async-scheduling" in plan.engines[2].server_argv("127.0.0.1", 8000)


def test_server_argv_is_a_list_bound_to_loopback() -> None:
    engine = load_plan("llama-8b-draft-model").engines[1]
    argv = engine.server_argv("127.0.0.1", 8123, python="/usr/bin/python3")
    assert argv[:3] == ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1" and argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--tokenizer") + 1] == str(TOKENIZER_DIR)
    assert argv[argv.index("--load-format") + 1] == "dummy"
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["method"] == "draft_model" and Path(spec["model"]).name == "llama-3.2-1b"
    for served in (argv[argv.index("--model") + 1], spec["model"]):  # links outside the checkout, to the shapes
        assert Path(served).resolve().parent == SHAPES_DIR.resolve()
        assert not any(marker in served.lower() for marker in VLLM_NAME_MARKERS)
    assert spec["synthetic_acceptance_rates"] == pytest.approx([0.8, 0.64, 0.512, 0.4096])


def test_real_weights_use_the_models_own_tokenizer(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "vocab_size": 32000,
                "num_hidden_layers": 2,
                "hidden_size": 128,
            }
        )
    )
    engine = EngineConfig(label="mine", model=str(tmp_path), load_format="auto", max_model_len=256)
    argv = engine.server_argv("127.0.0.1", 1)
    assert "--tokenizer" not in argv and argv[argv.index("--model") + 1] == str(tmp_path.resolve())


def test_config_id_ignores_the_label_but_not_the_config() -> None:
    a = EngineConfig(label="a", model="llama-3.1-8b", max_model_len=2048)
    b = EngineConfig(label="b", model="llama-3.1-8b", max_model_len=2048)
    c = EngineConfig(label="a", model="llama-3.1-8b", max_model_len=4096)
    assert a.config_id().split("-")[-1] == b.config_id().split("-")[-1]
    assert a.config_id() != c.config_id()


def _engine(**kwargs: Any) -> EngineConfig:
    spec = kwargs.pop("speculative", None)
    return EngineConfig(label="x", max_model_len=2048, speculative=build_speculative_config(spec), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"model": "llama-70b"}, "'llama-70b' is neither a known shape nor an existing directory"),
        (
            {"model": "llama-3.1-8b", "speculative": {"method": "mtp", "num_speculative_tokens": 1}},
            "needs a target with MTP layers",
        ),
        (
            {
                "model": "llama-3.1-8b",
                "speculative": {"method": "draft_model", "model": "gpt-oss-20b", "num_speculative_tokens": 2},
            },
            "needs the target's vocabulary",
        ),
        (
            {
                "model": "llama-3.1-8b",
                "speculative": {"method": "draft_model", "model": "no-such-draft", "num_speculative_tokens": 2},
            },
            "'no-such-draft' is neither a known shape",
        ),
    ],
)
def test_shape_checks(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        check_engine_against_shapes(_engine(**kwargs))


def test_mtp_k_must_divide_by_the_layer_count(tmp_path: Path) -> None:
    config = json.loads(
        (Path(__file__).resolve().parents[3] / "vllm_playbooks/shapes/deepseek-v3/config.json").read_text()
    )
    config["num_nextn_predict_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(config))
    ok = _engine(model=str(tmp_path), speculative={"method": "mtp", "num_speculative_tokens": 4})
    check_engine_against_shapes(ok)
    bad = _engine(model=str(tmp_path), speculative={"method": "mtp", "num_speculative_tokens": 3})
    with pytest.raises(ConfigError, match="divisible by the MTP layer count 2"):
        check_engine_against_shapes(bad)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        (
            {
                "tensor_parallel_size": 4,
                "speculative": {
                    "method": "draft_model",
                    "model": "llama-3.2-1b",
                    "num_speculative_tokens": 2,
                    "draft_tensor_parallel_size": 2,
                },
            },
            "must be 1 or the target's",
        ),
        ({"max_num_seqs": 256, "max_num_batched_tokens": 128}, "max_num_batched_tokens (128) < max_num_seqs (256)"),
        ({"extra_args": ("--port", "1")}, "extra_args may not set --port"),
        ({"extra_args": ("--compilation-config", "{cudagraph_mode: PIECEWISE}")}, "is not JSON"),
        ({"extra_args": ("--compilation-config",)}, "--compilation-config needs a JSON object after it"),
        ({"extra_args": ('-cc=["PIECEWISE"]',)}, "vLLM takes a JSON object"),
        ({"extra_args": ("-cc", '{"cudagraph_mode": "PIECE"}')}, "cudagraph_mode 'PIECE' is not one of vLLM 0.26's"),
        ({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
        ({"load_format": "gguf"}, "load_format"),
    ],
)
def test_engine_config_refusals(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        _engine(model="llama-3.1-8b", **kwargs)


@pytest.mark.parametrize(
    ("extra_args", "mode"),
    [
        ((), None),
        (("--async-scheduling",), None),
        (("--compilation-config", '{"cudagraph_mode": "piecewise"}'), "PIECEWISE"),
        (('--compilation-config={"cudagraph_mode": "FULL_DECODE_ONLY"}', "--async-scheduling"), "FULL_DECODE_ONLY"),
        (("-cc", '{"cudagraph_mode": "FULL"}', "-cc", '{"cudagraph_mode": "NONE"}'), "NONE"),  # the last one counts
        (("--compilation-config", '{"mode": 3}'), None),  # a compilation config that leaves the graph mode to vLLM
    ],
)
def test_the_cudagraph_mode_extra_args_force(extra_args: tuple[str, ...], mode: str | None) -> None:
    engine = _engine(model="llama-3.1-8b", extra_args=extra_args)
    assert cudagraph_mode_forced_by(engine.extra_args) == mode


def test_overrides_apply_and_unknown_ones_are_refused() -> None:
    plan = load_plan("llama-8b-draft-model", concurrency=[2], engines=["spec-off"], min_duration_s=5)
    assert [e.label for e in plan.engines] == ["spec-off"] and [l.concurrency for l in plan.loads] == [2]
    assert plan.min_duration_s == 5
    with pytest.raises(ConfigError, match=r"unknown override\(s\) \['colour'\]"):
        load_plan("llama-8b-draft-model", colour="blue")
    with pytest.raises(ConfigError, match="no engine config named"):
        load_plan("llama-8b-draft-model", engines=["turbo"])
    with pytest.raises(ConfigError, match="Unknown case 'nope'"):
        load_plan("nope")


def test_draft_override_replaces_the_draft_only() -> None:
    plan = load_plan("llama-8b-draft-model", draft_model="llama-3.2-3b")
    assert plan.engines[0].speculative is None
    assert plan.engines[1].speculative is not None and plan.engines[1].speculative.model == "llama-3.2-3b"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"loads": {"input_len": 2000, "output_len": 128, "concurrency": [1]}}, "exceeds max_model_len 2048"),
        ({"loads": {"input_len": 8, "output_len": 8}}, "need a concurrency list"),
        ({"loads": {"input_len": 8, "output_len": 8, "concurrency": [0]}}, "bad load"),
        ({"loads": {"input_len": 8, "output_len": 8, "concurrency": [1], "qps": [1]}}, "unknown load keys"),
        ({"repeats": 0}, "repeats must be a whole number from 1"),
        ({"surprise": 1}, "unknown keys"),
        (
            {
                "engines": [
                    {
                        "label": "x",
                        "model": "llama-3.1-8b",
                        "max_model_len": 2048,
                        "speculative": {"method": "ngram", "num_speculative_tokens": 2, "temperature": 0.5},
                    }
                ]
            },
            "sampling parameters",
        ),
        (
            {"engines": [{"label": "x", "model": "llama-3.1-8b", "max_model_len": 2048, "max_num_seqs": 0}]},
            "max_num_seqs",
        ),
    ],
)
def test_bad_plans_are_refused_before_any_gpu_time(change: dict[str, Any], expected: str) -> None:
    spec: dict[str, Any] = {
        "case": "t",
        "engines": [{"label": "x", "model": "llama-3.1-8b", "max_model_len": 2048}],
        "loads": {"input_len": 8, "output_len": 8, "concurrency": [1]},
        **change,
    }
    with pytest.raises(ConfigError, match=expected):
        plan_from_dict(spec)


def _two_engine_spec(**load: Any) -> dict[str, Any]:
    return {
        "case": "t",
        "engine_defaults": {"model": "llama-3.1-8b", "max_model_len": 2048},
        "engines": [{"label": "a", "max_num_seqs": 32, "concurrency": 64}, {"label": "b", "max_num_seqs": 64}],
        "loads": {"input_len": 8, "output_len": 8, **load},
    }


def test_an_engine_can_carry_its_own_concurrency() -> None:
    plan = plan_from_dict(_two_engine_spec(concurrency=[1, 2]))
    a, b = plan.engines
    assert [l.concurrency for l in plan.loads_for(a)] == [64] and [l.concurrency for l in plan.loads_for(b)] == [1, 2]
    assert [p.point_id.split("/")[1] for p in plan.points()] == [
        "in8-out8-rr0.5-c64-r0",
        "in8-out8-rr0.5-c1-r0",
        "in8-out8-rr0.5-c2-r0",
    ]
    assert "concurrency" not in a.resolved()  # a load level, not part of the engine's config or its id


def test_a_concurrency_override_replaces_the_engines_own() -> None:
    plan = plan_from_dict(_two_engine_spec(concurrency=[1]), concurrency=[512])
    assert [p.load.concurrency for p in plan.points()] == [512, 512]
    rate = plan_from_dict(_two_engine_spec(concurrency=[1]), request_rate_qps=[2.0])
    assert [(p.load.concurrency, p.load.request_rate_qps) for p in rate.points()] == [(None, 2.0), (None, 2.0)]


def test_case_levels_may_be_left_out_when_every_engine_has_its_own() -> None:
    spec = _two_engine_spec()
    spec["engines"][1]["concurrency"] = [128, 256]
    plan = plan_from_dict(spec)
    assert plan.loads == () and [p.load.concurrency for p in plan.points()] == [64, 128, 256]
    with pytest.raises(ConfigError, match="need a concurrency list"):
        plan_from_dict(_two_engine_spec())  # engine b has none and the case gives none


def test_engine_levels_are_checked_like_the_case_levels() -> None:
    spec = _two_engine_spec(concurrency=[1])
    spec["engines"][0]["concurrency"] = [0]
    with pytest.raises(ConfigError, match="bad load"):
        plan_from_dict(spec)
    spec = _two_engine_spec(concurrency=[1])
    spec["engines"][1]["label"] = "a"
    with pytest.raises(ConfigError, match=r"engine labels must be unique; repeated: \['a'\]"):
        plan_from_dict(spec)


def _moe_plan(**engine: Any) -> dict[str, Any]:
    return {
        "case": "t",
        "engine_defaults": {
            "model": "deepseek-v3-reduced",
            "max_model_len": 2048,
            "env": {"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "uniform_random", "A": "1"},
        },
        "engines": [{"label": "x", **engine}],
        "loads": {"input_len": 8, "output_len": 8, "concurrency": [1]},
    }


def test_an_engine_env_adds_to_the_defaults_env() -> None:
    plan = plan_from_dict(_moe_plan(env={"B": "2", "A": "3"}))
    assert plan.engines[0].env == {"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "uniform_random", "A": "3", "B": "2"}
    assert plan_from_dict(_moe_plan()).engines[0].env["A"] == "1"


def test_env_is_part_of_the_config_id() -> None:
    a = plan_from_dict(_moe_plan()).engines[0]
    b = plan_from_dict(_moe_plan(env={"B": "2"})).engines[0]
    assert a.config_id() != b.config_id()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"1BAD": "x"}, "env names must be shell variable names"),
        ({"VLLM_MOE_ROUTING_SIMULATION_STRATEGY": "random"}, "vLLM 0.26 knows uniform_random, normal_routing"),
    ],
)
def test_bad_env_is_refused(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ValueError, match=expected):
        EngineConfig(label="x", model="llama-3.1-8b", max_model_len=2048, env=env)


def test_a_dummy_moe_engine_without_routing_simulation_is_refused() -> None:
    spec = _moe_plan()
    spec["engine_defaults"]["env"] = {}
    with pytest.raises(ConfigError, match="set env {VLLM_MOE_ROUTING_SIMULATION_STRATEGY: uniform_random}"):
        plan_from_dict(spec)
    assert plan_from_dict(spec, load_format="auto").engines[0].env == {}  # real weights route with their own router


def _profiles_plan(loads: Any) -> dict[str, Any]:
    return {"case": "t", "engines": [{"label": "x", "model": "llama-3.1-8b", "max_model_len": 2048}], "loads": loads}


def test_named_load_profiles_are_selected_and_deduplicated() -> None:
    loads = [
        {"profile": "a", "input_len": 8, "output_len": 8, "concurrency": [1, 2]},
        {"profile": "b", "input_len": 16, "output_len": 8, "concurrency": [1]},
    ]
    plan = plan_from_dict(_profiles_plan(loads))
    assert [(plan.profile_of(l), l.concurrency) for l in plan.loads] == [("a", 1), ("a", 2), ("b", 1)]
    only_b = plan_from_dict(_profiles_plan(loads), profiles=["b"])
    assert [l.input_len for l in only_b.loads] == [16] and only_b.profiles == (("b", 16, 8),)
    assert [l.concurrency for l in plan_from_dict(_profiles_plan(loads), concurrency=[4]).loads] == [4, 4]
    with pytest.raises(ConfigError, match="no load profile named \\['c'\\]"):
        plan_from_dict(_profiles_plan(loads), profiles=["c"])
    with pytest.raises(ConfigError, match="same input and output lengths"):
        plan_from_dict(_profiles_plan(loads), input_len=8)
    with pytest.raises(ConfigError, match="distinct 'profile' name"):
        plan_from_dict(_profiles_plan([{**loads[0], "profile": None}, loads[1]]))
    assert plan_from_dict(_profiles_plan(loads[0])).profile_of(plan_from_dict(_profiles_plan(loads[0])).loads[0]) == "a"


def test_notebook_overrides_start_from_a_part() -> None:
    from vllm_playbooks.run.plan import overrides_for

    assert overrides_for("deepseek-mtp", "1-verdict", engines=None, concurrency=None) == {
        "engines": ["spec-off", "mtp-k1-a0.85"],
        "request_rate_qps": [1, 2, 4, 8],
    }
    assert overrides_for("deepseek-mtp", "1-verdict", engines=["spec-off"])["engines"] == ["spec-off"]
    assert overrides_for("deepseek-mtp", None, gpu_memory_gib=80) == {"gpu_memory_gib": 80}
    with pytest.raises(ConfigError, match="no part 'x'"):
        overrides_for("deepseek-mtp", "x")


@pytest.mark.parametrize(
    "case", ["llama-8b-draft-model", "load-desync", "discussion-13834", "gpt-oss-eagle3", "deepseek-mtp", "pp-27462"]
)
def test_every_case_has_a_quick_check_with_the_repeats_a_difference_needs(case: str) -> None:
    from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS
    from vllm_playbooks.run.plan import QUICK_PART, case_parts, load_part, part_note

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quick = load_part(case, QUICK_PART)
        grid = load_plan(case)
    assert quick.repeats == MIN_CLEAN_REPEATS
    assert len(quick.engines) >= 2  # a comparison: a few of the grid's points, none of its own
    assert {(p.engine.label, p.load) for p in quick.points()} < {(p.engine.label, p.load) for p in grid.points()}
    assert QUICK_PART not in dict(case_parts(case))  # it overlaps the grid: not one of the parts that cover it
    note = part_note(case, QUICK_PART)
    assert note and "On a slower GPU" in note and f"--case {case} --part quick --fresh" in note
    assert ("two GPUs" in note) == any(e.tensor_parallel_size * e.pipeline_parallel_size > 1 for e in quick.engines)


def test_the_llama_quick_check_pairs_both_drafts_with_spec_off_at_1_and_16() -> None:
    from vllm_playbooks.run.plan import load_part, part_overrides

    assert part_overrides("llama-8b-draft-model", "quick") == {
        "engines": ["spec-off", "draft-1b-k4-a0.8", "draft-1b-k4-a0.8-async"],
        "concurrency": [1, 16],
        "repeats": 3,
        "paired": True,
    }
    assert len(load_part("llama-8b-draft-model", "quick").points()) == 18
    assert part_overrides("llama-8b-draft-model", "all") == {}
    with pytest.raises(ConfigError, match="no part 'x'; known: all, quick"):
        part_overrides("llama-8b-draft-model", "x")


def test_a_part_note_is_not_an_override(tmp_path: Path) -> None:
    from vllm_playbooks.run.plan import case_parts, part_note

    own = tmp_path / "own.yaml"
    own.write_text(
        "case: own\nengines: [{label: a, model: llama-3.1-8b}]\nloads: {concurrency: [1]}\n"
        "parts:\n  - {name: one, engines: [a], note: just a}\n  - {name: two}\n"
    )
    assert case_parts(str(own)) == [("one", {"engines": ["a"]}), ("two", {})]
    assert part_note(str(own), "one") == "just a" and part_note(str(own), "two") is None


def test_a_deciding_part_measures_claims_of_its_case_three_times_off_the_grid() -> None:
    from vllm_playbooks.analysis.noise import MIN_CLEAN_REPEATS
    from vllm_playbooks.claims.loading import load_claims
    from vllm_playbooks.run.deciding import deciding_part, deciding_points
    from vllm_playbooks.run.plan import case_parts, load_part, named_parts

    claims = {claim.claim_id: claim for claim in load_claims()}
    decided = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in grid_names():
            for part in named_parts(case):
                if not part.decides:
                    continue
                assert not part.covers_grid and part.name not in dict(case_parts(case))
                plan = load_part(case, part.name)
                assert plan.repeats >= MIN_CLEAN_REPEATS and len(plan.engines) >= 2, part.name
                for claim_id in part.decides:
                    assert claims[claim_id].case == case and deciding_part(case, claim_id) == part.name
                    earlier = (
                        load_part(case, part.name, engines=list(part.earlier_engines)).points()
                        if part.earlier_engines
                        else []
                    )
                    assert deciding_points(case, claim_id) == {
                        (p.engine.label, p.load.slug()) for p in [*plan.points(), *earlier]
                    }
                    decided.append(claim_id)
    assert len(decided) == len(set(decided)) >= 5  # one part per claim
    assert deciding_part("rules-of-thumb", "rule-acceptance-bands") is None  # no grid: all its rows decide
    assert deciding_points("gpt-oss-eagle3", "no-such-claim") is None


def test_a_part_decides_a_list_of_claim_ids(tmp_path: Path) -> None:
    from vllm_playbooks.run.plan import case_parts, named_parts

    own = tmp_path / "own.yaml"
    own.write_text(
        "case: own\nengines: [{label: a, model: llama-3.1-8b}]\nloads: {concurrency: [1]}\n"
        "parts:\n  - {name: one, engines: [a]}\n  - {name: check, decides: [claim-a], repeats: 3}\n"
    )
    assert [part.decides for part in named_parts(str(own))] == [(), ("claim-a",)]
    assert case_parts(str(own)) == [("one", {"engines": ["a"]})]
    own.write_text(
        "case: own\nengines: [{label: a, model: llama-3.1-8b}]\nloads: {concurrency: [1]}\n"
        "parts:\n  - {name: check, decides: claim-a}\n"
    )
    with pytest.raises(ConfigError, match="part check: 'decides' is a list of claim ids, got 'claim-a'"):
        named_parts(str(own))


def test_a_deciding_part_may_name_an_earlier_shapes_engines(tmp_path: Path) -> None:
    """Its claims rest on its own points and on the earlier engines' rows at its loads; running it runs its own."""
    from vllm_playbooks.run.plan import load_part, named_parts

    own = tmp_path / "own.yaml"
    own.write_text(
        "case: own\nengine_defaults: {max_model_len: 1024}\n"
        "engines: [{label: old, model: llama-3.1-8b}, {label: new, model: llama-3.2-1b}]\n"
        "loads: {input_len: 8, output_len: 8, concurrency: [1, 4]}\nparts:\n  - {name: all}\n"
        "  - {name: check, engines: [new], concurrency: [1], earlier_engines: [old], repeats: 3}\n"
    )
    assert named_parts(str(own))[1].earlier_engines == ("old",)
    assert [p.engine.label for p in load_part(str(own), "check").points()] == ["new"] * 3
    own.write_text(
        own.read_text()
        .replace("repeats: 3}", "repeats: 3, earlier_engines: old}")
        .replace("earlier_engines: [old], ", "")
    )
    with pytest.raises(ConfigError, match="part check: 'earlier_engines' is a list of engine labels, got 'old'"):
        named_parts(str(own))


def test_lists_given_as_text_are_read() -> None:
    from vllm_playbooks.run.plan import overrides_for, text_list

    assert text_list("concurrency", "[1, 16]") == [1, 16] and text_list("engines", "spec-off") == "spec-off"
    assert text_list("concurrency", 4) == 4
    assert overrides_for("llama-8b-draft-model", None, concurrency="[1, 16]", engines='["spec-off"]', model="[x]") == {
        "concurrency": [1, 16],
        "engines": ["spec-off"],
        "model": "[x]",
    }
    with pytest.raises(ConfigError, match="parameter concurrency: cannot read"):
        text_list("concurrency", "[1, 16")
