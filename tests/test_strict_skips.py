"""Under ``make test`` (``BROKER_TESTS_STRICT=1``) a skip for something
missing fails the run; a skip by design does not."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT

SAMPLE = """
import pytest
from tests.support import skip_by_design

def test_missing():
    pytest.skip("no redis-server")

@pytest.mark.skipif(True, reason="no openssl")
def test_missing_marker():
    pass

def test_not_here():
    skip_by_design("only through the admin API")

def test_fine():
    pass
"""


def _run(tmp_path, strict: bool) -> str:
    sample = tmp_path / "test_sample.py"
    sample.write_text(SAMPLE)
    env = dict(os.environ, BROKER_TESTS_STRICT="1" if strict else "0")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-rA",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(sample)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return proc.stdout + proc.stderr


def test_a_missing_thing_fails_under_make_test(tmp_path):
    out = _run(tmp_path, strict=True)
    # the marker's skip happens at set-up: an error there, a failure in a call
    assert "1 failed, 1 passed, 1 skipped, 1 error" in out, out[-2000:]
    assert "no redis-server" in out and "BROKER_TESTS_STRICT=1" in out


def test_outside_make_test_it_is_a_skip(tmp_path):
    out = _run(tmp_path, strict=False)
    assert "1 passed, 3 skipped" in out, out[-2000:]
