"""Run the conformance scenarios with the official clients against one broker.

    .venv/bin/python tests/conformance/run.py --target ours|apache
        [--langs python,node,java,go] [--scenarios a,b] [--out FILE]
        [--apache-version 5.3.3] [--parallel] [--shards N]

``ours``: ``python -m broker_core serve`` on a temporary store. ``apache``:
Apache RocketMQ (NameServer + proxy in local mode, ``bench/peers/rocketmq.py``).
Both get the same transaction timing (``timing`` in scenarios.json). For each
language the resources the scenarios name are created with their kinds (topic
message types; groups' FIFO and delivery attempts), the runner is built if
needed and run, and its output collected into one JSON file (default
``var/conformance/<target>.json``). See tests/conformance/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from tests.support import free_port  # noqa: E402

SCENARIOS = json.loads((HERE / "scenarios.json").read_text())
LANGS = ("python", "node", "java", "go")
RUNNERS = HERE / "runners"
#: a runner that has not finished by then is killed (its scenarios: error)
RUNNER_TIMEOUT_S = 900  # below the conformance test's own limit


def free_broker_port() -> int:
    """A port for Apache's broker, which also listens on port - 2 and + 1."""
    for _ in range(100):
        p = free_port()
        if p > 1024 and all(_free(q) for q in (p - 2, p + 1)):
            return p
    raise RuntimeError("no free port for the broker")


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wait_port(port: int, proc: subprocess.Popen | None, timeout: float) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited ({proc.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.3):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answers on port {port}")


class Ours:
    """Our endpoint on a temporary store; resources made through the library
    (the store is shared with the running process)."""

    name = "ours"

    def __init__(self, timing: dict[str, int]) -> None:
        self.timing = timing
        self.dir = Path(tempfile.mkdtemp(prefix="conformance-ours-"))
        self.store = self.dir / "store"
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.version = "rocketbroker (this checkout)"
        #: where to keep the broker's log when it stops (``--out``'s directory)
        self.keep_log: Path | None = None

    def __enter__(self) -> Ours:
        log = open(self.dir / "server.log", "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "broker_core", "serve", "--store", str(self.store),
             "--listen", f"127.0.0.1:{self.port}", "--embedded-timers",
             "--transaction-timeout-ms", str(self.timing["transaction_timeout_ms"]),
             "--check-interval-ms", str(self.timing["check_interval_ms"]),
             "--no-redis-relay"],
            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            # Each receipt handle's life (popped, changed, acked) in the log:
            # a scenario that differs can be read off it.
            env={**os.environ, "LOG_LEVEL": os.environ.get("LOG_LEVEL", "DEBUG")},
        )  # fmt: skip
        wait_port(self.port, self.proc, 60)
        from broker_core import Broker

        self.broker = Broker.open(self.store)
        return self

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def create_topic(self, name: str, kind: str) -> None:
        self.broker.create_topic(name, 8, message_type=kind)

    def create_group(self, name: str, fifo: bool, attempts: int | None) -> None:
        self.broker.put_group(name, fifo, attempts)

    def log_tail(self) -> str:
        return (self.dir / "server.log").read_text()[-3000:]

    def __exit__(self, *exc: Any) -> None:
        self.broker.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.keep_log is not None:
            # The broker's log beside the results: when a scenario differs,
            # what the broker did then is still there to read.
            with contextlib.suppress(OSError):
                shutil.copy(self.dir / "server.log", self.keep_log)
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def apache(timing: dict[str, int], version: str):
    from bench.peers.rocketmq import ApacheRocketMQ

    conf = {
        "transactionTimeOut": timing["transaction_timeout_ms"],
        "transactionCheckInterval": timing["check_interval_ms"],
        "enablePropertyFilter": "true",
    }
    # Apache's proxy refuses invisible durations under 10 s by default; the
    # scenarios use 2-3 s (as ours allows) to stay short.
    proxy = {"minInvisibleTimeMillsForRecv": 1000}
    with ApacheRocketMQ(
        version=version, broker_conf=conf, proxy_conf=proxy,
        grpc_port=free_port(), namesrv_port=free_port(),
        broker_port=free_broker_port(), remoting_port=free_port(),
    ) as rmq:  # fmt: skip
        rmq.name = "apache"
        rmq.version = f"Apache RocketMQ {version}"
        yield rmq


def resources(lang: str, run: str) -> tuple[list[dict], list[tuple], list[tuple]]:
    """The scenarios with real names for ``lang``, and the topics and groups to
    create: (name, kind) and (name, fifo, attempts)."""
    topics: list[tuple[str, str]] = []
    groups: list[tuple[str, bool, int | None]] = []
    out = []
    for sc in SCENARIOS["scenarios"]:
        sid = sc["id"]
        names: dict[str, dict[str, str]] = {"topics": {}, "groups": {}}
        namespaces = sc["params"].get("namespaces", [""])
        for role, kind in sc["topics"].items():
            name = f"c{lang[:2]}{run}_{sid}_{role}"
            names["topics"][role] = name
            base, _, ns = kind.partition("@")
            for n in namespaces if ns else [""]:
                topics.append((f"{n}%{name}" if n else name, base))
        for role, opts in sc["groups"].items():
            name = f"c{lang[:2]}{run}_{sid}_{role}"
            names["groups"][role] = name
            for n in namespaces if opts.get("ns") else [""]:
                groups.append(
                    (
                        f"{n}%{name}" if n else name,
                        bool(opts.get("fifo")),
                        opts.get("max_delivery_attempts"),
                    )
                )
        out.append(
            {
                "id": sid,
                **names,
                "params": sc["params"],
                "timing": SCENARIOS["timing"],
            }
        )
    return out, topics, groups


def build(lang: str) -> str | None:
    """Build the runner if it has a build step; the reason when it cannot."""
    script = RUNNERS / lang / "build.sh"
    if not script.exists():
        return None
    r = subprocess.run(
        ["bash", str(script)],
        cwd=RUNNERS / lang,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if r.returncode != 0:
        return f"build failed: {(r.stdout + r.stderr)[-800:]}"
    return None


def run_lang(target: Any, lang: str, only: set[str] | None) -> dict[str, Any]:
    run = uuid.uuid4().hex[:6]
    scenarios, topics, groups = resources(lang, run)
    if only:
        scenarios = [s for s in scenarios if s["id"] in only]
    t0 = time.time()
    for name, kind in topics:
        if only and not any(
            name.split("%")[-1].startswith(f"c{lang[:2]}{run}_{s}_") for s in only
        ):
            continue
        try:
            target.create_topic(name, kind)
        except Exception as exc:  # noqa: BLE001 - e.g. a type this broker lacks
            print(f"  {lang}: topic {name} ({kind}) not created: {exc}", flush=True)
    for name, fifo, attempts in groups:
        if only and not any(
            name.split("%")[-1].startswith(f"c{lang[:2]}{run}_{s}_") for s in only
        ):
            continue
        target.create_group(name, fifo, attempts)
    setup_s = time.time() - t0
    with tempfile.TemporaryDirectory(prefix=f"conf-{lang}-") as tmp:
        inp, outp = Path(tmp) / "in.json", Path(tmp) / "out.json"
        inp.write_text(
            json.dumps(
                {
                    "endpoint": target.endpoint,
                    "language": lang,
                    "scenarios": scenarios,
                },
                indent=1,
            )
        )
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t0 = time.time()
        # In a session of its own: on a time-out, or when this script is
        # stopped, the whole runner goes (the JVM or Go binary under run.sh).
        proc = subprocess.Popen(
            ["bash", str(RUNNERS / lang / "run.sh"), str(inp), str(outp)],
            cwd=tmp,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        _RUNNERS.add(proc.pid)
        try:
            stdout, _ = proc.communicate(timeout=RUNNER_TIMEOUT_S)
            tail = (stdout or "")[-1500:]
        except subprocess.TimeoutExpired:
            tail = f"killed after {RUNNER_TIMEOUT_S} s"
        finally:
            _kill_group(proc)
        elapsed = time.time() - t0
        if not outp.exists():
            return {"error": f"the runner wrote no output: {tail}"}
        out = json.loads(outp.read_text())
    out["elapsed_s"] = round(elapsed, 1)
    out["setup_s"] = round(setup_s, 1)
    return out


def run_shards(target: Any, lang: str, only: set[str] | None, shards: int) -> dict:
    """``lang``'s scenarios dealt round-robin to ``shards`` runners that run at
    once, each on resources of its own (as the languages are); their outputs
    merged into one runner's. The scenarios mostly wait (timeouts, invisible
    durations, check-backs), so a language takes about 1/``shards`` of its
    time in one runner."""
    ids = [s["id"] for s in SCENARIOS["scenarios"] if not only or s["id"] in only]
    groups = [set(ids[i::shards]) for i in range(max(1, shards))]
    groups = [g for g in groups if g]
    if len(groups) <= 1:
        return run_lang(target, lang, only)
    with ThreadPoolExecutor(len(groups)) as pool:
        parts = list(pool.map(lambda g: run_lang(target, lang, g), groups))
    out: dict[str, Any] = {}
    for part in parts:
        out = {**part, **out}  # the client's description: any part's
    out["results"] = {k: v for p in parts for k, v in (p.get("results") or {}).items()}
    errors = [p["error"] for p in parts if "error" in p]
    if errors:
        out["error"] = "; ".join(errors)
    else:
        out.pop("error", None)
    out["elapsed_s"] = max(p.get("elapsed_s", 0) for p in parts)
    out["setup_s"] = max(p.get("setup_s", 0) for p in parts)
    out["shards"] = len(groups)
    return out


#: The process groups of the runners running now (each leads one).
_RUNNERS: set[int] = set()


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop ``proc``'s whole process group (it leads one), if anything is left."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    _RUNNERS.discard(proc.pid)


def _terminated(*_: Any) -> None:
    """SIGTERM (a test's time-out, a stopped make): the runners' groups are
    killed at once, then the run unwinds like Ctrl-C (the broker stopped, the
    temporary directories removed)."""
    for pgid in list(_RUNNERS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    sys.exit(143)


def main(argv: list[str] | None = None) -> int:
    signal.signal(signal.SIGTERM, _terminated)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", choices=["ours", "apache"], required=True)
    ap.add_argument("--langs", default=",".join(LANGS))
    ap.add_argument("--scenarios", default="")
    ap.add_argument("--out", default=None)
    ap.add_argument("--apache-version", default="5.3.3")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="run the languages' runners at the same time (each on resources "
        "of its own)",
    )
    ap.add_argument(
        "--shards",
        type=int,
        default=1,
        help="split each language's scenarios among this many runners that "
        "run at the same time (each on resources of its own)",
    )
    args = ap.parse_args(argv)
    langs = [x for x in args.langs.split(",") if x]
    only = {x for x in args.scenarios.split(",") if x} or None
    out_path = Path(args.out or ROOT / "var" / "conformance" / f"{args.target}.json")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    timing = SCENARIOS["timing"]
    failures = {}
    for lang in langs:
        # Built before the broker starts: a first build (Maven, Go modules)
        # takes minutes and is no part of the run.
        failure = build(lang)
        if failure:
            failures[lang] = failure
            print(f"{lang}: {failure}", flush=True)
    t0 = time.time()
    cm = Ours(timing) if args.target == "ours" else apache(timing, args.apache_version)
    if isinstance(cm, Ours):
        cm.keep_log = out_path.with_name(out_path.stem + "-broker.log")
    result: dict[str, Any] = {"target": args.target, "languages": {}}
    with cm as target:
        result["broker"] = target.version
        result["start_s"] = round(time.time() - t0, 1)

        def one(lang: str) -> None:
            if lang in failures:
                result["languages"][lang] = {"error": failures[lang]}
                return
            print(f"{args.target}: {lang} ...", flush=True)
            res = run_shards(target, lang, only, args.shards)
            result["languages"][lang] = res
            summary: dict[str, int] = {}
            for r in (res.get("results") or {}).values():
                summary[r.get("status")] = summary.get(r.get("status"), 0) + 1
            print(
                f"  {lang}: {res.get('error') or summary} "
                f"({res.get('elapsed_s', '?')} s)",
                flush=True,
            )

        if args.parallel:
            with ThreadPoolExecutor(len(langs) or 1) as pool:
                list(pool.map(one, langs))
        else:
            for lang in langs:
                one(lang)
    result["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    out_path.write_text(json.dumps(result, indent=1, sort_keys=True))
    print(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
