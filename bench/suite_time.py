"""How long a clean clone's ``make test`` takes, for two commits in one run.

    python3 bench/suite_time.py [--old REV] [--new REV] [--json out.json]
        [--keep]

Each commit is cloned afresh (``git clone --no-local`` of this repository,
then a checkout of the commit) into a temporary directory, and its README's
test command is run there as CI runs it (``.ci/run`` when the commit has
one, else ``make test``), one after the other, never at once: old first,
then new. Nothing is shared between the two but the machine's package
caches (pip, npm, Maven, Go), as on CI.

Measured per commit: the wall time of the whole command (set-up included),
its exit code, pytest's summary lines (tests passed and failed, each
phase's own time), and the 1-minute load average before and after. A
Redis or PostgreSQL that a run left running on 6379 or 5432 is stopped
before the next one starts (older commits leave theirs), so each run
starts on a bare machine. The default ``--old`` is f9bde6a, the code when
the "one way to each thing" issue measured the suite.

Prints a table and the ratio new/old; writes JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the commit the issue's figures were taken on (2026-11-27, 1,100 tests)
DEFAULT_OLD = "f9bde6a"
#: a pytest summary line, with its ``===`` (the main suite) or without (``-q``:
#: the PostgreSQL phase)
SUMMARY = re.compile(r"^(?:=+ )?(\d+ (passed|failed|error).*) in ([\d.]+)s")


def load1() -> float:
    return os.getloadavg()[0]


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def stop_servers() -> list[str]:
    """Stop what answers on Redis's and PostgreSQL's ports (a run left it)."""
    stopped = []
    # PostgreSQL's fast shutdown is SIGINT (SIGTERM waits for its clients).
    for port, name, sig in (
        (6379, "redis-server", signal.SIGTERM),
        (5432, "postgres", signal.SIGINT),
    ):
        if not port_open(port):
            continue
        out = subprocess.run(
            ["fuser", "-n", "tcp", str(port)], capture_output=True, text=True
        )
        for pid in out.stdout.split():
            try:
                os.kill(int(pid), sig)
                stopped.append(f"{name} pid {pid}")
            except (ProcessLookupError, ValueError):
                pass
        deadline = time.monotonic() + 30
        while port_open(port) and time.monotonic() < deadline:
            time.sleep(0.5)
    return stopped


def run_commit(rev: str, keep: bool) -> dict:
    sha = subprocess.run(
        ["git", "rev-parse", rev], cwd=ROOT, capture_output=True, text=True,
        check=True,
    ).stdout.strip()  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix=f"suite-{sha[:7]}-"))
    # mkdtemp's 0700 would keep the postgres user (the suite's private
    # PostgreSQL runs as it) out of the clone's var/postgres.
    work.chmod(0o755)
    subprocess.run(
        ["git", "clone", "-q", "--no-local", str(ROOT), str(work)], check=True
    )
    subprocess.run(["git", "checkout", "-q", sha], cwd=work, check=True)
    command = [".ci/run"] if (work / ".ci" / "run").exists() else ["make", "test"]
    log = work.with_suffix(".log")
    before = load1()
    t0 = time.monotonic()
    with open(log, "wb") as out:
        rc = subprocess.run(
            command, cwd=work, stdout=out, stderr=subprocess.STDOUT,
            env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"},
        ).returncode  # fmt: skip
    wall = time.monotonic() - t0
    after = load1()
    summaries = []
    for line in log.read_text(errors="replace").splitlines():
        m = SUMMARY.match(line.strip())
        if m:
            summaries.append({"summary": m.group(1), "seconds": float(m.group(3))})
    left = stop_servers()
    if not keep:
        shutil.rmtree(work, ignore_errors=True)
    return {
        "commit": sha,
        "command": " ".join(command),
        "wall_s": round(wall, 1),
        "exit": rc,
        "pytest": summaries,
        "load1_before": round(before, 2),
        "load1_after": round(after, 2),
        "log": str(log),
        "stopped_after": left,
    }


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", default=DEFAULT_OLD)
    ap.add_argument("--new", default="HEAD")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--keep", action="store_true", help="keep the clones")
    args = ap.parse_args(argv)
    stopped = stop_servers()
    if stopped:
        print("stopped before the runs:", ", ".join(stopped), flush=True)
    runs = {}
    for label, rev in (("old", args.old), ("new", args.new)):
        print(f"{label}: {rev} ...", flush=True)
        runs[label] = r = run_commit(rev, args.keep)
        print(
            f"{label}: {r['commit'][:10]} {r['wall_s'] / 60:.1f} min, exit "
            f"{r['exit']}, load {r['load1_before']} -> {r['load1_after']}; "
            + "; ".join(f"{s['summary']} in {s['seconds']:.0f} s" for s in r["pytest"]),
            flush=True,
        )  # fmt: skip
    ratio = runs["new"]["wall_s"] / runs["old"]["wall_s"]
    print(f"new/old wall time: {ratio:.2f} ({(1 - ratio) * 100:.0f}% faster)")
    result = {"runs": runs, "ratio_new_over_old": round(ratio, 3)}
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
