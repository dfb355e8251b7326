"""The next repeat of a recorded point: one past its highest repeat folder, counting only that exact load's folders."""

from __future__ import annotations

from pathlib import Path

from vllm_playbooks.results import raw


def test_the_next_repeat_counts_only_point_folders_of_exactly_that_load(tmp_path: Path) -> None:
    config = tmp_path / "raw" / "nvidia-h200-x1-vllm0.26.0" / "spec-off-2c16c75680"
    assert raw.next_repeat(config, "in512-out128-c1") == 0  # no folder yet
    for name in ("in512-out128-c1-r0", "in512-out128-c1-r2", "in512-out128-c16-r7", ".in512-out128-c1-r5"):
        (config / name).mkdir(parents=True)
    (config / f"in512-out128-c1-r3{raw.FAILURE_SUFFIX}").write_text("{}")  # a failure kept beside the points
    assert raw.next_repeat(config, "in512-out128-c1") == 3  # past r2; c16, the failure file and the dot folder aside
    assert raw.next_repeat(config, "in512-out128-c16") == 8
    assert raw.next_repeat(config, "in512-out128-c4") == 0
