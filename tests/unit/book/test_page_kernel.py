"""A page's kernel set up by its import cell: DataFrames displayed as tables for people, data reads recorded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from vllm_playbooks.book.cache import READ_LOG_ENV, read_log

SET_UP = "from vllm_playbooks.book.page_kernel import set_up_page_kernel; set_up_page_kernel(); "


def test_in_an_ipython_shell_every_dataframe_displays_as_a_table_for_people() -> None:
    code = (
        "from IPython.testing.globalipapp import start_ipython; shell = start_ipython(); import pandas as pd; "
        f"{SET_UP}html = shell.display_formatter.formatters['text/html']; "
        "print(html.lookup_by_type(pd.DataFrame).__qualname__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["people_html"]


def test_importing_the_package_alone_sets_nothing_up(tmp_path: Path) -> None:
    """The package's ``__init__`` imports nothing: no display hook and no read log, even in a shell where
    ``vllm-playbooks book`` asks for the log; the page's set-up call brings both."""
    data = tmp_path / "data"
    (data / "runs").mkdir(parents=True)
    (data / "runs" / "runs.csv").write_text("point\n")
    log = tmp_path / "reads.log"
    log.touch()
    code = (
        "from IPython.testing.globalipapp import start_ipython; shell = start_ipython(); import pandas as pd; "
        f"import vllm_playbooks; open({str(data / 'runs' / 'runs.csv')!r}).read(); "
        "print(shell.display_formatter.formatters['text/html'].lookup_by_type(pd.DataFrame).__qualname__)"
    )
    env = os.environ | {"VLLM_PLAYBOOKS_DATA_DIR": str(data), READ_LOG_ENV: str(log)}
    for setup, shown, files in (
        ("import vllm_playbooks; ", [], frozenset()),
        (SET_UP, ["people_html"], {"runs/runs.csv"}),
    ):
        run = subprocess.run(
            [sys.executable, "-c", code.replace("import vllm_playbooks; ", setup)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert [w for w in run.stdout.split() if w == "people_html"] == shown, run.stderr
        assert read_log(log).files == files
