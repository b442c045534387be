"""RabbitMQ and NATS JetStream as private bench peers on this machine.

    python bench/peers/services.py start  rabbitmq|nats|all [--fresh]
    python bench/peers/services.py stop   [rabbitmq|nats|all]
    python bench/peers/services.py status [rabbitmq|nats|all]

``bench/grpc.py`` compares the gRPC endpoint with RabbitMQ at 127.0.0.1:5672
(guest/guest) and NATS JetStream at 127.0.0.1:4222. ``start`` makes them
answer there:

* When the port already answers with the right protocol (an AMQP 0-9-1
  Connection.Start; a NATS INFO line plus a JetStream API reply), that server
  is used as it is and is never stopped by ``stop``: it is not ours.
* Otherwise what is missing is installed (Debian's ``rabbitmq-server``, with
  service starts denied by policy-rc.d during the install so the system
  service is not started; ``nats-server`` from Debian when it has JetStream,
  else ``go install github.com/nats-io/nats-server/v2@latest`` into
  ``var/peers/bin``), and a PRIVATE instance is started in the background with
  its own data and log directory under ``var/peers/<name>/`` (RabbitMQ: its
  own node name, RABBITMQ_MNESIA_BASE, RABBITMQ_LOG_BASE, config, plugin list
  and HOME for the Erlang cookie; nothing under /etc or /var/lib is used).
  ``start`` waits until it answers and records its pids in
  ``var/peers/services-state.json``.

``stop`` stops exactly the processes it recorded (after checking each one's
environment still carries our marker): SIGTERM, then SIGKILL after a timeout;
and the ``epmd`` that the private RabbitMQ started when none ran before (only
when no other Erlang node is registered with it). Data stays under var/peers/
for the next start (``start --fresh`` wipes it). See docs/peers.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PEERS_DIR = ROOT / "var" / "peers"
STATE_FILE = PEERS_DIR / "services-state.json"
LOCAL_BIN = PEERS_DIR / "bin"
HOST = "127.0.0.1"
RABBITMQ_PORT = 5672
NATS_PORT = 4222
MARKER_ENV = "BENCH_PEER_MARKER"
NAMES = ("rabbitmq", "nats")


class ServiceError(RuntimeError):
    pass


def _log(msg: str) -> None:
    print(f"[peers] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ probes


def rabbitmq_answers(port: int = RABBITMQ_PORT, timeout: float = 2.0) -> bool:
    """True when an AMQP 0-9-1 server answers the protocol header with a
    method frame (Connection.Start)."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"AMQP\x00\x00\x09\x01")
            head = s.recv(7)
            return len(head) == 7 and head[0] == 1  # frame type 1: method
    except OSError:
        return False


def nats_answers(
    port: int = NATS_PORT, timeout: float = 2.0, jetstream: bool = True
) -> bool:
    """True when a NATS server sends its INFO and (with ``jetstream``) answers
    a JetStream API request ($JS.API.INFO) on a reply subject."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.settimeout(timeout)
            buf = b""
            while b"\r\n" not in buf:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                buf += chunk
            if not buf.startswith(b"INFO "):
                return False
            if not jetstream:
                return True
            inbox = b"_INBOX.benchpeer"
            s.sendall(
                b'CONNECT {"verbose":false,"pedantic":false}\r\n'
                b"SUB " + inbox + b" 1\r\n"
                b"PUB $JS.API.INFO " + inbox + b" 0\r\n\r\nPING\r\n"
            )
            buf = b""
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                chunk = s.recv(65536)
                if not chunk:
                    return False
                buf += chunk
                if b"MSG " + inbox in buf:
                    # JetStream off: "503 No Responders" comes as a status
                    # message (HMSG), never as a MSG with a body.
                    return b"account_info_response" in buf or b'"type"' in buf
                if b"HMSG " + inbox in buf:
                    return False
            return False
    except OSError:
        return False


def _port_open(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=0.5):
            return True
    except OSError:
        return False


# --------------------------------------------------------------- processes


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        k, sep, v = item.partition(b"=")
        if sep:
            out[k.decode(errors="replace")] = v.decode(errors="replace")
    return out


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _all_pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _pids_named(comm: str) -> list[int]:
    return [p for p in _all_pids() if _comm(p) == comm and _alive(p)]


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in _all_pids():
        children.setdefault(_ppid(p), []).append(p)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _ours(pid: int, marker: str) -> bool:
    return _alive(pid) and _environ(pid).get(MARKER_ENV) == marker


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _stop_pids(pids: list[int], marker: str, timeout: float) -> str:
    """SIGTERM the first pid (the one that shuts the rest down), wait for all,
    SIGKILL what is left after ``timeout``."""
    live = [p for p in pids if _ours(p, marker)]
    if not live:
        return "not running"
    try:
        os.kill(live[0], signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in live:
            _reap(p)
        if not any(_alive(p) for p in live):
            return "stopped"
        time.sleep(0.2)
    for p in live:
        if _ours(p, marker):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    time.sleep(0.5)
    return f"killed after {timeout:.0f}s"


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        return subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=log.parent,
            start_new_session=True,
        )


def _wait(ready: Any, proc: subprocess.Popen[bytes], what: str, log: Path,
          timeout: float) -> float:  # fmt: skip
    t0 = time.monotonic()
    while not ready():
        if proc.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-20:]
            raise ServiceError(
                f"{what} exited ({proc.returncode}):\n" + "\n".join(tail)
            )
        if time.monotonic() - t0 > timeout:
            raise ServiceError(
                f"{what} did not answer within {timeout:.0f}s; see {log}"
            )
        time.sleep(0.3)
    return time.monotonic() - t0


# ---------------------------------------------------------------- install


def _apt_install(*packages: str) -> None:
    """apt-get install what is missing, with service starts denied so that
    Debian's postinst does not start the system instance."""
    if shutil.which("apt-get") is None:
        raise ServiceError(f"apt-get not found: install {' '.join(packages)} by hand")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = False
    if os.geteuid() == 0 and not policy.exists():
        policy.write_text("#!/bin/sh\n# bench/peers/services.py: no starts\nexit 101\n")
        policy.chmod(0o755)
        made_policy = True
    try:
        _log(f"apt-get install {' '.join(packages)}")
        cmd = [*sudo, "apt-get", "install", "-y", "-qq", "--no-install-recommends"]
        if subprocess.run([*cmd, *packages], env=env).returncode != 0:
            subprocess.run([*sudo, "apt-get", "update", "-qq"], env=env, check=False)
            if subprocess.run([*cmd, *packages], env=env).returncode != 0:
                raise ServiceError(f"apt-get install {' '.join(packages)} failed")
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)


def rabbitmq_server_bin() -> str:
    # Debian's /usr/sbin/rabbitmq-server is a wrapper that switches to the
    # rabbitmq user; the script under /usr/lib runs as whoever calls it.
    for cand in ("/usr/lib/rabbitmq/bin/rabbitmq-server",):
        if os.access(cand, os.X_OK):
            return cand
    found = shutil.which("rabbitmq-server")
    if found:
        return found
    _apt_install("rabbitmq-server")
    if os.access("/usr/lib/rabbitmq/bin/rabbitmq-server", os.X_OK):
        return "/usr/lib/rabbitmq/bin/rabbitmq-server"
    raise ServiceError("rabbitmq-server not found after installing it")


def _has_jetstream(binary: str) -> bool:
    try:
        out = subprocess.run(
            [binary, "--help"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--jetstream" in out.stdout + out.stderr


def nats_server_bin() -> str:
    local = LOCAL_BIN / "nats-server"
    if os.access(local, os.X_OK) and _has_jetstream(str(local)):
        return str(local)
    found = shutil.which("nats-server")
    if found and _has_jetstream(found):
        return found
    if not found:
        try:
            _apt_install("nats-server")
        except ServiceError as e:
            _log(f"{e}; trying go install")
        found = shutil.which("nats-server")
        if found and _has_jetstream(found):
            return found
    if shutil.which("go") is None:
        raise ServiceError("no nats-server with JetStream, and no go to build one")
    _log("go install github.com/nats-io/nats-server/v2@latest -> var/peers/bin")
    LOCAL_BIN.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, GOBIN=str(LOCAL_BIN), CGO_ENABLED="0")
    subprocess.run(
        ["go", "install", "github.com/nats-io/nats-server/v2@latest"],
        env=env,
        check=True,
    )
    if os.access(local, os.X_OK):
        return str(local)
    raise ServiceError("go install did not produce var/peers/bin/nats-server")


# ------------------------------------------------------------------ state


def _load() -> dict[str, Any]:
    try:
        return json.loads(STATE_FILE.read_text())
    except (OSError, ValueError):
        return {}


def _save(state: dict[str, Any]) -> None:
    STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
    if state:
        STATE_FILE.write_text(json.dumps(state, indent=2) + "\n")
    else:
        STATE_FILE.unlink(missing_ok=True)


# ----------------------------------------------------------------- starts


def start_rabbitmq(fresh: bool = False, timeout: float = 120.0) -> dict[str, Any]:
    if rabbitmq_answers():
        _log(f"RabbitMQ already answers on {HOST}:{RABBITMQ_PORT}: using it as it is")
        return {"external": True, "port": RABBITMQ_PORT}
    if _port_open(RABBITMQ_PORT):
        raise ServiceError(f"port {RABBITMQ_PORT} is taken by something not AMQP")
    server = rabbitmq_server_bin()
    base = (PEERS_DIR / "rabbitmq").resolve()
    if fresh:
        shutil.rmtree(base / "mnesia", ignore_errors=True)
    for sub in ("mnesia", "log", "home"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    (base / "rabbitmq.conf").write_text(
        "# written by bench/peers/services.py\n"
        f"listeners.tcp.default = {HOST}:{RABBITMQ_PORT}\n"
        "loopback_users.guest = true\n"
    )
    (base / "enabled_plugins").write_text("[].\n")
    (base / "rabbitmq-env.conf").write_text("# private: no system rabbitmq-env.conf\n")
    cookie = base / "home" / ".erlang.cookie"
    if not cookie.exists():
        cookie.write_text(os.urandom(16).hex().upper())
        cookie.chmod(0o400)
    marker = f"rabbitmq:{base}"
    env = dict(os.environ)
    env.update(
        {
            MARKER_ENV: marker,
            "HOME": str(base / "home"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": "benchpeer@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(RABBITMQ_PORT),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
        }
    )
    epmd_before = set(_pids_named("epmd"))
    log = base / "log" / "server.out"
    t0 = time.monotonic()
    proc = _spawn([server], env, log)
    try:
        took = _wait(rabbitmq_answers, proc, "RabbitMQ", log, timeout)
    except BaseException:
        _stop_pids([proc.pid, *_descendants(proc.pid)], marker, 30)
        raise
    beams = [p for p in _descendants(proc.pid) if _comm(p) == "beam.smp"]
    epmd_new = [p for p in _pids_named("epmd") if p not in epmd_before]
    _log(f"RabbitMQ (private, {base}) answers on {HOST}:{RABBITMQ_PORT} "
         f"after {took:.1f}s")  # fmt: skip
    return {
        "external": False,
        "port": RABBITMQ_PORT,
        "marker": marker,
        "pids": [proc.pid, *beams],
        "epmd_pids": epmd_new if not epmd_before else [],
        "dir": str(base),
        "start_seconds": round(time.monotonic() - t0, 2),
    }


def start_nats(fresh: bool = False, timeout: float = 60.0) -> dict[str, Any]:
    if nats_answers():
        _log(f"NATS JetStream already answers on {HOST}:{NATS_PORT}: using it as it is")
        return {"external": True, "port": NATS_PORT}
    if _port_open(NATS_PORT):
        raise ServiceError(
            f"port {NATS_PORT} answers but not as NATS with JetStream "
            "(a nats-server without -js?)"
        )
    server = nats_server_bin()
    base = (PEERS_DIR / "nats").resolve()
    if fresh:
        shutil.rmtree(base / "jetstream", ignore_errors=True)
    (base / "jetstream").mkdir(parents=True, exist_ok=True)
    marker = f"nats:{base}"
    env = dict(os.environ, **{MARKER_ENV: marker})
    log = base / "nats-server.log"
    cmd = [
        server,
        "-js",
        "-sd",
        str(base / "jetstream"),
        "-a",
        HOST,
        "-p",
        str(NATS_PORT),
        "-n",
        "benchpeer",
        "-P",
        str(base / "nats-server.pid"),
    ]
    t0 = time.monotonic()
    proc = _spawn(cmd, env, log)
    try:
        took = _wait(nats_answers, proc, "nats-server", log, timeout)
    except BaseException:
        _stop_pids([proc.pid], marker, 10)
        raise
    _log(f"NATS JetStream (private, {base}) answers on {HOST}:{NATS_PORT} "
         f"after {took:.1f}s")  # fmt: skip
    return {
        "external": False,
        "port": NATS_PORT,
        "marker": marker,
        "pids": [proc.pid],
        "dir": str(base),
        "start_seconds": round(time.monotonic() - t0, 2),
    }


STARTERS = {"rabbitmq": start_rabbitmq, "nats": start_nats}
PROBES = {"rabbitmq": rabbitmq_answers, "nats": nats_answers}


def start(names: list[str], fresh: bool = False) -> dict[str, Any]:
    state = _load()
    for name in names:
        old = state.get(name)
        if old and not old.get("external"):
            if any(_ours(p, old["marker"]) for p in old["pids"]) and PROBES[name]():
                _log(f"{name}: our private instance is already running")
                continue
            stop([name])  # a half-dead one of ours: clear it first
            state = _load()
        state[name] = STARTERS[name](fresh=fresh)
        _save(state)
    return state


def _stop_epmd(pids: list[int]) -> str:
    live = [p for p in pids if _alive(p) and _comm(p) == "epmd"]
    if not live:
        return ""
    names = subprocess.run(["epmd", "-names"], capture_output=True, text=True)
    registered = [ln for ln in names.stdout.splitlines() if ln.startswith("name ")]
    if registered:
        return f"; epmd left running (other nodes registered: {len(registered)})"
    for p in live:
        try:
            os.kill(p, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for _ in range(25):
        for p in live:
            _reap(p)
        if not any(_alive(p) for p in live):
            break
        time.sleep(0.2)
    return "; epmd stopped"


def stop(names: list[str], timeout: float = 60.0) -> dict[str, str]:
    state = _load()
    how: dict[str, str] = {}
    for name in names:
        st = state.get(name)
        if not st:
            how[name] = "not started by us"
            continue
        if st.get("external"):
            how[name] = "was already running before us: left alone"
        else:
            pids = list(st["pids"])
            # Everything still alive below the first pid, recorded or not
            # (RabbitMQ's beam.smp, erl_child_setup, inet_gethost).
            pids += [p for p in _descendants(pids[0]) if p not in pids]
            how[name] = _stop_pids(pids, st["marker"], timeout)
            # (epmd carries our marker too, but other nodes may use it now:
            # _stop_epmd decides.)
            leftovers = [
                p for p in _all_pids() if _ours(p, st["marker"]) and _comm(p) != "epmd"
            ]
            for p in leftovers:
                try:
                    os.kill(p, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if leftovers:
                how[name] += f" (+{len(leftovers)} leftover killed)"
            how[name] += _stop_epmd(st.get("epmd_pids", []))
        del state[name]
    _save(state)
    return how


def status(names: list[str]) -> dict[str, str]:
    state = _load()
    out = {}
    for name in names:
        st = state.get(name)
        answers = PROBES[name]()
        port = RABBITMQ_PORT if name == "rabbitmq" else NATS_PORT
        where = f"{HOST}:{port}"
        if st and not st.get("external"):
            alive = [p for p in st["pids"] if _ours(p, st["marker"])]
            out[name] = (
                f"private instance, pids {alive or st['pids']} "
                f"{'running' if alive else 'NOT running'}, "
                f"{'answers' if answers else 'does NOT answer'} on {where}, "
                f"dir {st['dir']}"
            )
        elif st:
            out[name] = f"external (not ours), {'answers' if answers else 'gone'}"
        else:
            out[name] = f"not started by us; {where} {'answers' if answers else 'down'}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="RabbitMQ and NATS as bench peers")
    ap.add_argument("command", choices=["start", "stop", "status"])
    ap.add_argument("what", nargs="?", default="all", choices=[*NAMES, "all"])
    ap.add_argument("--fresh", action="store_true", help="start: wipe data first")
    ap.add_argument("--timeout", type=float, default=60.0, help="stop: SIGKILL after")
    a = ap.parse_args(argv)
    names = list(NAMES) if a.what == "all" else [a.what]
    try:
        if a.command == "start":
            start(names, fresh=a.fresh)
            for n, s in status(names).items():
                print(f"{n}: {s}")
        elif a.command == "stop":
            for n, s in stop(names, a.timeout).items():
                print(f"{n}: {s}")
        else:
            for n, s in status(names).items():
                print(f"{n}: {s}")
    except (ServiceError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
