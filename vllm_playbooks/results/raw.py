"""Raw point folders: what one measured point leaves on disk, written atomically, and the row rebuilt from it.

Layout, under ``data/runs/<case>/raw/<hardware>/<config_id>/<load slug>-r<repeat>/`` (the point's id,
``vllm_playbooks.results.identity``):

- ``point.json``: case, ids, the resolved engine config, the load, the argv lists of server and load generator
- ``provenance.json``: GPU, driver, vLLM/torch versions, commit
- ``warmup.json``: the uncounted calibration run's ``bench serve`` result
- ``bench.json``: the measured run's ``bench serve`` result
- ``metrics_before.prom.gz`` / ``metrics_after.prom.gz``: ``/metrics`` scraped around the measured run, stored
  gzip-compressed (``vllm_playbooks.results.textfiles``; points recorded before 2026-12-02 kept them plain at first)
- ``gpu_samples.csv`` (optional): NVML readings of the engine's GPUs during the measured run
  (``vllm_playbooks.engine.gpu_sampler``); ``point.json``'s ``gpu_sampling`` says whether it was sampled, and why
  not. Points recorded before the sampler existed have neither; their rows are rebuilt the same way.

A point folder is built under a temporary name and renamed into place, so it is either complete or absent.
Replay rebuilds every row from these files alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from vllm_playbooks.config.spec_input import alpha_of_rates
from vllm_playbooks.engine.metrics import MetricsDelta, diff_metrics, parse_metrics, per_position_json
from vllm_playbooks.errors import SchemaError
from vllm_playbooks.files import atomic_copy, atomic_write_text, fsync_folder
from vllm_playbooks.load.bench import BenchNumbers, load_bench_file
from vllm_playbooks.results.identity import engine_of, point_hardware, read_json
from vllm_playbooks.results.provenance import Provenance
from vllm_playbooks.results.schema import RunRow
from vllm_playbooks.results.textfiles import COMPRESSED_KINDS, GZ, compressed_bytes, read_text, stored_path

POINT_FILE = "point.json"
PROVENANCE_FILE = "provenance.json"
BENCH_FILE = "bench.json"
WARMUP_FILE = "warmup.json"
METRICS_BEFORE = "metrics_before.prom"
METRICS_AFTER = "metrics_after.prom"
GPU_SAMPLES_FILE = "gpu_samples.csv"
REQUIRED_FILES = (POINT_FILE, PROVENANCE_FILE, BENCH_FILE, METRICS_BEFORE, METRICS_AFTER)
FAILURE_SUFFIX = ".failure.json"


def split_point_id(pid: str) -> tuple[str, int]:
    """A point id's repeat split off: (the id without ``-r<repeat>``, the repeat index); the repeats of one engine
    config at one load on one hardware share the first part."""
    point, repeat = pid.rsplit("-r", 1)
    return point, int(repeat)


def next_repeat(config_folder: Path, load_slug: str) -> int:
    """The repeat index the next run of one point is recorded under: one past every repeat of the point folders
    ``<load_slug>-r<repeat>`` in ``config_folder`` (``raw/<hardware>/<config id>``), 0 for the first. Only folders
    of exactly that load count: failure files and unfinished (dot) folders beside them do not."""
    if not config_folder.is_dir():
        return 0
    names = [p.name for p in config_folder.iterdir() if p.is_dir() and not p.name.startswith(".")]
    repeats = [repeat for load, repeat in map(split_point_id, names) if load == load_slug]
    return max(repeats, default=-1) + 1


def raw_root(case_dir: Path) -> Path:
    """``<case dir>/raw``."""
    return case_dir / "raw"


def write_point(case_dir: Path, pid: str, files: dict[str, str]) -> Path:
    """Write a complete point folder atomically; refuse to replace one that exists."""
    missing = [f for f in REQUIRED_FILES if f not in files]
    if missing:
        raise SchemaError(f"point {pid}: refusing to write an incomplete point (missing {', '.join(missing)})")
    target = raw_root(case_dir) / pid
    if target.exists():
        raise SchemaError(f"{target} exists: recorded points are never overwritten")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}."))
    try:
        for name, text in files.items():
            if Path(name).suffix in COMPRESSED_KINDS:
                (staging / f"{name}{GZ}").write_bytes(compressed_bytes(text))
            else:
                (staging / name).write_text(text, encoding="utf-8")
        for written in staging.iterdir():
            with written.open("rb") as handle:
                os.fsync(handle.fileno())
        fsync_folder(staging)
        os.rename(staging, target)
        fsync_folder(target.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    failure_file(case_dir, pid).unlink(missing_ok=True)
    return target


def failure_file(case_dir: Path, pid: str) -> Path:
    """Where a failed point's error is kept (it stays retryable): ``raw/<point id>.failure.json``."""
    return raw_root(case_dir) / f"{pid}{FAILURE_SUFFIX}"


def record_failure(case_dir: Path, pid: str, error: str, detail: dict[str, Any]) -> Path:
    """Keep a failed point's error beside the finished ones; a later resume tries the point again."""
    path = failure_file(case_dir, pid)
    atomic_write_text(path, json.dumps({"point_id": pid, "error": error, **detail}, indent=2))
    return path


#: The suffix of a point folder while ``copy_point`` copies it (its leading dot hides it from ``finished_points``).
COPYING = ".copying"


def copy_point(point_dir: Path, target: Path) -> None:
    """Copy a finished point folder to ``target`` (which must not exist) in one step: into a hidden staging folder
    beside it, then renamed, so a copy stopped half-way never counts as a point; a staging folder left by a stopped
    copy is replaced."""
    if target.exists():
        raise SchemaError(f"{target}: a recorded point is never replaced")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}{COPYING}")
    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(point_dir, staging)
    staging.rename(target)


def _failure_files(case_dir: Path) -> list[Path]:
    """The failure files a case keeps (``raw/<hardware>/<config id>/<point>.failure.json``), in point-id order."""
    root = raw_root(case_dir)
    return sorted(root.glob(f"*/*/*{FAILURE_SUFFIX}")) if root.is_dir() else []


def failure_records(case_dir: Path) -> list[dict[str, Any]]:
    """Every failure a case keeps (``record_failure``), each as its file says (``point_id``, ``error`` and the
    runner's detail, e.g. ``server_log``), in point-id order. A file that is not such a record (empty after a full
    disk, damaged by hand) is left out with a warning naming it: its point is measured again like any failed one."""
    records = []
    for path in _failure_files(case_dir):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = None
        if is_failure_record(record):
            records.append(record)
        else:
            warnings.warn(f"{path}: not a failure record, left out (its point is measured again)", stacklevel=2)
    return records


def is_failure_record(record: Any, pid: str | None = None) -> bool:
    """Whether ``record`` is what ``record_failure`` writes: a mapping with a ``point_id`` (``pid`` where given) and
    an ``error``, both text."""
    return (
        isinstance(record, dict)
        and isinstance(record.get("point_id"), str)
        and isinstance(record.get("error"), str)
        and pid in (None, record["point_id"])
    )


def _is_measured(failure: Path) -> bool:
    """Whether the point a failure file stands for has a finished folder beside it."""
    return (failure.parent / failure.name.removesuffix(FAILURE_SUFFIX) / POINT_FILE).exists()


def copy_new_failures(source_case_dir: Path, case_dir: Path) -> int:
    """Copy the failures that ``source_case_dir`` keeps into ``case_dir`` where that point has neither a failure nor a
    finished folder there (a point measured since needs no retry); return how many were copied."""
    source_root, root = raw_root(source_case_dir), raw_root(case_dir)
    copied = 0
    for path in _failure_files(source_case_dir):
        target = root / path.relative_to(source_root)
        if target.exists() or _is_measured(target):
            continue
        atomic_copy(path, target)
        copied += 1
    return copied


def drop_measured_failures(case_dir: Path) -> int:
    """Remove the failures of points that have a finished folder now (measured elsewhere and copied in, as
    ``write_point`` removes them when it measures one here); return how many."""
    measured = [path for path in _failure_files(case_dir) if _is_measured(path)]
    for path in measured:
        path.unlink()
    return len(measured)


def copy_new_logs(source_case_dir: Path, case_dir: Path) -> int:
    """Copy the server logs of ``source_case_dir/logs`` that ``case_dir/logs`` lacks (by name); return how many."""
    logs = source_case_dir / "logs"
    if not logs.is_dir():
        return 0
    (case_dir / "logs").mkdir(parents=True, exist_ok=True)
    copied = 0
    for log in sorted(logs.iterdir()):
        if log.is_file() and not (case_dir / "logs" / log.name).exists():
            atomic_copy(log, case_dir / "logs" / log.name)
            copied += 1
    return copied


def finished_points(case_dir: Path) -> list[Path]:
    """Every complete point folder of a case, in a stable order."""
    root = raw_root(case_dir)
    if not root.exists():
        return []
    return sorted(p.parent for p in root.glob(f"*/*/*/{POINT_FILE}") if not p.parent.name.startswith("."))


#: How ``gpu_cards`` joins the cards of a point that ran on several GPUs.
CARD_SEPARATOR = " + "


def gpu_cards(point_dir: Path) -> str:
    """The GPU cards a point was measured on, each as NVML identifies it (its UUID, which tells two machines of one
    GPU model apart where their CPU model does not), sorted and joined by ``CARD_SEPARATOR``: from the GPU sampling
    its ``point.json`` records; '' for a point recorded before the sampler existed."""
    sampling = read_json(point_dir / POINT_FILE).get("gpu_sampling") or {}
    return CARD_SEPARATOR.join(sorted(str(d["uuid"]) for d in sampling.get("devices", []) if d.get("uuid")))


def count_cards(cards: Iterable[str]) -> int:
    """How many distinct GPU cards a set of runs used, from their ``gpu_cards`` values ('' adds none)."""
    return len({card for value in cards for card in value.split(CARD_SEPARATOR) if card})


def short_cards(cards: str) -> str:
    """A ``gpu_cards`` value for people: each card's UUID cut to its first 8 hex digits (``GPU-5d0ff3f1``), enough to
    tell the cards of one book apart, joined by ``CARD_SEPARATOR``."""
    return CARD_SEPARATOR.join(card[: len("GPU-") + 8] for card in cards.split(CARD_SEPARATOR) if card)


def point_identity(point_dir: Path) -> tuple[str, str]:
    """(hardware key, config id) of a point, from its ``point.json`` and ``provenance.json`` alone: where its folder
    belongs, whatever folder it is in now."""
    record = read_json(point_dir / POINT_FILE)
    hardware = point_hardware(record, read_json(point_dir / PROVENANCE_FILE))
    return hardware, engine_of(record).config_id()


def _located_identity(point_dir: Path, point: dict[str, Any], prov: Provenance) -> tuple[str, str, int]:
    """(point id, config id, repeat) of a point folder, read from where it lies (``raw/<hardware>/<config id>/
    <load>-r<repeat>``) after checking that its files name the same hardware and config; ``SchemaError`` otherwise."""
    hardware, config_id = point_hardware(point, prov.model_dump()), engine_of(point).config_id()
    placed = point_dir.parent.parent.name, point_dir.parent.name
    if placed != (hardware, config_id):
        raise SchemaError(
            f"{point_dir}: its files say {hardware}/{config_id}, its folder {'/'.join(placed)}; "
            "`vllm-playbooks migrate` moves recorded points to where they belong"
        )
    pid = "/".join((*placed, point_dir.name))
    return pid, config_id, split_point_id(pid)[1]


#: Rows rebuilt in this process, by point folder, data folder and :func:`_stored_digest` of the point's files. Replay
#: rebuilds a case's rows for each question asked of them (the ledger, the start-up table, every page), and parsing a
#: point's scrapes is most of that; a point whose files changed gets a new key, so this never returns a stale row.
_ROWS: dict[tuple[str, str, str], RunRow] = {}
#: The most rows ``_ROWS`` holds; the oldest goes first.
_ROWS_KEPT = 20_000


def _stored_digest(stored: Iterable[Path]) -> str:
    """A digest of the names and bytes of a point's stored files (a plain file and its ``.gz`` form differ)."""
    digest = hashlib.blake2b(digest_size=20)
    for path in stored:
        digest.update(f"{path.name}\0".encode())
        digest.update(_file_digest(path))
    return digest.hexdigest()


#: Each file's digest by its path and stat (size, modification time, inode), for files not modified within
#: ``_SETTLED_S`` of being read: a file changed again within the clock's granularity can keep its modification time,
#: so one that recent is read again each time (as git treats a "racily clean" file).
_FILE_DIGESTS: dict[tuple[str, int, int, int], bytes] = {}
_SETTLED_S = 2.0


def _file_digest(path: Path) -> bytes:
    """The digest of ``path``'s size and bytes; from ``_FILE_DIGESTS`` where its stat is unchanged and settled."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)
    if key in _FILE_DIGESTS:
        return _FILE_DIGESTS[key]
    data = path.read_bytes()
    found = hashlib.blake2b(f"{len(data)}\0".encode() + data, digest_size=20).digest()
    if time.time_ns() - stat.st_mtime_ns > _SETTLED_S * 1e9 and path.stat().st_mtime_ns == stat.st_mtime_ns:
        if len(_FILE_DIGESTS) >= _ROWS_KEPT * len(REQUIRED_FILES):
            del _FILE_DIGESTS[next(iter(_FILE_DIGESTS))]
        _FILE_DIGESTS[key] = found
    return found


def row_from_point(point_dir: Path, data_root: Path) -> RunRow:
    """Rebuild a row from a raw point folder alone (replay mode, and the live runner after each point).

    A point rebuilt before in this process, from files with the same bytes, gives the same row without parsing
    them again (``_ROWS``).
    """
    key = _row_key(point_dir, data_root)
    if key in _ROWS:
        return _ROWS[key]
    row = _parse_point(point_dir, data_root)
    if key is not None and _row_key(point_dir, data_root) == key:  # its files did not change while it was parsed
        if len(_ROWS) >= _ROWS_KEPT:
            del _ROWS[next(iter(_ROWS))]
        _ROWS[key] = row
    return row


def _row_key(point_dir: Path, data_root: Path) -> tuple[str, str, str] | None:
    """The ``_ROWS`` key of a point folder; ``SchemaError`` when a required file is missing, None when one cannot be
    read (its parse says which)."""
    stored = [stored_path(point_dir / f) for f in REQUIRED_FILES]
    missing = [f for f, path in zip(REQUIRED_FILES, stored, strict=True) if path is None]
    if missing:
        raise SchemaError(f"{point_dir}: incomplete point folder, missing {', '.join(missing)}")
    try:
        return str(point_dir), str(data_root), _stored_digest(p for p in stored if p is not None)
    except OSError:
        return None


def _parse_point(point_dir: Path, data_root: Path) -> RunRow:
    """The row of a complete point folder, its files read and parsed."""
    try:
        point = read_json(point_dir / POINT_FILE)
        prov = Provenance.model_validate(read_json(point_dir / PROVENANCE_FILE))
        bench = load_bench_file(point_dir / BENCH_FILE)
        delta = diff_metrics(
            parse_metrics(read_text(point_dir / METRICS_BEFORE)),
            parse_metrics(read_text(point_dir / METRICS_AFTER)),
        )
        return _row(point_dir, data_root, point, prov, bench, delta)
    except (KeyError, TypeError, ValueError, EOFError, OSError) as error:  # a truncated or damaged file
        if isinstance(error, SchemaError):
            raise
        raise SchemaError(f"{point_dir}: a raw file is damaged ({type(error).__name__}: {error})") from None


def _row(
    point_dir: Path, data_root: Path, point: dict[str, Any], prov: Provenance, bench: BenchNumbers, delta: MetricsDelta
) -> RunRow:
    """The row of a point whose raw files have been read."""
    engine, load = point["engine"], point["load"]
    spec = engine.get("speculative") or {}
    rates = spec.get("synthetic_acceptance_rates")
    stats = delta.spec
    pid, config_id, repeat = _located_identity(point_dir, point, prov)
    return RunRow(
        case=point["case"],
        hardware=pid.split("/", 1)[0],
        point_id=pid,
        config_id=config_id,
        engine_label=engine["label"],
        repeat=repeat,
        model_shape=point["model_shape"],
        load_format=engine["load_format"],
        quantization=point.get("quantization"),
        dtype=engine["dtype"],
        kv_cache_dtype=engine["kv_cache_dtype"],
        spec_method=spec.get("method", "none"),
        num_speculative_tokens=spec.get("num_speculative_tokens", 0),
        draft_model=spec.get("model"),
        draft_tensor_parallel_size=spec.get("draft_tensor_parallel_size"),
        imposed_acceptance_rates=json.dumps(rates) if rates is not None else None,
        imposed_alpha=alpha_of_rates(rates),
        max_num_seqs=engine.get("max_num_seqs"),
        max_num_batched_tokens=engine.get("max_num_batched_tokens"),
        max_model_len=engine["max_model_len"],
        tensor_parallel_size=engine["tensor_parallel_size"],
        pipeline_parallel_size=engine["pipeline_parallel_size"],
        gpu_memory_utilization=engine["gpu_memory_utilization"],
        engine_config_json=json.dumps(engine, sort_keys=True),
        concurrency=load.get("concurrency"),
        request_rate_qps=load.get("request_rate_qps"),
        burstiness=load["burstiness"],
        input_len=load["input_len"],
        output_len=load["output_len"],
        random_range_ratio=load.get("random_range_ratio", 0.0),
        num_prompts=bench.num_prompts,
        num_warmup_prompts=point["num_warmup_prompts"],
        duration_s=bench.duration_s,
        completed=bench.completed,
        failed=bench.failed,
        request_throughput_rps=bench.request_throughput_rps,
        output_tok_s=bench.output_tok_s,
        total_tok_s=bench.total_tok_s,
        **bench.latency_ms,
        acceptance_rate=stats.acceptance_rate if stats else None,
        mean_acceptance_length=stats.mean_acceptance_length if stats else None,
        per_position_acceptance=per_position_json(stats),
        num_drafts=stats.num_drafts if stats else None,
        num_draft_tokens=stats.num_draft_tokens if stats else None,
        num_accepted_tokens=stats.num_accepted_tokens if stats else None,
        num_preemptions=delta.num_preemptions,
        gpu_name=prov.gpu_name,
        gpu_count=prov.gpu_count,
        driver_version=prov.driver_version,
        vllm_version=prov.vllm_version,
        torch_version=prov.torch_version,
        host_cpu=prov.host_cpu,
        host_cpu_count=prov.host_cpu_count,
        measured_at=point["measured_at"],
        git_sha=prov.git_sha,
        raw_path=point_dir.relative_to(data_root).as_posix(),
    )
