"""The four official clients against our endpoint, compared with Apache RocketMQ.

``run.py --target ours`` runs every scenario with the Python, Node.js, Java and
Go clients at once (each on resources of its own) against a ``serve`` of this
checkout. What each observed is compared with what the same client observed on
Apache RocketMQ in the last ``make conformance`` (``apache-results.json``, kept
in the repository): a difference that ``differences.json`` does not explain, or
a scenario that ran on Apache and failed here, fails the test.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from compare import compare  # noqa: E402

LANGS = ["python", "node", "java", "go"]
APACHE = HERE / "apache-results.json"

pytestmark = [pytest.mark.protocol, pytest.mark.slow]


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "ours.json"
    r = subprocess.run(
        [sys.executable, str(HERE / "run.py"), "--target", "ours", "--parallel",
         "--langs", ",".join(LANGS), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=1500,
    )  # fmt: skip
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("lang", LANGS)
def test_every_scenario_runs(ours, lang):
    """Each scenario ran to its end, or the client cannot express it and says
    which API it lacks; none was skipped."""
    res = ours["languages"][lang]
    assert "error" not in res, res.get("error")
    results = res["results"]
    assert set(results) == {
        s["id"] for s in json.loads((HERE / "scenarios.json").read_text())["scenarios"]
    }
    failed = {k: v.get("error") for k, v in results.items() if v["status"] == "error"}
    assert not failed, failed
    for k, v in results.items():
        if v["status"] == "unsupported":
            assert v.get("reason"), k


@pytest.mark.parametrize("lang", LANGS)
def test_same_as_apache_rocketmq(ours, lang):
    apache = json.loads(APACHE.read_text())
    rows = compare(apache, ours, [lang])
    bad = [r for r in rows if r["verdict"] in ("DIFFERENT", "FAILED")]
    assert not bad, json.dumps(bad, indent=1)[:6000]
