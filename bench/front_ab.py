"""The native front's server CPU per message, this checkout against an older
commit, in alternating rounds on the same machine.

    .venv/bin/python bench/front_ab.py --base REV [--rounds 3] [--messages 10000]
        [--json out.json]
    .venv/bin/python bench/front_ab.py --base-env K=V --env K=V ...

The second form compares two settings of this checkout (no worktree): e.g.
``--base-env BROKER_NATIVE_THREADS=1 --env BROKER_NATIVE_THREADS=0``, the
front's own thread against the event loop's thread serving gRPC.

On a shared machine the CPU a message costs moves by half between runs a
few minutes apart (the clients' own CPU moves with it), so one run of each
side says little. Here each round runs both sides one after the other:
``serve --front native`` from a temporary worktree of ``REV`` (its native
module built there with ``make native``, this checkout's venv) and from this
checkout, each on a fresh store; one official Python client process sends
``--messages`` messages (1 KiB, ``send_async``, 256 in flight) and then
receives and acknowledges them (``bench/grpc.py``'s workers). Per side and
phase: server CPU per message (every thread of the server, from /proc), the
event-loop thread's share, the client's CPU per message, and server over
client CPU: the client's code is the same on both sides, so that ratio
cancels most of what the machine's speed does to both. Prints each round
and the medians; the worktree and the stores are removed at the end.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
# bench/grpc.py's port helpers and client workers (loaded by path: the name
# grpc is the gRPC package's).
_spec = importlib.util.spec_from_file_location("bench_grpc", ROOT / "bench" / "grpc.py")
assert _spec is not None and _spec.loader is not None
bench_grpc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench_grpc)
TICK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of each thread of ``pid``."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def switches(pid: int) -> int:
    """Context switches so far of ``pid``'s main thread (the event loop's)."""
    n = 0
    for line in Path(f"/proc/{pid}/task/{pid}/status").read_text().splitlines():
        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
            n += int(line.split()[1])
    return n


def one_side(
    root: Path, messages: int, tmp: Path, env: dict[str, str] | None = None
) -> dict[str, dict[str, float]]:
    store = tmp / "store"
    shutil.rmtree(store, ignore_errors=True)
    port = bench_grpc.free_port()
    ep = f"127.0.0.1:{port}"
    proc = subprocess.Popen(
        [PY, "-m", "broker_core", "serve", "--store", str(store), "--listen", ep,
         "--no-redis-relay", "--front", "native"],
        cwd=root, stdout=open(tmp / "serve.log", "a"),  # noqa: SIM115
        stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
    )  # fmt: skip
    out: dict[str, dict[str, float]] = {}
    try:
        bench_grpc.wait_port(port, proc)
        phases = {
            "send": ("rmq_send", ep, "AbTopic", messages, 1024, 256),
            "receive_ack": ("rmq_recv", ep, "AbTopic", "GID_ab", messages, 120.0),
        }
        for name, args in phases.items():
            before, sw0 = thread_cpu(proc.pid), switches(proc.pid)
            (r,) = bench_grpc.run_workers(args[0], [list(args[1:])], str(tmp))
            after, sw1 = thread_cpu(proc.pid), switches(proc.pid)
            used = {t: after[t] - before.get(t, 0.0) for t in after}
            done = max(1, r["done"])
            server = sum(used.values()) / done * 1e6
            client = r["cpu_s"] / done * 1e6
            out[name] = {
                "server_us": round(server, 1),
                "loop_thread_us": round(used.get(str(proc.pid), 0.0) / done * 1e6, 1),
                "loop_switches": round((sw1 - sw0) / done, 2),
                "client_us": round(client, 1),
                "server_over_client": round(server / client, 4),
                "errors": r["errors"],
            }
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--base", default=None, help="the older commit")
    ap.add_argument(
        "--base-env",
        action="append",
        default=[],
        metavar="K=V",
        help="environment of the base side's server (without --base: this "
        "checkout with these settings)",
    )
    ap.add_argument(
        "--env", action="append", default=[], metavar="K=V",
        help="environment of this checkout's server",
    )  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--messages", type=int, default=10000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.base is None and not (a.base_env or a.env):
        ap.error("--base REV, or --base-env/--env settings to compare")
    envs = {
        "base": dict(kv.split("=", 1) for kv in a.base_env),
        "this": dict(kv.split("=", 1) for kv in a.env),
    }
    tmp = Path(tempfile.mkdtemp(prefix="front-ab-"))
    wt = tmp / "base"
    venv = ROOT / ".venv"
    res: dict = {
        "base": a.base,
        "env": envs,
        "rounds": [],
        "load_before": os.getloadavg(),
    }
    try:
        if a.base is not None:
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(wt), a.base],
                cwd=ROOT, check=True, capture_output=True,
            )  # fmt: skip
            subprocess.run(
                ["make", "--no-print-directory", "-C", str(wt), "native",
                 f"VENV={venv}"],
                check=True, capture_output=True,
            )  # fmt: skip
        sides = {"base": wt if a.base is not None else ROOT, "this": ROOT}
        for i in range(a.rounds):
            row = {}
            for side, root in sides.items():
                (tmp / side).mkdir(exist_ok=True)
                row[side] = one_side(root, a.messages, tmp / side, envs[side])
                parts = [
                    f"{ph}: server {v['server_us']:.0f} us (loop thread "
                    f"{v['loop_thread_us']:.0f}, {v['loop_switches']:.2f} "
                    f"switches) client {v['client_us']:.0f} "
                    f"server/client {v['server_over_client']:.3f}"
                    for ph, v in row[side].items()
                ]
                print(f"round {i + 1} {side:4s} " + "  ".join(parts), flush=True)
            res["rounds"].append(row)
        res["load_after"] = os.getloadavg()
        print(f"medians over {a.rounds} rounds (base {a.base or envs['base']}):")
        res["medians"] = {}
        for ph in ("send", "receive_ack"):
            med = {
                side: {
                    k: statistics.median(r[side][ph][k] for r in res["rounds"])
                    for k in (
                        "server_us",
                        "loop_switches",
                        "client_us",
                        "server_over_client",
                    )
                }
                for side in sides
            }
            res["medians"][ph] = med
            b, t = med["base"], med["this"]
            change = t["server_over_client"] / b["server_over_client"]
            print(
                f"  {ph}: server/client {b['server_over_client']:.3f} -> "
                f"{t['server_over_client']:.3f} ({(change - 1) * 100:+.0f}%); "
                f"server us {b['server_us']:.0f} -> {t['server_us']:.0f}; "
                f"loop thread switches a message {b['loop_switches']:.2f} -> "
                f"{t['loop_switches']:.2f}"
            )
        print(f"load average before {res['load_before']}, after {res['load_after']}")
        if a.json:
            Path(a.json).write_text(json.dumps(res, indent=1))
    finally:
        subprocess.run(
            ["git", "worktree", "remove", "--force", str(wt)],
            cwd=ROOT, capture_output=True,
        )  # fmt: skip
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
