"""Recorded scrapes and logs kept gzip-compressed: read by their plain names, written deterministically, never twice."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_playbooks import cli, paths
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.results import raw
from vllm_playbooks.results.server_logs import server_log_files
from vllm_playbooks.results.textfiles import compress_file, compress_tree, plain_name, read_text, stored_path

TEXT = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3.0\n" * 50 + "ünïcode\n"


def test_a_compressed_file_reads_back_by_its_plain_name(tmp_path: Path) -> None:
    plain = tmp_path / "metrics_after.prom"
    plain.write_text(TEXT, encoding="utf-8")
    assert read_text(plain) == TEXT and stored_path(plain) == plain
    stored = compress_file(plain)
    assert stored.name == "metrics_after.prom.gz" and not plain.exists()
    assert stored.stat().st_size < len(TEXT.encode()) / 10
    assert read_text(plain) == read_text(stored) == TEXT
    assert stored_path(plain) == stored and plain_name(stored) == "metrics_after.prom"


def test_compression_is_deterministic_and_refuses_a_second_copy(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "x.log", tmp_path / "b" / "x.log"
    for path in (first, second):
        path.parent.mkdir()
        path.write_text(TEXT, encoding="utf-8")
    assert compress_file(first).read_bytes() == compress_file(second).read_bytes()
    first.write_text("a later log of the same name", encoding="utf-8")
    with pytest.raises(SchemaError, match="one form only"):
        compress_file(first)
    assert first.exists() and read_text(first.with_name("x.log.gz")) == TEXT  # nothing lost


def test_a_missing_recorded_file_is_one_clear_error(tmp_path: Path) -> None:
    assert stored_path(tmp_path / "bench.log") is None
    with pytest.raises(SchemaError, match=r"no such recorded file \(nor bench.log.gz\)"):
        read_text(tmp_path / "bench.log")


def test_compress_tree_takes_scrapes_and_logs_only_and_skips_staging_folders(tmp_path: Path) -> None:
    for name in ("p/metrics_before.prom", "logs/s-2026-11-30T100000+0000.log", "p/bench.json", ".p.tmp/m.prom"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(TEXT, encoding="utf-8")
    written = compress_tree([tmp_path])
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "logs/s-2026-11-30T100000+0000.log.gz",
        "p/metrics_before.prom.gz",
    ]
    assert (tmp_path / "p" / "bench.json").exists() and (tmp_path / ".p.tmp" / "m.prom").exists()
    assert compress_tree([tmp_path]) == []  # already done


def test_the_command_compresses_a_folder_and_refuses_a_missing_one(  # type: ignore[no-untyped-def]
    tmp_path: Path, capsys
) -> None:
    (tmp_path / "a.log").write_text(TEXT, encoding="utf-8")
    assert cli.main(["compress", str(tmp_path)]) == 0 and "compressed 1 files" in capsys.readouterr().out
    assert cli.main(["compress", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"error: not a folder: {tmp_path / 'nowhere'}\n"


def test_server_logs_are_listed_plain_or_compressed_but_not_bench_logs(tmp_path: Path) -> None:
    names = [
        "b-2026-11-30T100000+0000.log",
        "a-2026-11-30T100000+0000.log.gz",
        "a-2026-11-30T100000+0000.bench.log.gz",
        "b-2026-11-30T100000+0000.bench.log",
        "notes.txt",
    ]
    for name in names:
        (tmp_path / name).write_text("", encoding="utf-8")
    assert [p.name for p in server_log_files(tmp_path)] == names[1::-1]
    assert server_log_files(tmp_path / "absent") == []


@pytest.mark.recorded_data
def test_a_point_written_compressed_rebuilds_the_row_of_the_recorded_one(tmp_path: Path) -> None:
    """A recorded point's files, rewritten by ``write_point`` (scrapes compressed): the same row but its path."""

    recorded_case = paths.data_dir() / "runs" / "llama-8b-draft-model"
    source = raw.finished_points(recorded_case)[0]
    files = {name: read_text(source / name) for name in raw.REQUIRED_FILES}
    pid = source.relative_to(raw.raw_root(recorded_case)).as_posix()
    point = raw.write_point(tmp_path / "runs" / "llama-8b-draft-model", pid, files)
    assert sorted(p.name for p in point.iterdir()) == sorted(
        [raw.POINT_FILE, raw.PROVENANCE_FILE, raw.BENCH_FILE, "metrics_before.prom.gz", "metrics_after.prom.gz"]
    )
    rewritten, recorded = raw.row_from_point(point, tmp_path), raw.row_from_point(source, paths.data_dir())
    assert rewritten.model_dump(exclude={"raw_path"}) == recorded.model_dump(exclude={"raw_path"})
