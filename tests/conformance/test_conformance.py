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
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from compare import compare  # noqa: E402

LANGS = ["python", "node", "java", "go"]
#: runners per language, each with a share of the scenarios, all at once: the
#: scenarios mostly wait, so the run takes about a third of one runner's time
SHARDS = 3
#: where run.py kept the broker's log (named in a failure's message)
OUT_LOG: dict[str, str] = {}
APACHE = HERE / "apache-results.json"

# Above run.py's own runner limit (900 s), so that run.py times a runner out
# and cleans up, rather than being killed with its broker and runners left.
pytestmark = [pytest.mark.protocol, pytest.mark.slow, pytest.mark.timeout(1200)]


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    out = tmp_path_factory.mktemp("conformance") / "ours.json"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "run.py"), "--target", "ours", "--parallel",
         "--shards", str(SHARDS), "--langs", ",".join(LANGS), "--out", str(out)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        stdout, _ = proc.communicate(timeout=1100)
    finally:
        # Whatever happened (a time-out here or pytest's): run.py unwinds on
        # SIGTERM (broker and runners stopped, directories removed); anything
        # still in its session after 30 s is killed.
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, stdout[-4000:]
    OUT_LOG["path"] = str(out.with_name(out.stem + "-broker.log"))
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
    for r in bad:
        # Everything the client saw, not only the compared fields (an
        # uncompared outcome often says why a compared one differs).
        r["ours_observed"] = ours["languages"][lang]["results"][r["scenario"]]
    log = OUT_LOG.get("path")
    where = f"\nthe broker's log: {log}" if log else ""
    if bad and log and Path(log).exists():
        # The broker's lines about the differing scenarios' own resources
        # (named c<lang><run>_<scenario>_...): the log is gone with the run.
        lines = Path(log).read_text(errors="replace").splitlines()
        for r in bad:
            mark = f"_{r['scenario']}_"
            mine = [x for x in lines if mark in x and f"c{lang[:2]}" in x]
            where += f"\n--- broker lines for {r['scenario']}:\n" + "\n".join(
                x[:400] for x in mine[-40:]
            )
    assert not bad, json.dumps(bad, indent=1)[:6000] + where
