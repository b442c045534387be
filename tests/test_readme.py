"""The README's library example runs as printed (in a fresh directory, on a
new store): a reader who copies it gets no NameError and no wrong call."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT


def test_the_library_example_runs_as_printed(tmp_path: Path) -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    example = next(b for b in blocks if "Broker.open(" in b)
    (tmp_path / "var").mkdir()
    script = tmp_path / "example.py"
    script.write_text(example)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    from broker_core import Broker

    with Broker.open(str(tmp_path / "var" / "store")) as broker:
        # The example wrote to the store it names.
        assert broker.query_by_key("Orders", "order-1")
