"""Store integrity benchmark: consume with offset commits, recovery after SIGKILL,
and the append figures of docs/store.md.

Usage: python bench/store_integrity.py [--messages 200000] [--rounds 3]
                                       [--recovery-bytes 1000000000]
                                       [--segment-size 1073741824]
                                       [--append-seconds 3] [--redis URL]
                                       [--parts consume,recovery,append]
                                       [--dir DIR] [--json out.json]

* consume: fill topic ``Consume`` with N 256-byte messages over 4 queues, then
  read everything back with pulls of 32 (each body touched, as in
  ``broker_core.benchmark``): (a) without committing offsets, (b) calling
  ``commit_offset`` after every pull. A and B alternate (ABAB...) ``--rounds``
  times; medians and the ratio b/a are reported (target: ratio >= 0.5). A pass
  that runs past ``--pass-limit`` seconds stops early and is rated on what it
  read (marked "capped").
* recovery: a child process opens a store (``segment_size`` 1 GiB, flush
  "async"), sends 1 KiB messages in batches of 100 until the commit log holds
  ``--recovery-bytes``, keeps sending for ``--tail-seconds`` (paced so the
  segment is not overrun) so the checkpoint written by the flusher every 500 ms
  lags the log end, then SIGKILLs itself. A fresh process then times
  ``Broker.open`` (abnormal recovery) and reports ``recovery_info`` and its peak
  RSS (``ru_maxrss``; also ``VmHWM``) before and after the open. The page cache
  is not dropped: the log written a moment earlier is read from memory, so the
  figure is a lower bound for a real crash. Targets: <= 1 s, <= 150 MiB.
  The probe is started through ``/bin/sh`` (which forks) because Linux carries
  the launching process's peak RSS into ``ru_maxrss`` across ``exec``.
* append: runs ``bench/produce.py`` (``python -m broker_core bench``, the
  command behind the Performance table of docs/store.md) with the same
  ``--seconds`` and includes its table and JSON.

Prints readable tables and the JSON result; temporary stores live under
/tmp (``tempfile``) and are removed at the end unless ``--dir`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker_core import Broker, Message, PullStatus  # noqa: E402
from broker_core.benchmark import table as append_table  # noqa: E402
from broker_core.checkpoint import read_checkpoint  # noqa: E402

QUEUES = 4
PULL = 32
PARTS = ("consume", "recovery", "append")


# -- 1. consume with and without offset commits ------------------------------------
def _fill(b: Broker, topic: str, n: int, size: int) -> float:
    body = b"x" * size
    batches = [
        [Message(topic, body, queue_id=q) for _ in range(128)] for q in range(QUEUES)
    ]
    t = time.perf_counter()
    done = 0
    i = 0
    while done < n:
        msgs = batches[i % QUEUES][: min(128, n - done)]
        b.send_batch(msgs)
        done += len(msgs)
        i += 1
    return time.perf_counter() - t


def _consume_pass(
    b: Broker, topic: str, group: str, commit: bool, limit_s: float
) -> dict[str, Any]:
    """Pull every queue from 0 in pulls of 32; commit after each pull if asked."""
    n = pulls = 0
    capped = False
    t0 = time.perf_counter()
    deadline = t0 + limit_s
    for q in range(QUEUES):
        off = 0
        while True:
            r = b.pull(group, topic, q, off, PULL)
            if r.status is not PullStatus.FOUND:
                break
            for m in r.messages:
                n += len(m.body) > 0
            off = r.next_offset
            pulls += 1
            if commit:
                b.commit_offset(group, topic, q, off)
            if time.perf_counter() > deadline:
                capped = True
                break
        if capped:
            break
    dt = time.perf_counter() - t0
    return {
        "messages": n,
        "pulls": pulls,
        "seconds": round(dt, 3),
        "msg_per_s": round(n / dt),
        "capped": capped,
    }


def bench_consume(
    root: Path, n: int, size: int, rounds: int, limit_s: float
) -> dict[str, Any]:
    store_dir = root / "consume"
    topic = "Consume"
    out: dict[str, Any] = {
        "messages": n,
        "body_bytes": size,
        "queues": QUEUES,
        "pull_batch": PULL,
        "rounds": rounds,
    }
    with Broker.open(store_dir) as b:
        b.create_topic(topic, read_queue_nums=QUEUES, write_queue_nums=QUEUES)
        out["fill_seconds"] = round(_fill(b, topic, n, size), 2)
        b.store.build_index()  # leave no index backlog to the flusher thread
        a_runs: list[dict[str, Any]] = []
        b_runs: list[dict[str, Any]] = []
        for i in range(rounds):
            a_runs.append(_consume_pass(b, topic, f"bench_a{i}", False, limit_s))
            b_runs.append(_consume_pass(b, topic, f"bench_b{i}", True, limit_s))
        # Check that the commits of the last B pass were taken.
        last = b_runs[-1]
        if not last["capped"]:
            got = sum(
                b.committed_offset(f"bench_b{rounds - 1}", topic, q)
                for q in range(QUEUES)
            )
            out["committed_total_last_b"] = got
    shutil.rmtree(store_dir, ignore_errors=True)
    med_a = statistics.median(r["msg_per_s"] for r in a_runs)
    med_b = statistics.median(r["msg_per_s"] for r in b_runs)
    out.update(
        no_commit_runs=a_runs,
        commit_runs=b_runs,
        no_commit_msg_per_s=round(med_a),
        commit_msg_per_s=round(med_b),
        ratio=round(med_b / med_a, 3) if med_a else None,
        target_ratio=0.5,
    )
    return out


# -- 2. abnormal recovery after SIGKILL ---------------------------------------------
WRITER = r"""
import json, os, sys, time
sys.path.insert(0, {root!r})
from broker_core import Broker, Message
path, target, seg, tail = {path!r}, {target}, {seg}, {tail}
b = Broker.open(path, flush="async", segment_size=seg)
msgs = [Message("Recover", b"r" * 1024) for _ in range(100)]
t0 = time.perf_counter()
sent = 0
while b.store.max_physical_offset() < target:
    b.send_batch(msgs)
    sent += 100
fill = time.perf_counter() - t0
# Keep appending for `tail` seconds, paced to use at most half of the room
# left in the segment (so the log stays in it), then die without closing.
start = b.store.max_physical_offset()
room = max(0, seg - start % seg) // 2
t1 = time.perf_counter()
while (el := time.perf_counter() - t1) < tail:
    if b.store.max_physical_offset() - start < room * min(1.0, el / tail):
        b.send_batch(msgs)
        sent += 100
    else:
        time.sleep(0.001)
end = b.store.max_physical_offset()
print(json.dumps({{"messages": sent, "fill_seconds": fill, "log_end": end,
                  "tail_bytes": end - start, "killed_at_ms": int(time.time() * 1000)}}),
      flush=True)
os.kill(os.getpid(), 9)
"""

PROBE = r"""
import json, resource, sys, time
def rss():
    st = open("/proc/self/status").read()
    kib = lambda k: int(st.split(k + ":")[1].split()[0])
    return {{"ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
             "vm_hwm_mib": kib("VmHWM") / 1024, "vm_rss_mib": kib("VmRSS") / 1024}}
sys.path.insert(0, {root!r})
from broker_core import Broker
before = rss()
t = time.perf_counter()
b = Broker.open({path!r})
opened = time.perf_counter() - t
after = rss()
info = b.store.recovery_info
t = time.perf_counter()
b.close()
print(json.dumps({{"open_seconds": opened, "close_seconds": time.perf_counter() - t,
                  "rss_before": before, "rss_after": after,
                  "recovery_info": None if info is None else {{
                      "abnormal": info.abnormal, "verified_from": info.verified_from,
                      "log_end": info.log_end, "seconds": info.seconds,
                      "truncated": getattr(info, "truncated", None),
                      "redispatched_from": getattr(info, "redispatched_from", None),
                  }}}}))
"""


def _run_child(code: str, timeout: float) -> tuple[int, str, str]:
    # sh forks the interpreter (the command is not its last), so the child's
    # ru_maxrss starts from the shell's, not this process's peak RSS.
    p = subprocess.run(
        ["/bin/sh", "-c", '"$@"; exit $?', "sh", sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.returncode, p.stdout, p.stderr


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError(f"no JSON in child output: {text[-2000:]!r}")


def bench_recovery(root: Path, target: int, seg: int, tail: float) -> dict[str, Any]:
    store_dir = root / "recovery"
    rc, so, se = _run_child(
        WRITER.format(
            root=str(ROOT), path=str(store_dir), target=target, seg=seg, tail=tail
        ),
        timeout=900,
    )
    if rc not in (-9, 137):  # killed by SIGKILL (directly or as reported by sh)
        raise RuntimeError(f"writer exited with {rc}: {se[-2000:]}")
    writer = _last_json(so)
    cp = read_checkpoint(store_dir / "checkpoint")
    out: dict[str, Any] = {
        "segment_size": seg,
        "target_bytes": target,
        "writer": {
            k: (round(v, 2) if isinstance(v, float) else v) for k, v in writer.items()
        },
        "abort_marker": (store_dir / "abort").exists(),
        "checkpoint": {
            "flushed_offset": cp.flushed_offset,
            "logics_offset": cp.logics_offset,
            "index_offset": cp.index_offset,
            "age_ms_at_kill": writer["killed_at_ms"] - cp.physic_timestamp
            if cp.physic_timestamp
            else None,
            "bytes_behind_log_end": writer["log_end"]
            - min(cp.flushed_offset, cp.logics_offset),
        },
        "segments": sorted(p.name for p in (store_dir / "commitlog").iterdir()),
        "page_cache": "warm (not dropped)",
    }
    rc, so, se = _run_child(
        PROBE.format(root=str(ROOT), path=str(store_dir)), timeout=900
    )
    if rc != 0:
        raise RuntimeError(f"recovery probe exited with {rc}: {se[-2000:]}")
    probe = _last_json(so)

    def rnd(d: dict[str, Any]) -> dict[str, Any]:
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in d.items()}

    info = probe["recovery_info"]
    if info and isinstance(info.get("seconds"), float):
        info["seconds"] = round(info["seconds"], 3)
    out.update(
        open_seconds=round(probe["open_seconds"], 3),
        close_seconds=round(probe["close_seconds"], 3),
        recovery_info=info,
        rss_before_open=rnd(probe["rss_before"]),
        rss_after_open=rnd(probe["rss_after"]),
        peak_rss_mib=round(probe["rss_after"]["ru_maxrss_mib"], 1),
        target_seconds=1.0,
        target_rss_mib=150,
    )
    shutil.rmtree(store_dir, ignore_errors=True)
    return out


# -- 3. append figures of docs/store.md --------------------------------------------
def bench_append(root: Path, seconds: float, redis: str) -> dict[str, Any]:
    """Run bench/produce.py (``python -m broker_core bench``) as docs/store.md did."""
    out_json = root / "append.json"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "produce.py"),
        "--seconds",
        str(seconds),
        "--redis",
        redis,
        "--workdir",
        str(root),
        "--json",
        str(out_json),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(
            f"bench/produce.py exited with {p.returncode}: {p.stderr[-2000:]}"
        )
    res: dict[str, Any] = json.loads(out_json.read_text())
    res["command"] = f"python bench/produce.py --seconds {seconds:g}"
    return res


# -- report -------------------------------------------------------------------------
def _print_tables(result: dict[str, Any]) -> None:
    c = result.get("consume")
    if c:
        print(
            f"consume: {c['messages']:,} x {c['body_bytes']} B over "
            f"{c['queues']} queues, "
            f"pulls of {c['pull_batch']}, {c['rounds']} rounds ABAB (medians)"
        )
        print(f"{'pass':<34}{'msg/s':>12}{'runs msg/s':>40}")
        for key, runs, name in [
            ("no_commit_msg_per_s", "no_commit_runs", "a) pull, no commit"),
            ("commit_msg_per_s", "commit_runs", "b) pull + commit_offset each pull"),
        ]:
            rs = ", ".join(
                f"{r['msg_per_s']:,}" + ("*" if r["capped"] else "") for r in c[runs]
            )
            print(f"{name:<34}{c[key]:>12,}{rs:>40}")
        ok = "met" if c["ratio"] is not None and c["ratio"] >= 0.5 else "NOT met"
        print(f"{'ratio b/a':<34}{c['ratio']:>12}   (target >= 0.5: {ok})")
        if any(r["capped"] for r in c["no_commit_runs"] + c["commit_runs"]):
            print("  * pass stopped at --pass-limit; rate from the messages read")
        print()
    r = result.get("recovery")
    if r:
        w, cp, info = r["writer"], r["checkpoint"], r["recovery_info"] or {}
        print(
            f"recovery after SIGKILL: {w['log_end']:,} B in "
            f"{len(r['segments'])} segment(s) of "
            f"{r['segment_size']:,} B, {w['messages']:,} x 1 KiB sent "
            f"(fill {w['fill_seconds']} s, +{w['tail_bytes']:,} B in the tail)"
        )
        print(
            f"  checkpoint at kill: age {cp['age_ms_at_kill']} ms, "
            f"flushed {cp['flushed_offset']:,}, "
            f"logics {cp['logics_offset']:,} ({cp['bytes_behind_log_end']:,} B behind)"
        )
        ok_t = "met" if r["open_seconds"] <= 1.0 else "NOT met"
        ok_m = "met" if r["peak_rss_mib"] <= 150 else "NOT met"
        print(
            f"{'Broker.open (abnormal recovery)':<34}{r['open_seconds']:>10} s"
            f"   (target <= 1 s: {ok_t})"
        )
        print(f"{'  recovery_info.seconds':<34}{info.get('seconds')!s:>10} s")
        print(f"{'  abnormal':<34}{info.get('abnormal')!s:>10}")
        print(f"{'  verified_from':<34}{info.get('verified_from', 0):>10,}")
        print(f"{'  log_end':<34}{info.get('log_end', 0):>10,}")
        verified = info.get("log_end", 0) - info.get("verified_from", 0)
        print(f"{'  verified bytes':<34}{verified:>10,}")
        rb, ra = r["rss_before_open"], r["rss_after_open"]
        print(
            f"{'peak RSS (ru_maxrss) after open':<34}{ra['ru_maxrss_mib']:>10} MiB"
            f" (target <= 150: {ok_m}; "
            f"VmHWM {ra['vm_hwm_mib']} MiB)"
        )
        print(
            f"{'  before open (imports)':<34}{rb['ru_maxrss_mib']:>10} MiB"
            f" (VmHWM {rb['vm_hwm_mib']} MiB)"
        )
        print(f"{'  close':<34}{r['close_seconds']:>10} s")
        print(
            "  page cache: warm (not dropped), so the open is a lower bound "
            "for a real crash"
        )
        print()
    a = result.get("append")
    if a:
        print(
            f"append figures: {a['command']} (compare with docs/store.md, Performance)"
        )
        print(append_table(a))
        print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--messages", type=int, default=200_000, help="consume: messages to fill"
    )
    ap.add_argument("--body", type=int, default=256, help="consume: body bytes")
    ap.add_argument("--rounds", type=int, default=3, help="consume: ABAB rounds")
    ap.add_argument(
        "--pass-limit",
        type=float,
        default=5.0,
        help="consume: stop a pass after this many seconds",
    )
    ap.add_argument(
        "--recovery-bytes",
        type=int,
        default=1_000_000_000,
        help="recovery: commit log bytes before the tail",
    )
    ap.add_argument(
        "--segment-size", type=int, default=1 << 30, help="recovery: segment size"
    )
    ap.add_argument(
        "--tail-seconds",
        type=float,
        default=1.5,
        help="recovery: seconds of sending after the fill, before SIGKILL",
    )
    ap.add_argument(
        "--append-seconds",
        type=float,
        default=3.0,
        help="append: seconds per workload of bench/produce.py",
    )
    ap.add_argument(
        "--redis",
        default="redis://127.0.0.1:6379/15",
        help="append: Redis URL ('' to skip)",
    )
    ap.add_argument(
        "--parts", default=",".join(PARTS), help="comma list of " + ",".join(PARTS)
    )
    ap.add_argument(
        "--dir", help="where to put stores (kept); default a temporary dir in /tmp"
    )
    ap.add_argument("--json", help="also write the JSON result to this file")
    a = ap.parse_args()
    parts = [p for p in a.parts.split(",") if p]
    if bad := set(parts) - set(PARTS):
        ap.error(f"unknown parts: {sorted(bad)}")
    tmp = (
        None
        if a.dir
        else tempfile.TemporaryDirectory(prefix="bench-integrity-", dir="/tmp")
    )
    root = Path(a.dir) if a.dir else Path(tmp.name)  # type: ignore[union-attr]
    root.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"cpus": os.cpu_count(), "load_avg_start": os.getloadavg()}
    try:
        # Recovery first: the probes are spawned while this process is small.
        if "recovery" in parts:
            result["recovery"] = bench_recovery(
                root, a.recovery_bytes, a.segment_size, a.tail_seconds
            )
        if "consume" in parts:
            result["consume"] = bench_consume(
                root, a.messages, a.body, a.rounds, a.pass_limit
            )
        if "append" in parts:
            result["append"] = bench_append(root, a.append_seconds, a.redis)
        result["load_avg_end"] = os.getloadavg()
        _print_tables(result)
        text = json.dumps(result, indent=1, default=str)
        print(text)
        if a.json:
            Path(a.json).write_text(text)
    finally:
        if tmp is not None:
            tmp.cleanup()


if __name__ == "__main__":
    main()
