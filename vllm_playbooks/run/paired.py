"""Paired runs: the configs a claim compares, measured in turn on one GPU so that drift between runs cancels.

Runs of two configs made minutes apart, each config's repeats in a row, carry whatever changed on the host in between
(a neighbour on the CPU, a clock that dropped) into the comparison. A paired part (``paired: true`` in a case's part or
plan) measures the configs in turn instead, at each load and repeat, and the verdict is taken from the ratio within
each pair (``analysis.compare.paired_versus``), so drift slower than one pair of runs falls out.

- **Co-resident** (when every config fits on the GPU at its share of ``gpu_memory_utilization``: the KV-budget check
  at ``gpu_memory_utilization / n`` passes): all servers start once, one after the other, and stay up; the runs go
  A, B, A, B … at each load and repeat, only one server under load at a time.
- **By restart** (where they do not fit together): each config keeps its whole ``gpu_memory_utilization``; the server
  of A measures every load of repeat 0, then B's, then B's again for repeat 1, then A's
  (``config.pairing.paired_order``). Slower (a start-up per switch), and drift within a server lifetime stays in the
  comparison; pages say which mode a pair used.

Each point's ``point.json`` says which paired session it belongs to, in which mode, and its place in the session
(``config.pairing.pairing_record``); the analysis pairs runs of one session by load and turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from vllm_playbooks.config.pairing import CO_RESIDENT, pairing_record
from vllm_playbooks.engine.server import VllmServer
from vllm_playbooks.errors import PlaybookError, StorageError
from vllm_playbooks.run.measure import GONE_ERRORS, LiveRun, server_gone, startup_cause
from vllm_playbooks.run.plan import PlannedPoint


def run_together(run: LiveRun, todo: Sequence[PlannedPoint], session: str) -> None:
    """Measure ``todo`` (``paired_order``'s ``CO_RESIDENT`` order) with one server per engine config, all started
    first, one after the other, and kept up to the end. A server that does not start or dies fails its own points
    (kept as failure files, as ``run.case`` keeps them); the other configs' points are still measured. Each point
    records ``session`` and its place in ``todo``."""
    engines = {point.engine.config_id(): point.engine for point in todo}
    labels = [engine.label for engine in engines.values()]
    lifetimes = {cid: run.lifetime(engine) for cid, engine in engines.items()}
    servers: dict[str, VllmServer] = {}

    def fail_rest(config_id: str, error: BaseException, after: int, cause: str | None = None) -> None:
        for point in todo[after:]:
            if point.engine.config_id() == config_id:
                run.fail(point, error, lifetimes[config_id], cause)
                run.bar.update(1)

    with contextlib.ExitStack() as stack:
        for cid, lifetime in lifetimes.items():
            try:
                servers[cid] = stack.enter_context(lifetime)
                run.report.server_startup_s[cid] = servers[cid].startup_s or 0.0
            except StorageError:
                raise
            except PlaybookError as error:
                fail_rest(cid, error, 0, startup_cause(error, lifetime.log_path))
        for position, point in enumerate(todo):
            cid = point.engine.config_id()
            if cid not in servers:
                continue
            server = servers[cid]
            pairing = pairing_record(CO_RESIDENT, session, position, labels)
            if not run.measure(point, lifetimes[cid], server, pairing) and (gone := server_gone(server)):
                del servers[cid]
                fail_rest(cid, RuntimeError(GONE_ERRORS[gone].format(scope="paired run")), position + 1)
            run.bar.update(1)
