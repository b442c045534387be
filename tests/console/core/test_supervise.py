"""``make run``'s supervision, with the real Procfile under supervisord: SIGKILL
the timers worker, the web process and beat in turn; each comes back by
itself while the gRPC endpoint keeps serving a client that sends throughout;
with the endpoint stopped, the console still shows the store (the admin API
is a process of its own) and ``/healthz`` names the endpoint; and Ctrl-C
(SIGINT) then stops every process and frees every port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest
import redis
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc as sgrpc

from tests.conftest import ROOT
from tests.support import free_port, redis_db

pytestmark = [pytest.mark.services, pytest.mark.slow]


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


def wait(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_a_dead_console_process_comes_back_and_the_broker_keeps_serving(
    tmp_path: Path,
) -> None:
    redis_url = redis_db(11)
    redis.Redis.from_url(redis_url).flushdb()
    grpc_port, admin_port, web_port = free_port(), free_port(), free_port()
    token = tmp_path / "admin_token"
    token.write_text("supervise-test-token-0123456789")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "VAR_DIR": str(tmp_path / "var"),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": redis_url,
        "BROKER_STORE_DIR": str(tmp_path / "store"),
        "GRPC_LISTEN": f"127.0.0.1:{grpc_port}",
        "ADMIN_LISTEN": f"127.0.0.1:{admin_port}",
        "WEB_LISTEN": f"127.0.0.1:{web_port}",
        "CLUSTER_ADMIN_TOKEN_FILE": str(token),
        "WEB_WORKERS": "1",
        "WORKER_CONCURRENCY": "1",
        # beat counts as down 3.5 intervals after its last tick (35 s at the
        # default 10 s): 10.5 s here, for the beat stop below
        "BEAT_HEARTBEAT_INTERVAL": "3",
        "PYTHONUNBUFFERED": "1",
    }
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v0"],
        cwd=ROOT, env=env, check=True,
    )  # fmt: skip
    # An operator's API token, for the console's store pages.
    made = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c",
         "from django.contrib.auth.models import User;"
         "from rest_framework.authtoken.models import Token;"
         "u = User.objects.create_superuser('ops', 'ops@x.invalid', 'pw-0123456789');"
         "print(Token.objects.create(user=u).key)"],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    api_token = made.stdout.strip().splitlines()[-1]

    def console_get(path: str) -> tuple[int, dict]:
        import json
        import urllib.error
        import urllib.request

        req = urllib.request.Request(
            f"http://127.0.0.1:{web_port}{path}",
            headers={"Authorization": f"Token {api_token}"},
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    # Delayed messages go to a DELAY topic (the endpoint checks topic types).
    subprocess.run(
        [sys.executable, "-m", "broker_core", "topic", "create",
         str(tmp_path / "store"), "LiveDelay", "--type", "DELAY", "--queues", "2"],
        cwd=ROOT, env=env, check=True, capture_output=True,
    )  # fmt: skip
    sv = tmp_path / "sv"
    conf = sv / "supervisord.conf"
    out = open(tmp_path / "run.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "console.core.supervise", "--dir", str(sv)],
        cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    ctl = [str(Path(sys.executable).with_name("supervisorctl")), "-c", str(conf)]

    def pid(name: str) -> int:
        r = subprocess.run([*ctl, "pid", name], capture_output=True, text=True)
        try:
            return int(r.stdout.strip() or 0)
        except ValueError:
            return 0

    def running(name: str) -> bool:
        r = subprocess.run([*ctl, "status", name], capture_output=True, text=True)
        return " RUNNING " in r.stdout

    failures: list[str] = []
    sent = [0]
    #: the ids of the delayed messages the endpoint acknowledged
    delayed: list[str] = []
    stop = threading.Event()

    def client() -> None:
        stub = sgrpc.MessagingServiceStub(
            grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        )
        md = (("x-mq-client-id", "supervise-test"),)
        while not stop.is_set():
            m = pb.Message(
                topic=pb.Resource(name="Live"),
                system_properties=pb.SystemProperties(
                    message_id=os.urandom(8).hex(), body_encoding=pb.IDENTITY
                ),
                body=b"x",
            )
            try:
                r = stub.SendMessage(
                    spb.SendMessageRequest(messages=[m]), metadata=md, timeout=5
                )
                if r.entries[0].status.code != pb.Code.OK:
                    failures.append(str(r))
                else:
                    sent[0] += 1
            except grpc.RpcError as exc:
                failures.append(str(exc))
            # And one due 2 s later, delivered by the timers worker's ticks.
            mid = os.urandom(8).hex()
            sp = pb.SystemProperties(message_id=mid, body_encoding=pb.IDENTITY)
            sp.delivery_timestamp.FromMilliseconds(int(time.time() * 1000) + 2000)
            d = pb.Message(
                topic=pb.Resource(name="LiveDelay"), system_properties=sp, body=b"d"
            )
            try:
                r = stub.SendMessage(
                    spb.SendMessageRequest(messages=[d]), metadata=md, timeout=5
                )
                if r.entries[0].status.code != pb.Code.OK:
                    failures.append(str(r))
                else:
                    delayed.append(mid)
            except grpc.RpcError as exc:
                failures.append(str(exc))
            time.sleep(0.05)

    thread = threading.Thread(target=client)
    children: list[int] = []
    try:
        names = ("web", "worker", "reports", "beat", "grpc", "admin")
        wait(lambda: all(running(n) for n in names), 120, "every process RUNNING")
        wait(lambda: listening(grpc_port) and listening(web_port), 60, "the ports")
        grpc_pid = pid("grpc")
        thread.start()
        wait(lambda: sent[0] > 5, 30, "the client's first sends")
        for name in ("worker", "web", "beat"):
            before = pid(name)
            assert before > 0, name
            os.kill(before, signal.SIGKILL)
            t0 = time.monotonic()
            wait(lambda n=name, b=before: pid(n) not in (0, b) and running(n),
                 60, f"{name} to come back")  # fmt: skip
            print(f"{name} back in {time.monotonic() - t0:.1f} s")
            assert pid("grpc") == grpc_pid  # never stopped because another died
            if name == "web":
                wait(lambda: listening(web_port), 30, "the web port again")
        sent_before = sent[0]
        wait(lambda: sent[0] > sent_before + 5, 30, "more sends")
        # Each restarted process has proved itself alive again (beat writes
        # its key once it ticks: under load a restarted beat took long enough
        # that the next check found it, not only the stopped worker, down).
        wait(lambda: console_get("/healthz")[0] == 200, 60, "/healthz up again first")

        def named_while_stopped(name: str, timeout: float) -> None:
            """``name`` stopped: /healthz names it, and only it, while it is
            down; started again: /healthz is 200."""
            subprocess.run([*ctl, "stop", name], check=True, capture_output=True)
            health = wait(
                lambda: (lambda r: r if r[0] == 503 else None)(console_get("/healthz")),
                timeout, f"/healthz to name the stopped {name}",
            )  # fmt: skip
            assert health[1]["down"] == [name], health
            subprocess.run([*ctl, "start", name], check=True, capture_output=True)
            wait(lambda: console_get("/healthz")[0] == 200, 60, "/healthz up again")

        named_while_stopped("worker", 30)
        # Beat: once its last tick is older than three and a half intervals.
        named_while_stopped("beat", 60)
        # The endpoint stops (an outage): the console still sees the store
        # through the admin API, and its health names the endpoint.
        stop.set()
        thread.join(10)
        status, page = console_get("/api/topics/")
        assert status == 200 and "Live" in str(page), (status, page)
        subprocess.run([*ctl, "stop", "grpc"], check=True, capture_output=True)
        assert not listening(grpc_port)
        status, page = console_get("/api/topics/")
        assert status == 200 and "Live" in str(page), (status, page)
        health = wait(
            lambda: (lambda r: r if r[0] == 503 else None)(console_get("/healthz")),
            30, "/healthz to say the endpoint is down",
        )  # fmt: skip
        assert "grpc" in health[1]["down"], health
        subprocess.run([*ctl, "start", "grpc"], check=True, capture_output=True)
        wait(lambda: listening(grpc_port), 60, "the endpoint again")
        # Every delayed message acknowledged is delivered exactly once,
        # through every kill and stop above.
        from broker_core import Broker

        def delivered() -> list[str]:
            with Broker.open(tmp_path / "store") as b:
                b.store.refresh_topics()
                out = []
                for q in range(2):
                    off = 0
                    while True:
                        r = b.pull("check", "LiveDelay", q, off, 256)
                        if not r.messages:
                            break
                        out += [m.properties.get("UNIQ_KEY", "") for m in r.messages]
                        off = r.next_offset
                return out

        assert delayed
        wait(lambda: len(delivered()) >= len(delayed), 90, "every delayed message")
        got = delivered()
        assert sorted(got) == sorted(delayed), (len(got), len(delayed))
        children = [pid(n) for n in names]
    finally:
        stop.set()
        if thread.is_alive():
            thread.join(10)
        log_text = (tmp_path / "run.log").read_text()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in make run's terminal
        try:
            proc.wait(60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        out.close()
        redis.Redis.from_url(redis_url).flushdb()
    assert not failures, failures[:3]
    assert proc.returncode == 0, log_text[-3000:]
    # Nothing is left behind: no process of any program's group, no port.
    for child in children:
        with pytest.raises(ProcessLookupError):
            os.killpg(child, 0)
    assert not any(listening(p) for p in (grpc_port, admin_port, web_port))
