"""What every fault test needs: the command line run as a process of its own, our processes found by a tag in their
environment, the rows of the data folder and its worker folders, and the rerun that must finish the grid."""

from __future__ import annotations

import csv
import hashlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.conftest import ROOT
from vllm_playbooks.results.replay import replay_rows
from vllm_playbooks.run.plan import load_plan

CASE_FILE = Path(__file__).with_name("faults.yaml")
CASE = "faults"


def planned_ids(case_file: Path) -> list[str]:
    """The recorded ids of every point of the case file's grid on this machine, in plan order: each point's id under
    the hardware key the runner gives it here (GPU model and count, vLLM version)."""
    from vllm_playbooks.results.provenance import collect_provenance
    from vllm_playbooks.run.measure import hardware_of

    provenance = collect_provenance()
    return [f"{hardware_of(p.engine, provenance)}/{p.point_id}" for p in load_plan(str(case_file)).points()]


#: Every point of the grid, in plan order (two configs × three loads).
PLANNED = planned_ids(CASE_FILE)
WORKER = ["worker", "--case", str(CASE_FILE), "--engines", "spec-off", "ngram-k2"]
PARALLEL = ["run", "--case", str(CASE_FILE), "--gpus", "0", "1"]


def processes_tagged(tag: str) -> dict[int, str]:
    """Live processes (not zombies) whose environment carries ``FAULT_TAG=tag``: the runner and all it started."""
    found: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"FAULT_TAG={tag}".encode() in environ.split(b"\0") and stat.rsplit(")", 1)[1].split()[0] != "Z":
            found[int(entry)] = cmdline
    return found


def _sigint_as_from_a_terminal() -> None:
    """In the child before it runs: Ctrl-C's SIGINT handled as by a program started from a terminal (a shell starts
    background jobs with SIGINT ignored, and Python then leaves it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> None:
    """Poll ``condition`` every 50 ms; fail the test naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s} s: {what}")
        time.sleep(0.05)


def tree_digest(folder: Path) -> str:
    """A digest of every file under ``folder`` (its path and bytes) and every folder's path."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def tree_stat(folder: Path) -> str:
    """A digest of every entry under ``folder`` and ``folder`` itself: path, size, mode and modification time (any
    write, even of a file removed again, changes a folder's time); cheaper than ``tree_digest``."""
    digest = hashlib.sha256()
    for path in [folder, *sorted(folder.rglob("*"))]:
        info = path.lstat()
        digest.update(f"{path.relative_to(folder)}\0{info.st_size}\0{info.st_mode}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def row_ids(runs_csv: Path) -> list[str]:
    """The point ids of a runs.csv, in order (empty when there is none)."""
    if not runs_csv.exists():
        return []
    with runs_csv.open(newline="") as handle:
        return [row["point_id"] for row in csv.DictReader(handle)]


@dataclass
class Runner:
    """The command line under test, in a tmp folder of its own: its data folder, its TMPDIR (where ``run`` puts its
    worker folders), and a tag that marks every process it starts."""

    tmp: Path
    tag: str = field(default_factory=lambda: uuid.uuid4().hex)
    process: subprocess.Popen[bytes] | None = None
    runs: int = 0
    #: What runs: the harness (stand-in server and bench), or ``vllm_playbooks`` itself (a real vLLM server).
    module: str = "tests.faults.harness"

    @property
    def data(self) -> Path:
        return self.tmp / "data"

    @property
    def case_dir(self) -> Path:
        return self.data / "runs" / CASE

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of one run: this test's data folder, TMPDIR and tag, and the fault's settings."""
        (self.tmp / "tmp").mkdir(exist_ok=True)
        return {
            **os.environ,
            "VLLM_PLAYBOOKS_DATA_DIR": str(self.data),
            "TMPDIR": str(self.tmp / "tmp"),
            "FAULT_TAG": self.tag,
            "PYTHONDONTWRITEBYTECODE": "1",
            **extra,
        }

    def start(self, args: list[str], **extra: str) -> subprocess.Popen[bytes]:
        """Start ``python -m <module> args…`` (its stdout and stderr go to files)."""
        self.runs += 1
        out = (self.tmp / f"out{self.runs}").open("wb")
        err = (self.tmp / f"err{self.runs}").open("wb")
        # as from a terminal: SIGINT at its default even where this suite runs as a background job (which ignores it)
        self.process = subprocess.Popen(
            [sys.executable, "-m", self.module, *args],
            cwd=ROOT,
            env=self.env(**extra),
            stdout=out,
            stderr=err,
            preexec_fn=_sigint_as_from_a_terminal,
        )
        return self.process

    def run(self, args: list[str], timeout_s: float = 90, **extra: str) -> tuple[int, str]:
        """Run to the end; return the exit status and standard error."""
        process = self.start(args, **extra)
        code = process.wait(timeout=timeout_s)
        return code, self.stderr()

    def stderr(self) -> str:
        """Standard error of the latest run."""
        return (self.tmp / f"err{self.runs}").read_text(errors="replace")

    def error_lines(self) -> list[str]:
        """The ``error:`` and ``interrupted:`` lines of the latest run's standard error."""
        return [line for line in self.stderr().splitlines() if line.startswith(("error:", "interrupted:"))]

    def recorded_anywhere(self) -> int:
        """Rows recorded so far, in the data folder and in any worker folder of ``run``."""
        tables = [self.case_dir / "runs.csv", *(self.tmp / "tmp").glob(f"{CASE}-parallel-*/gpus*/runs/{CASE}/runs.csv")]
        return sum(len(row_ids(t)) for t in tables)

    def ours(self) -> dict[int, str]:
        """Our processes still alive."""
        return processes_tagged(self.tag)

    def assert_nothing_left(self, timeout_s: float = 15) -> None:
        """No process of this runner's is left (within ``timeout_s``: a guard stopping its group takes a moment)."""
        wait_until(lambda: not self.ours(), timeout_s, f"our processes gone: {self.ours()}")

    def assert_complete(self) -> None:
        """Every planned point recorded exactly once, every row rebuilt from its raw folder, no record left over."""
        ids = row_ids(self.case_dir / "runs.csv")
        assert Counter(ids) == Counter(PLANNED), f"rows: {Counter(ids)}"
        assert sorted(r.point_id for r in replay_rows(CASE, self.data)) == sorted(PLANNED)
        assert not (self.case_dir / ".servers.json").exists()
        assert not (self.case_dir / ".workers.json").exists()
        assert not list((self.tmp / "tmp").glob(f"{CASE}-parallel-*/gpus*/"))  # worker folders removed

    def rerun_completes(self, args: list[str] | None = None) -> None:
        """Run the grid again (quick loads): exit 0, every point exactly once, nothing left running."""
        code, err = self.run(args or WORKER, FAULT_BENCH_S="0.02")
        assert code == 0, err
        self.assert_complete()
        self.assert_nothing_left()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the runner."""
        assert self.process is not None
        self.process.send_signal(sig)


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    """A runner in ``tmp_path``; anything of ours still alive at the end is killed (and the test has failed)."""
    made = Runner(tmp_path)
    yield made
    for pid in made.ours():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
