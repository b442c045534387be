"""Apache RocketMQ (NameServer + proxy in local mode) as a peer on this machine.

    python bench/peers/rocketmq.py fetch  [--version 5.3.3]
    python bench/peers/rocketmq.py start  [--version V] [--grpc-port 18081]
        [--namesrv-port 19876] [--broker-port 20911] [--remoting-port 18080]
        [--heap 512m] [--broker-conf KEY=VALUE ...] [--proxy-conf KEY=JSON ...]
        [--topic NAME:TYPE ...] [--group NAME[:fifo][:ATTEMPTS] ...]
        [--detach] [--keep]
    python bench/peers/rocketmq.py status
    python bench/peers/rocketmq.py stop
    python bench/peers/rocketmq.py controller [--version V] [--keep]

``fetch`` resolves ``org.apache.rocketmq:rocketmq-proxy`` (which brings the
broker and the NameServer) and ``rocketmq-tools`` (mqadmin) from Maven Central
with ``mvn`` (``bench/peers/rocketmq-pom.xml``) and copies the jars into
``var/peers/rocketmq-<version>/lib/``; a second call does nothing.

``start`` runs two JVMs on a fresh temporary directory (ROCKETMQ_HOME,
``user.home``, the store and the logs all go there): the NameServer, and the
proxy in local mode, which runs the broker in the same JVM. It waits until the
broker is registered with the NameServer and the gRPC port answers a real
QueryRoute, and reports how long that took. In the foreground it runs until
Ctrl-C; with ``--detach`` it writes ``var/peers/rocketmq-state.json`` and
returns, and ``stop`` uses that file to stop exactly those JVMs (SIGTERM, then
SIGKILL after a timeout) and remove the temporary directory.

Topics and groups are made through a small admin helper of our own
(``RmqPeerAdmin.java``, generated and compiled with javac against the jars
under ``var/peers/rocketmq-<version>/admin/``): one JVM kept open on a pipe for
the life of the peer, so each call costs milliseconds instead of the second or
two that one ``mqadmin`` JVM per call costs (``ApacheRocketMQ.mqadmin`` is
there too, for anything else).

From Python::

    from bench.peers.rocketmq import ApacheRocketMQ, ensure_jars

    with ApacheRocketMQ(grpc_port=18081, broker_conf={"enablePropertyFilter": "true"},
                        heap="512m") as rmq:
        rmq.create_topic("t", "FIFO")
        rmq.create_group("g", fifo=True, max_delivery_attempts=4)
        rmq.grpc_endpoint  # "127.0.0.1:18081"

``controller`` starts a controller-mode cluster in the foreground until
Ctrl-C (``ApacheControllerCluster``: NameServer with the embedded controller,
broker-a master + slave, broker-b, a cluster-mode gRPC proxy per broker, all on
free ports) and prints its access point; bench/cluster.py section 6 uses it.

See docs/peers.md.
"""

from __future__ import annotations

import os
import sys

# Run as a script, this file's directory would come first on sys.path, and
# this file (rocketmq.py) would shadow the official ``rocketmq`` client
# package that the readiness probe uses: keep the directory off sys.path and
# put the repository root there instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
_ROOT = os.path.dirname(os.path.dirname(_HERE))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterable, Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

DEFAULT_VERSION = "5.3.3"
ROOT = Path(_ROOT)
PEERS_DIR = ROOT / "var" / "peers"
POM = Path(_HERE) / "rocketmq-pom.xml"
STATE_FILE = PEERS_DIR / "rocketmq-state.json"

DEFAULT_GRPC_PORT = 18081
DEFAULT_REMOTING_PORT = 18080
DEFAULT_NAMESRV_PORT = 19876
# The broker also listens on broker_port - 2 (its "fast" remoting server) and
# broker_port + 1 (HA).
DEFAULT_BROKER_PORT = 20911

MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED", "PRIORITY", "LITE")

# What every peer runs with unless the caller overrides it. Everything else
# is Apache's default (timer max delay, auto-create, ...).
BASE_BROKER_CONF: dict[str, str] = {
    "brokerRole": "ASYNC_MASTER",
    "flushDiskType": "ASYNC_FLUSH",
    "deleteWhen": "04",
    "fileReservedTime": "48",
}

# A marker on every JVM command line we start, so that pids are checked
# before any signal is sent and a leftover can be found.
MARKER_PROP = "bench.peer"


class PeerError(RuntimeError):
    """Apache RocketMQ could not be fetched, started, stopped or administered."""


# --------------------------------------------------------------------- jars


def peer_home(version: str = DEFAULT_VERSION) -> Path:
    return PEERS_DIR / f"rocketmq-{version}"


def lib_dir(version: str = DEFAULT_VERSION) -> Path:
    return peer_home(version) / "lib"


def ensure_jars(version: str = DEFAULT_VERSION, *, quiet: bool = True) -> Path:
    """The directory of Apache RocketMQ ``version``'s jars, fetched if missing.

    ``mvn -q -B dependency:copy-dependencies`` on ``rocketmq-pom.xml`` (the
    jars are cached in ~/.m2 as usual); the copy is done into a scratch
    directory and renamed into place, with a ``.complete`` marker, so an
    interrupted fetch is never taken for a finished one.
    """
    dest = lib_dir(version)
    if (dest / ".complete").exists():
        return dest
    if shutil.which("mvn") is None:
        raise PeerError("mvn not found: install Maven (apt-get install maven)")
    home = peer_home(version)
    home.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="lib-", dir=home))
    cmd = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(POM),
        f"-Drocketmq.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={scratch}",
        "-DincludeScope=runtime",
    ]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except BaseException:  # Ctrl-C, SIGTERM: no half-filled scratch left
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    if proc.returncode != 0 or not any(scratch.glob("rocketmq-proxy-*.jar")):
        shutil.rmtree(scratch, ignore_errors=True)
        try:
            home.rmdir()  # only when this call made it and left it empty
        except OSError:
            pass
        text = re.sub(r"\x1b\[[0-9;]*m", "", proc.stdout + proc.stderr)
        tail = text.strip().splitlines()[-25:]
        raise PeerError(
            f"mvn could not resolve Apache RocketMQ {version} "
            f"(exit {proc.returncode}):\n" + "\n".join(tail)
        )
    (scratch / ".complete").write_text(f"{version} {time.time():.0f}\n")
    if (dest / ".complete").exists():  # another process finished first
        shutil.rmtree(scratch, ignore_errors=True)
        return dest
    if dest.exists():
        shutil.rmtree(dest)
    scratch.rename(dest)
    if not quiet:
        n = len(list(dest.glob("*.jar")))
        print(
            f"fetched Apache RocketMQ {version}: {n} jars in "
            f"{time.monotonic() - t0:.1f}s -> {dest}",
            file=sys.stderr,
        )
    return dest


def classpath(version: str = DEFAULT_VERSION) -> str:
    return str(lib_dir(version) / "*")


# ------------------------------------------------------------ admin helper

# Our own admin helper: a line protocol over stdin/stdout around
# DefaultMQAdminExt, one request per line (tab-separated), one answer per
# line ("OK ..." or "ERR ...").
ADMIN_JAVA = r"""
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import com.alibaba.fastjson.JSON;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo.ReplicaIdentity;
import org.apache.rocketmq.remoting.protocol.body.BrokerReplicasInfo.ReplicasInfo;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/** bench/peers/rocketmq.py's admin helper (generated; not part of RocketMQ). */
public class RmqPeerAdmin {
    private static DefaultMQAdminExt admin;
    private static String brokerAddr;
    private static String cluster;

    public static void main(String[] args) throws Exception {
        // args: namesrvAddr brokerAddr clusterName
        PrintStream out = new PrintStream(System.out, true, "UTF-8");
        System.setOut(new PrintStream(System.err, true, "UTF-8"));
        brokerAddr = args[1];
        cluster = args[2];
        admin = new DefaultMQAdminExt(10000L);
        admin.setNamesrvAddr(args[0]);
        admin.setInstanceName("bench-peer-admin-" + ProcessHandle.current().pid());
        admin.setVipChannelEnabled(false);
        admin.start();
        out.println("READY");
        BufferedReader in = new BufferedReader(
            new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] f = line.split("\t", -1);
            if (f[0].equals("quit")) {
                out.println("OK bye");
                break;
            }
            String answer;
            try {
                answer = "OK " + handle(f);
            } catch (Throwable e) {
                String msg = e.getClass().getSimpleName() + ": " + e.getMessage();
                answer = "ERR " + msg.replace('\n', ' ').replace('\r', ' ');
            }
            out.println(answer);
        }
        admin.shutdown();
        System.exit(0);
    }

    private static String handle(String[] f) throws Exception {
        switch (f[0]) {
            case "ping":
                return "pong";
            case "brokers": {
                ClusterInfo info = admin.examineBrokerClusterInfo();
                Set<String> addrs = new TreeSet<>();
                for (BrokerData bd : info.getBrokerAddrTable().values()) {
                    addrs.addAll(bd.getBrokerAddrs().values());
                }
                return String.join(",", addrs);
            }
            case "topic": {
                // topic NAME TYPE(-) READQ WRITEQ PERM ATTRS(json or -)
                TopicConfig tc = new TopicConfig(f[1]);
                tc.setReadQueueNums(Integer.parseInt(f[3]));
                tc.setWriteQueueNums(Integer.parseInt(f[4]));
                tc.setPerm(Integer.parseInt(f[5]));
                Map<String, String> attrs = new HashMap<>();
                if (!f[6].equals("-")) {
                    Map<?, ?> extra = JSON.parseObject(f[6], Map.class);
                    for (Map.Entry<?, ?> e : extra.entrySet()) {
                        attrs.put(String.valueOf(e.getKey()),
                                  String.valueOf(e.getValue()));
                    }
                }
                if (!f[2].equals("-")) {
                    attrs.put("+message.type", f[2]);
                }
                tc.setAttributes(attrs);
                // f[7], when there: the brokers to make it on (comma-separated)
                String[] targets = {brokerAddr};
                if (f.length > 7 && !f[7].isEmpty()) {
                    targets = f[7].split(",");
                }
                for (String addr : targets) {
                    admin.createAndUpdateTopicConfig(addr, tc);
                }
                waitRoute(f[1]);
                return f[1];
            }
            case "group": {
                // group NAME FIFO(true|false) RETRYMAX(-)
                // mqadmin updateSubGroup's defaults, then its -o and -r.
                SubscriptionGroupConfig g = new SubscriptionGroupConfig();
                g.setConsumeBroadcastEnable(false);
                g.setConsumeFromMinEnable(false);
                g.setGroupName(f[1]);
                g.setConsumeMessageOrderly(Boolean.parseBoolean(f[2]));
                if (!f[3].equals("-")) {
                    g.setRetryMaxTimes(Integer.parseInt(f[3]));
                }
                admin.createAndUpdateSubscriptionGroupConfig(brokerAddr, g);
                return f[1];
            }
            case "topicconf":
                // topicconf NAME [BROKER ADDRESS]
                return JSON.toJSONString(admin.examineTopicConfig(
                    f.length > 2 && !f[2].isEmpty() ? f[2] : brokerAddr, f[1]));
            case "masters": {
                // brokerName -> the address of its brokerId 0 ("" when none)
                ClusterInfo info = admin.examineBrokerClusterInfo();
                Map<String, String> m = new HashMap<>();
                for (BrokerData bd : info.getBrokerAddrTable().values()) {
                    String addr = bd.getBrokerAddrs().get(0L);
                    m.put(bd.getBrokerName(), addr == null ? "" : addr);
                }
                return JSON.toJSONString(m);
            }
            case "syncstate": {
                // syncstate CONTROLLER_ADDR BROKER_NAME: what the controller
                // holds for that broker name (mqadmin getSyncStateSet)
                List<String> names = new ArrayList<>();
                names.add(f[2]);
                BrokerReplicasInfo info = admin.getInSyncStateData(f[1], names);
                ReplicasInfo r = info.getReplicasInfoTable().get(f[2]);
                Map<String, Object> m = new HashMap<>();
                if (r != null) {
                    m.put("masterBrokerId", r.getMasterBrokerId());
                    m.put("masterAddress", r.getMasterAddress());
                    m.put("masterEpoch", r.getMasterEpoch());
                    m.put("syncStateSetEpoch", r.getSyncStateSetEpoch());
                    List<String> in = new ArrayList<>();
                    for (ReplicaIdentity id : r.getInSyncReplicas()) {
                        in.add(id.getBrokerAddress());
                    }
                    List<String> out = new ArrayList<>();
                    for (ReplicaIdentity id : r.getNotInSyncReplicas()) {
                        out.add(id.getBrokerAddress());
                    }
                    m.put("inSync", in);
                    m.put("notInSync", out);
                }
                return JSON.toJSONString(m);
            }
            case "groupconf":
                return JSON.toJSONString(
                    admin.examineSubscriptionGroupConfig(brokerAddr, f[1]));
            case "deltopic": {
                Set<String> b = new HashSet<>(Collections.singleton(brokerAddr));
                admin.deleteTopicInBroker(b, f[1]);
                Set<String> ns = new HashSet<>(admin.getNameServerAddressList());
                admin.deleteTopicInNameServer(ns, cluster, f[1]);
                return f[1];
            }
            case "delgroup":
                admin.deleteSubscriptionGroup(brokerAddr, f[1], true);
                return f[1];
            default:
                throw new IllegalArgumentException("unknown request " + f[0]);
        }
    }

    // The proxy answers QueryRoute from the NameServer (and caches a miss):
    // return only once the NameServer has the new topic's route.
    private static void waitRoute(String topic) throws Exception {
        long deadline = System.currentTimeMillis() + 5000;
        while (true) {
            try {
                TopicRouteData r = admin.examineTopicRouteInfo(topic);
                if (r != null && !r.getQueueDatas().isEmpty()) {
                    return;
                }
            } catch (Exception e) {
                if (System.currentTimeMillis() > deadline) {
                    throw e;
                }
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no route for " + topic + " after 5 s");
            }
            Thread.sleep(20);
        }
    }
}
"""


def ensure_admin(version: str = DEFAULT_VERSION) -> Path:
    """Compile RmqPeerAdmin.java against the jars (cached by source hash)."""
    libs = ensure_jars(version)
    digest = hashlib.sha256(ADMIN_JAVA.encode()).hexdigest()[:16]
    out = peer_home(version) / "admin" / digest
    if (out / "RmqPeerAdmin.class").exists():
        return out
    javac = shutil.which("javac")
    if javac is None:
        raise PeerError("javac not found: install a JDK (apt-get install default-jdk)")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="build-", dir=out.parent))
    src = scratch / "RmqPeerAdmin.java"
    src.write_text(ADMIN_JAVA)
    proc = subprocess.run(
        [javac, "-nowarn", "-cp", str(libs / "*"), "-d", str(scratch), str(src)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        shutil.rmtree(scratch, ignore_errors=True)
        raise PeerError(f"javac RmqPeerAdmin.java failed:\n{proc.stderr[-3000:]}")
    if out.exists() and not (out / "RmqPeerAdmin.class").exists():
        shutil.rmtree(out, ignore_errors=True)  # a broken earlier build
    try:
        scratch.rename(out)
    except OSError:  # another process compiled it first
        shutil.rmtree(scratch, ignore_errors=True)
    return out


class _Admin:
    """One RmqPeerAdmin JVM on a pipe; ``call`` is thread-safe."""

    def __init__(self, cmd: list[str], env: dict[str, str], log: Path):
        self._lock = threading.Lock()
        self._log = open(log, "ab")
        self.proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            text=True,
            encoding="utf-8",
            start_new_session=True,
        )
        first = self._readline(60)
        if first != "READY":
            self.close()
            raise PeerError(f"admin helper did not start ({first!r}); see {log}")

    def _readline(self, timeout: float) -> str:
        stdout = self.proc.stdout
        assert stdout is not None
        box: list[str] = []
        t = threading.Thread(target=lambda: box.append(stdout.readline()))
        t.daemon = True
        t.start()
        t.join(timeout)
        if not box:
            raise PeerError(f"admin helper gave no answer within {timeout:.0f}s")
        return box[0].rstrip("\n")

    def call(self, *fields: str, timeout: float = 60) -> str:
        line = "\t".join(fields)
        if "\n" in line:
            raise ValueError("newline in an admin request")
        with self._lock:
            if self.proc.poll() is not None:
                raise PeerError("admin helper has exited")
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            try:
                answer = self._readline(timeout)
            except PeerError:
                # A late answer would be read by the stuck reader: this
                # helper is done for; the peer opens a new one next call.
                self.proc.kill()
                raise
        if answer.startswith("OK"):
            return answer[3:]
        raise PeerError(f"{fields[0]} {fields[1] if len(fields) > 1 else ''}: {answer}")

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(5)
            except Exception:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        self._log.close()


# ------------------------------------------------------------ the peer


def _port_open(port: int, host: str = "127.0.0.1", timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _heap_opts(heap_max: str, heap_min: str) -> list[str]:
    return [f"-Xms{heap_min}", f"-Xmx{heap_max}"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still "exists": look at its state.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def rss_bytes(pid: int) -> int:
    """Resident set size of a pid from /proc (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of a pid from /proc (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def _terminate(pids: Mapping[str, int], marker: str, timeout: float) -> dict[str, str]:
    """SIGTERM the pids whose command line carries ``marker``; SIGKILL late ones."""
    how: dict[str, str] = {}
    live = {}
    for name, pid in pids.items():
        if pid and _pid_alive(pid) and marker in _cmdline(pid):
            os.kill(pid, signal.SIGTERM if timeout > 0 else signal.SIGKILL)
            live[name] = pid
        else:
            how[name] = "not running"
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        for name, pid in list(live.items()):
            _reap(pid)
            if not _pid_alive(pid):
                how[name] = "stopped"
                del live[name]
        time.sleep(0.1)
    for name, pid in live.items():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        for _ in range(50):
            _reap(pid)
            if not _pid_alive(pid):
                break
            time.sleep(0.1)
        how[name] = f"killed after {timeout:.0f}s" if timeout > 0 else "killed"
    return how


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


class ApacheRocketMQ:
    """A NameServer + proxy (local mode, broker in-process) on a temp dir.

    ``broker_conf`` entries override the broker.conf this writes (Apache
    property names and values, e.g. ``{"transactionTimeOut": 3000}``);
    ``proxy_conf`` entries override rmq-proxy.json (JSON values).
    """

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        *,
        grpc_port: int = DEFAULT_GRPC_PORT,
        namesrv_port: int = DEFAULT_NAMESRV_PORT,
        broker_port: int = DEFAULT_BROKER_PORT,
        remoting_port: int = DEFAULT_REMOTING_PORT,
        broker_conf: Mapping[str, Any] | None = None,
        proxy_conf: Mapping[str, Any] | None = None,
        heap: str = "512m",
        heap_min: str = "256m",
        namesrv_heap: str = "256m",
        jvm_opts: Iterable[str] = (),
        cluster: str = "DefaultCluster",
        broker_name: str = "broker-a",
        workdir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        start_timeout: float = 180.0,
        stop_timeout: float = 30.0,
        verbose: bool = False,
    ):
        self.version = version  # for display; callers may relabel it
        self._jars_version = version
        self.host = "127.0.0.1"
        self.grpc_port = grpc_port
        self.namesrv_port = namesrv_port
        self.broker_port = broker_port
        self.remoting_port = remoting_port
        self.broker_conf = dict(broker_conf or {})
        self.proxy_conf = dict(proxy_conf or {})
        self.heap = heap
        self.heap_min = heap_min
        self.namesrv_heap = namesrv_heap
        self.jvm_opts = list(jvm_opts)
        self.cluster = cluster
        self.broker_name = broker_name
        self.workdir_arg = workdir
        self.keep = keep
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.verbose = verbose
        self.workdir: Path | None = None
        self.start_seconds: float | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._pids: dict[str, int] = {}
        self._admin: _Admin | None = None
        self._attached = False
        self.marker = f"-D{MARKER_PROP}=apache-rocketmq-{os.getpid()}-{id(self):x}"

    # ---------------------------------------------------------- addresses

    @property
    def grpc_endpoint(self) -> str:
        return f"{self.host}:{self.grpc_port}"

    @property
    def endpoint(self) -> str:
        """Alias of ``grpc_endpoint``."""
        return self.grpc_endpoint

    @property
    def namesrv_addr(self) -> str:
        return f"{self.host}:{self.namesrv_port}"

    @property
    def broker_addr(self) -> str:
        return f"{self.host}:{self.broker_port}"

    @property
    def log_dir(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "logs"

    def ports(self) -> dict[str, int]:
        return {
            "grpc": self.grpc_port,
            "proxy_remoting": self.remoting_port,
            "namesrv": self.namesrv_port,
            "broker": self.broker_port,
            "broker_fast": self.broker_port - 2,
            "broker_ha": self.broker_port + 1,
        }

    # ---------------------------------------------------------- lifecycle

    def __enter__(self) -> ApacheRocketMQ:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _log(self, msg: str) -> None:
        if self.verbose:
            print(f"[apache-rocketmq] {msg}", file=sys.stderr, flush=True)

    def _java_env(self) -> dict[str, str]:
        assert self.workdir is not None
        env = dict(os.environ)
        env["ROCKETMQ_HOME"] = str(self.workdir)
        env["RMQ_PROXY_HOME"] = str(self.workdir)
        env.pop("NAMESRV_ADDR", None)
        env.pop("JAVA_TOOL_OPTIONS", None)
        return env

    def _java(
        self,
        heap: list[str],
        logback: str,
        main: str,
        *args: str,
        home: Path | None = None,
    ) -> list[str]:
        """A JVM command line; ``home`` (default: the workdir) is its
        ``user.home``, where Apache's logback puts ``logs/rocketmqlogs``."""
        assert self.workdir is not None
        java = shutil.which("java")
        if java is None:
            raise PeerError("java not found (apt-get install default-jdk)")
        return [
            java,
            "-server",
            *heap,
            "-XX:+UseG1GC",
            "-XX:-OmitStackTraceInFastThrow",
            "-XX:+IgnoreUnrecognizedVMOptions",
            self.marker,
            f"-Duser.home={home or self.workdir}",
            f"-Drocketmq.home.dir={self.workdir}",
            f"-Drmq.logback.configurationFile={logback}",
            "-Drocketmq.client.logUseSlf4j=true",
            *self.jvm_opts,
            "-cp",
            classpath(self._jars_version),
            main,
            *args,
        ]

    def _write_configs(self) -> tuple[Path, Path, Path]:
        assert self.workdir is not None
        conf = self.workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        store = self.workdir / "store"
        broker: dict[str, Any] = {
            "brokerClusterName": self.cluster,
            "brokerName": self.broker_name,
            "brokerId": 0,
            "brokerIP1": self.host,
            "listenPort": self.broker_port,
            "namesrvAddr": self.namesrv_addr,
            "storePathRootDir": store,
            "storePathCommitLog": store / "commitlog",
            "storePathConsumeQueue": store / "consumequeue",
            "storePathIndex": store / "index",
            "storeCheckpoint": store / "checkpoint",
            "abortFile": store / "abort",
            **BASE_BROKER_CONF,
            **self.broker_conf,
        }
        broker_path = conf / "broker.conf"
        broker_path.write_text(
            "".join(f"{k}={_prop(v)}\n" for k, v in broker.items()),
            encoding="utf-8",
        )
        proxy: dict[str, Any] = {
            "rocketMQClusterName": self.cluster,
            "proxyMode": "local",
            "grpcServerPort": self.grpc_port,
            "remotingListenPort": self.remoting_port,
            "namesrvAddr": self.namesrv_addr,
            "brokerConfigPath": str(broker_path),
            # No ACL: clients without credentials are served.
            "authenticationEnabled": False,
            "authorizationEnabled": False,
            **self.proxy_conf,
        }
        proxy_path = conf / "rmq-proxy.json"
        proxy_path.write_text(json.dumps(proxy, indent=2), encoding="utf-8")
        namesrv_path = conf / "namesrv.properties"
        namesrv_path.write_text(f"listenPort={self.namesrv_port}\n", encoding="utf-8")
        return broker_path, proxy_path, namesrv_path

    def start(self) -> ApacheRocketMQ:
        if self._procs:
            return self
        t0 = time.monotonic()
        ensure_jars(self._jars_version, quiet=not self.verbose)
        ensure_admin(self._jars_version)
        busy = [f"{n}:{p}" for n, p in self.ports().items() if _port_open(p)]
        if busy:
            raise PeerError(
                "ports already in use: " + ", ".join(busy) + " (another peer? "
                "`python bench/peers/rocketmq.py status`; or choose other ports)"
            )
        if self.workdir_arg is not None:
            # The caller's directory: the peer works in a fresh directory
            # inside it and removes only that, never the caller's files.
            parent = Path(self.workdir_arg)
            parent.mkdir(parents=True, exist_ok=True)
            self.workdir = Path(tempfile.mkdtemp(prefix="apache-rocketmq-", dir=parent))
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="apache-rocketmq-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        broker_path, proxy_path, namesrv_path = self._write_configs()
        env = self._java_env()
        try:
            self._spawn(
                "namesrv",
                self._java(
                    _heap_opts(self.namesrv_heap, "64m"),
                    "rmq.namesrv.logback.xml",
                    "org.apache.rocketmq.namesrv.NamesrvStartup",
                    "-c",
                    str(namesrv_path),
                ),
                env,
            )
            self._wait(lambda: _port_open(self.namesrv_port), "namesrv", t0)
            self._log(f"namesrv up on {self.namesrv_addr}")
            self._spawn(
                "proxy",
                self._java(
                    _heap_opts(self.heap, self.heap_min),
                    "rmq.proxy.logback.xml",
                    "org.apache.rocketmq.proxy.ProxyStartup",
                    "-pm",
                    "local",
                    "-bc",
                    str(broker_path),
                    "-pc",
                    str(proxy_path),
                ),
                env,
            )
            self._wait(lambda: _port_open(self.grpc_port), "proxy gRPC port", t0)
            self._log(f"gRPC port {self.grpc_port} accepts")
            self._admin_open()
            self._wait(
                lambda: self.broker_addr in self._admin_call("brokers").split(","),
                "broker registration with the namesrv",
                t0,
            )
            self._wait(self._grpc_answers, "a gRPC QueryRoute answer", t0)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - t0
        self._log(f"ready in {self.start_seconds:.1f}s at {self.grpc_endpoint}")
        return self

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        out = open(self.log_dir / f"{name}.out", "ab")
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.workdir,
                start_new_session=True,
            )
        finally:
            out.close()
        self._procs[name] = proc
        self._pids[name] = proc.pid
        self._log(f"{name} pid {proc.pid}")

    def _wait(self, ready: Any, what: str, t0: float) -> None:
        while True:
            for name, pid in self._pids.items():
                if not _pid_alive(pid):
                    raise PeerError(
                        f"{name} JVM exited while waiting for {what}:\n"
                        + self._tail(name)
                    )
            try:
                if ready():
                    return
            except PeerError:
                pass
            if time.monotonic() - t0 > self.start_timeout:
                raise PeerError(
                    f"timed out after {self.start_timeout:.0f}s waiting for {what}; "
                    f"logs in {self.log_dir}"
                )
            time.sleep(0.2)

    def _tail(self, name: str, n: int = 30) -> str:
        try:
            lines = (self.log_dir / f"{name}.out").read_text(errors="replace")
            return "\n".join(lines.splitlines()[-n:])
        except OSError:
            return "(no output)"

    def _grpc_answers(self, port: int | None = None) -> bool:
        """A real QueryRoute over gRPC, when grpcio and the official client's
        protobuf stubs are importable (any answer with a status counts: the
        proxy and the broker behind it are serving); else the TCP check and
        the namesrv registration already made are taken as enough."""
        try:
            import grpc  # type: ignore[import-not-found]
            from rocketmq.grpc_protocol import (  # type: ignore[import-not-found]
                definition_pb2,
                service_pb2,
                service_pb2_grpc,
            )
        except Exception:
            return True
        port = port or self.grpc_port
        with grpc.insecure_channel(f"{self.host}:{port}") as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            req = service_pb2.QueryRouteRequest(
                topic=definition_pb2.Resource(name="bench-peer-probe"),
                endpoints=definition_pb2.Endpoints(
                    scheme=definition_pb2.AddressScheme.IPv4,
                    addresses=[definition_pb2.Address(host=self.host, port=port)],
                ),
            )
            try:
                resp = stub.QueryRoute(req, timeout=5)
            except grpc.RpcError:
                return False
            return resp.HasField("status")

    def _admin_open(self) -> None:
        assert self.workdir is not None
        if self._admin is not None:
            return
        cmd = self._java(
            ["-Xms32m", "-Xmx128m", "-XX:TieredStopAtLevel=1"],
            "rmq.tools.logback.xml",
            "RmqPeerAdmin",
            self.namesrv_addr,
            self.broker_addr,
            self.cluster,
        )
        i = cmd.index("-cp")
        cmd[i + 1] = f"{ensure_admin(self._jars_version)}{os.pathsep}{cmd[i + 1]}"
        self._admin = _Admin(cmd, self._java_env(), self.log_dir / "admin.out")

    def _admin_call(self, *fields: str) -> str:
        if self._admin is not None and self._admin.proc.poll() is not None:
            self._admin.close()
            self._admin = None
        if self._admin is None:
            self._admin_open()
        assert self._admin is not None
        return self._admin.call(*fields)

    def stop(self, graceful: bool = True) -> dict[str, str]:
        """SIGTERM the JVMs, SIGKILL after ``stop_timeout``; remove the temp dir.

        Apache's own shutdown takes 10-15 s here (service threads joined one
        by one); ``graceful=False`` sends SIGKILL at once (the store is a
        throwaway temp dir anyway).
        """
        how: dict[str, str] = {}
        timeout = self.stop_timeout if graceful else 0.0
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        # Proxy (and the broker in it) first, so that the broker can still
        # unregister from the namesrv; the namesrv last.
        for name in sorted(self._pids, key=lambda n: n == "namesrv"):
            how.update(_terminate({name: self._pids[name]}, self.marker, timeout))
        for proc in self._procs.values():
            try:
                proc.wait(1)
            except subprocess.TimeoutExpired:
                pass
        self._procs.clear()
        self._pids.clear()
        if self.workdir is not None and not self.keep:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self._attached and STATE_FILE.exists():
            STATE_FILE.unlink()
        return how

    def pids(self) -> list[int]:
        """The JVM pids (namesrv, proxy+broker), for CPU/RSS from /proc."""
        return [p for p in self._pids.values() if _pid_alive(p)]

    def pid_map(self) -> dict[str, int]:
        return dict(self._pids)

    def rss(self) -> dict[str, int]:
        """RSS in bytes of each JVM (namesrv, proxy)."""
        return {n: rss_bytes(p) for n, p in self._pids.items()}

    # ---------------------------------------------------------- detached

    def state(self) -> dict[str, Any]:
        return {
            "version": self._jars_version,
            "grpc_endpoint": self.grpc_endpoint,
            "ports": self.ports(),
            "pids": self._pids,
            "marker": self.marker,
            "workdir": str(self.workdir),
            "keep": self.keep,
            "cluster": self.cluster,
            "broker_name": self.broker_name,
            "start_seconds": self.start_seconds,
            "started_at": time.time(),
        }

    def detach(self) -> Path:
        """Forget the JVMs (they keep running) and write the state file."""
        STATE_FILE.parent.mkdir(parents=True, exist_ok=True)
        STATE_FILE.write_text(json.dumps(self.state(), indent=2) + "\n")
        if self._admin is not None:
            self._admin.close()
            self._admin = None
        self._procs.clear()
        return STATE_FILE

    @classmethod
    def attach(cls, state_file: Path = STATE_FILE) -> ApacheRocketMQ:
        """The peer that ``start --detach`` left running (its ``stop`` ends it)."""
        try:
            st = json.loads(state_file.read_text())
        except OSError as e:
            raise PeerError(f"no detached peer ({state_file}: {e.strerror})") from e
        ports = st["ports"]
        rmq = cls(
            st["version"],
            grpc_port=ports["grpc"],
            namesrv_port=ports["namesrv"],
            broker_port=ports["broker"],
            remoting_port=ports["proxy_remoting"],
            cluster=st.get("cluster", "DefaultCluster"),
            broker_name=st.get("broker_name", "broker-a"),
            keep=st.get("keep", False),
        )
        rmq.workdir = Path(st["workdir"])
        rmq.marker = st["marker"]
        rmq._pids = {k: int(v) for k, v in st["pids"].items()}
        rmq.start_seconds = st.get("start_seconds")
        rmq._attached = True
        return rmq

    # ---------------------------------------------------------- admin

    def create_topic(
        self,
        name: str,
        message_type: str | None = "NORMAL",
        queues: int = 8,
        *,
        read_queues: int | None = None,
        write_queues: int | None = None,
        perm: int = 6,
        attributes: Mapping[str, str] | None = None,
    ) -> None:
        """Create (or update) a topic with ``+message.type=<message_type>``.

        message_type: NORMAL | FIFO | DELAY | TRANSACTION (| MIXED, PRIORITY,
        LITE where the version knows them: Apache 5.3.x refuses PRIORITY and
        LITE, and MIXED unless the broker has enableMixedMessageType=true);
        None sets no message type. ``attributes`` are extra topic attributes
        as ``{"+key": "value"}``.
        """
        mtype = "-"
        if message_type is not None:
            mtype = message_type.upper()
            if mtype not in MESSAGE_TYPES:
                raise ValueError(f"unknown message type {message_type!r}")
        rq = read_queues if read_queues is not None else queues
        wq = write_queues if write_queues is not None else queues
        extra = json.dumps(dict(attributes)) if attributes else "-"
        try:
            self._admin_call(
                "topic", name, mtype, str(rq), str(wq), str(perm), extra,
                *self._topic_targets(),
            )  # fmt: skip
        except PeerError as e:
            if mtype in ("PRIORITY", "LITE"):
                raise PeerError(
                    f"Apache RocketMQ {self._jars_version} refuses message type "
                    f"{mtype} for topic {name!r}: {e}"
                ) from e
            raise

    def _topic_targets(self) -> tuple[str, ...]:
        """Where create_topic makes a topic: () is the peer's one broker."""
        return ()

    def create_group(
        self,
        name: str,
        fifo: bool = False,
        max_delivery_attempts: int | None = None,
    ) -> None:
        """Create (or update) a subscription group.

        fifo: consumeMessageOrderly (mqadmin updateSubGroup -o true);
        max_delivery_attempts: retryMaxTimes = attempts - 1 (-r).
        """
        retry = "-"
        if max_delivery_attempts is not None:
            if max_delivery_attempts < 1:
                raise ValueError("max_delivery_attempts must be >= 1")
            retry = str(max_delivery_attempts - 1)
        self._admin_call("group", name, "true" if fifo else "false", retry)

    def delete_topic(self, name: str) -> None:
        self._admin_call("deltopic", name)

    def delete_group(self, name: str) -> None:
        self._admin_call("delgroup", name)

    def topic_config(self, name: str) -> dict[str, Any]:
        return json.loads(self._admin_call("topicconf", name))

    def group_config(self, name: str) -> dict[str, Any]:
        return json.loads(self._admin_call("groupconf", name))

    def brokers(self) -> list[str]:
        return [b for b in self._admin_call("brokers").split(",") if b]

    def mqadmin(
        self, *args: str, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        """Run Apache's mqadmin (one JVM) against this peer's namesrv."""
        assert self.workdir is not None
        cmd = self._java(
            ["-Xms32m", "-Xmx256m", "-XX:TieredStopAtLevel=1"],
            "rmq.tools.logback.xml",
            "org.apache.rocketmq.tools.command.MQAdminStartup",
            *args,
        )
        if "-n" not in args and args and args[0] not in ("help",):
            cmd += ["-n", self.namesrv_addr]
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env=self._java_env(),
            timeout=timeout,
        )


# ------------------------------------------------- controller-mode cluster


def free_port() -> int:
    """A TCP port nothing listens on now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def free_broker_port() -> int:
    """A broker listenPort whose listenPort - 2 (fast remoting) and
    listenPort + 1 (HA) are free too."""
    for _ in range(200):
        p = free_port()
        if p > 1026 and p < 65534 and all(_bindable(x) for x in (p - 2, p, p + 1)):
            return p
    raise PeerError("no free broker port (with its -2 and +1 neighbours)")


# What a controller-mode broker of broker-a starts with (Apache's
# distribution/conf/controller/quick-start/broker-n*.conf, and SYNC: a send is
# answered once every member of the SyncStateSet has it). The controller
# decides the role: the first one to register becomes SYNC_MASTER (brokerId
# 0), the next one its SLAVE; timing settings are Apache's defaults.
CONTROLLER_BROKER_CONF: dict[str, str] = {
    "brokerId": "-1",
    "brokerRole": "SLAVE",
    "enableControllerMode": "true",
    "allAckInSyncStateSet": "true",
    "minInSyncReplicas": "1",
}

# The embedded controller (Apache's
# distribution/conf/controller/cluster-3n-namesrv-plugin/namesrv-n0.conf with
# one member): DLedger, no election outside the SyncStateSet.
CONTROLLER_CONF: dict[str, str] = {
    "enableControllerInNamesrv": "true",
    "controllerType": "DLedger",
    "controllerDLegerGroup": "bench",
    "controllerDLegerSelfId": "n0",
    "enableElectUncleanMaster": "false",
    "notifyBrokerRoleChanged": "true",
}


class ApacheControllerCluster(ApacheRocketMQ):
    """Apache RocketMQ in controller mode (RIP-44) on a temp dir, 7 JVMs:

    - ``namesrv``: the NameServer with the embedded DLedger controller
      (``enableControllerInNamesrv``, ONE controller member; the controller
      listens on its own port, ``controller_addr``);
    - ``broker-a-0``, ``broker-a-1``: brokerName broker-a,
      ``enableControllerMode``, ``allAckInSyncStateSet``; broker-a-0 is started
      first and is elected master, broker-a-1 follows it and is waited for
      until it is in the SyncStateSet;
    - ``broker-b``: a plain ASYNC_MASTER without a slave;
    - ``proxy-a-0``, ``proxy-a-1``, ``proxy-b``: one cluster-mode gRPC proxy
      per broker (a local-mode proxy answers QueryRoute with brokerIP:its own
      gRPC port for every broker, which on one host cannot point at several
      proxies). ``access_point`` lists all three.

    Every port is a free one (chosen at ``start``). ``broker_conf`` entries go
    to the two broker-a brokers, ``controller_conf`` to namesrv.properties,
    ``proxy_conf`` to every proxy's rmq-proxy.json. Each JVM has a home of its
    own under the workdir (its logs in ``<workdir>/<name>/logs/rocketmqlogs``,
    a broker's store in ``<workdir>/<name>/store``); console output in
    ``<workdir>/logs/<name>.out``.
    """

    BROKERS = ("broker-a-0", "broker-a-1", "broker-b")
    PROXIES = ("proxy-a-0", "proxy-b", "proxy-a-1")

    def __init__(
        self,
        version: str = DEFAULT_VERSION,
        *,
        broker_conf: Mapping[str, Any] | None = None,
        controller_conf: Mapping[str, Any] | None = None,
        proxy_conf: Mapping[str, Any] | None = None,
        heap: str = "512m",
        heap_min: str = "128m",
        proxy_heap: str = "256m",
        namesrv_heap: str = "256m",
        jvm_opts: Iterable[str] = (),
        cluster: str = "DefaultCluster",
        client_proxy: str | None = None,
        workdir: str | os.PathLike[str] | None = None,
        keep: bool = False,
        start_timeout: float = 300.0,
        stop_timeout: float = 30.0,
        verbose: bool = False,
    ):
        super().__init__(
            version,
            broker_conf=broker_conf,
            proxy_conf=proxy_conf,
            heap=heap,
            heap_min=heap_min,
            namesrv_heap=namesrv_heap,
            jvm_opts=jvm_opts,
            cluster=cluster,
            workdir=workdir,
            keep=keep,
            start_timeout=start_timeout,
            stop_timeout=stop_timeout,
            verbose=verbose,
        )
        self.marker = f"-D{MARKER_PROP}=apache-rmq-ctl-{os.getpid()}-{id(self):x}"
        self.controller_conf = dict(controller_conf or {})
        self.proxy_heap = proxy_heap
        if client_proxy is not None and client_proxy not in self.PROXIES:
            raise ValueError(f"client_proxy must be one of {self.PROXIES}")
        self.want_client_proxy = client_proxy
        self.controller_port = 0
        self.broker_ports: dict[str, int] = {}
        self.grpc_ports: dict[str, int] = {}
        self.remoting_ports: dict[str, int] = {}

    # ---------------------------------------------------------- addresses

    @property
    def controller_addr(self) -> str:
        return f"{self.host}:{self.controller_port}"

    @property
    def broker_addr(self) -> str:
        """broker-a-0's address (the admin helper's default broker)."""
        return self.addr_of("broker-a-0")

    def addr_of(self, broker: str) -> str:
        return f"{self.host}:{self.broker_ports[broker]}"

    @property
    def grpc_endpoints(self) -> list[str]:
        return [f"{self.host}:{self.grpc_ports[p]}" for p in self.PROXIES]

    @property
    def access_point(self) -> str:
        """Every proxy, ``;``-separated (proxy-a-0, proxy-b, proxy-a-1)."""
        return ";".join(self.grpc_endpoints)

    @property
    def grpc_endpoint(self) -> str:
        return self.access_point

    @property
    def client_proxy(self) -> str:
        """The proxy an official Python client's traffic goes through: its
        gRPC channel to an access point of several addresses is
        ``ipv4:<the addresses sorted as strings>`` with gRPC's default
        pick_first policy, i.e. the first of them that connects (the
        ``client_proxy`` argument chooses which one that is)."""
        first = min(self.grpc_endpoints)
        return next(x for x in self.PROXIES if self.grpc_endpoints_of(x) == first)

    def grpc_endpoints_of(self, proxy: str) -> str:
        return f"{self.host}:{self.grpc_ports[proxy]}"

    def home_of(self, name: str) -> Path:
        assert self.workdir is not None
        return self.workdir / name

    def store_of(self, broker: str) -> Path:
        return self.home_of(broker) / "store"

    def ports(self) -> dict[str, int]:
        out = {"namesrv": self.namesrv_port, "controller": self.controller_port}
        for b, p in self.broker_ports.items():
            out.update({b: p, f"{b}-fast": p - 2, f"{b}-ha": p + 1})
        for x, p in self.grpc_ports.items():
            out.update({f"{x}-grpc": p, f"{x}-remoting": self.remoting_ports[x]})
        return out

    # ---------------------------------------------------------- start

    def _allocate_ports(self) -> None:
        taken: set[int] = set()

        def pick(broker: bool = False) -> int:
            while True:
                p = free_broker_port() if broker else free_port()
                near = {p - 2, p, p + 1} if broker else {p}
                if not near & taken:
                    taken.update(near)
                    return p

        self.namesrv_port = pick()
        self.controller_port = pick()
        self.broker_ports = {b: pick(broker=True) for b in self.BROKERS}
        self.grpc_ports = {x: pick() for x in self.PROXIES}
        if self.want_client_proxy is not None:
            # Give that proxy the address that sorts first.
            ports = sorted(self.grpc_ports.values(), key=lambda p: f"{self.host}:{p}")
            others = [x for x in self.PROXIES if x != self.want_client_proxy]
            self.grpc_ports = dict(
                zip([self.want_client_proxy, *others], ports, strict=True)
            )
        self.remoting_ports = {x: pick() for x in self.PROXIES}

    def _write_cluster_configs(self) -> dict[str, Path]:
        assert self.workdir is not None
        conf = self.workdir / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        paths: dict[str, Path] = {}
        namesrv = {
            "listenPort": self.namesrv_port,
            **CONTROLLER_CONF,
            "controllerDLegerPeers": f"n0-{self.controller_addr}",
            "controllerStorePath": self.workdir / "controller",
            **self.controller_conf,
        }
        paths["namesrv"] = conf / "namesrv.properties"
        paths["namesrv"].write_text(
            "".join(f"{k}={_prop(v)}\n" for k, v in namesrv.items()), encoding="utf-8"
        )
        for b in self.BROKERS:
            store = self.store_of(b)
            ctl = b.startswith("broker-a")
            broker: dict[str, Any] = {
                "brokerClusterName": self.cluster,
                "brokerName": "broker-a" if ctl else "broker-b",
                "brokerId": 0,
                "brokerIP1": self.host,
                "listenPort": self.broker_ports[b],
                "namesrvAddr": self.namesrv_addr,
                "storePathRootDir": store,
                "storePathCommitLog": store / "commitlog",
                **BASE_BROKER_CONF,
            }
            if ctl:
                broker.update(CONTROLLER_BROKER_CONF)
                broker["controllerAddr"] = self.controller_addr
                broker.update(self.broker_conf)
            paths[b] = conf / f"{b}.conf"
            paths[b].write_text(
                "".join(f"{k}={_prop(v)}\n" for k, v in broker.items()),
                encoding="utf-8",
            )
        for x in self.PROXIES:
            proxy: dict[str, Any] = {
                "rocketMQClusterName": self.cluster,
                "proxyMode": "cluster",
                "grpcServerPort": self.grpc_ports[x],
                "remotingListenPort": self.remoting_ports[x],
                "namesrvAddr": self.namesrv_addr,
                "authenticationEnabled": False,
                "authorizationEnabled": False,
                **self.proxy_conf,
            }
            paths[x] = conf / f"{x}.json"
            paths[x].write_text(json.dumps(proxy, indent=2), encoding="utf-8")
        return paths

    def _start_jvm(self, name: str, conf: Path, env: dict[str, str]) -> None:
        home = self.home_of(name)
        home.mkdir(parents=True, exist_ok=True)
        if name == "namesrv":
            heap = _heap_opts(self.namesrv_heap, "64m")
            main, logback, args = "NamesrvStartup", "namesrv", ["-c", str(conf)]
            main = "org.apache.rocketmq.namesrv." + main
        elif name.startswith("broker"):
            heap = _heap_opts(self.heap, self.heap_min)
            main, logback = "org.apache.rocketmq.broker.BrokerStartup", "broker"
            args = ["-c", str(conf)]
        else:
            heap = _heap_opts(self.proxy_heap, "64m")
            main, logback = "org.apache.rocketmq.proxy.ProxyStartup", "proxy"
            args = ["-pm", "cluster", "-pc", str(conf)]
        cmd = self._java(heap, f"rmq.{logback}.logback.xml", main, *args, home=home)
        self._spawn(name, cmd, env)

    def start(self) -> ApacheControllerCluster:
        if self._procs:
            return self
        t0 = time.monotonic()
        ensure_jars(self._jars_version, quiet=not self.verbose)
        ensure_admin(self._jars_version)
        if self.workdir_arg is not None:
            parent = Path(self.workdir_arg)
            parent.mkdir(parents=True, exist_ok=True)
            self.workdir = Path(tempfile.mkdtemp(prefix="apache-rmq-ctl-", dir=parent))
        else:
            self.workdir = Path(tempfile.mkdtemp(prefix="apache-rmq-ctl-"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = self._java_env()
        try:
            self._allocate_ports()
            paths = self._write_cluster_configs()
            self._start_jvm("namesrv", paths["namesrv"], env)
            self._wait(
                lambda: (
                    _port_open(self.namesrv_port) and _port_open(self.controller_port)
                ),
                "the namesrv and its controller",
                t0,
            )
            self._log(f"namesrv {self.namesrv_addr}, controller {self.controller_addr}")
            # broker-a-0 alone first, so that the controller makes it master.
            self._start_jvm("broker-a-0", paths["broker-a-0"], env)
            self._admin_open()
            self._wait(
                lambda: self.sync_state().get("masterAddress") == self.broker_addr,
                "the controller to elect broker-a-0",
                t0,
            )
            self._log("broker-a-0 elected master of broker-a")
            for name in ("broker-a-1", "broker-b"):
                self._start_jvm(name, paths[name], env)
            want = {
                "broker-a": self.addr_of("broker-a-0"),
                "broker-b": self.addr_of("broker-b"),
            }
            self._wait(
                lambda: (
                    json.loads(self._admin_call("masters")) == want
                    and self.addr_of("broker-a-1") in self.brokers()
                ),
                "the three brokers' registration with the namesrv",
                t0,
            )
            # Only now: a cluster-mode proxy makes its system topic
            # (DefaultHeartBeatSyncerTopic) on the cluster's brokers as it
            # starts, and exits when it cannot.
            for name in self.PROXIES:
                self._start_jvm(name, paths[name], env)
            self._wait(
                lambda: (
                    self.addr_of("broker-a-1") in self.sync_state().get("inSync", [])
                ),
                "broker-a-1 in broker-a's SyncStateSet",
                t0,
            )
            self._log("broker-a-1 in the SyncStateSet")
            for x in self.PROXIES:
                port = self.grpc_ports[x]
                self._wait(lambda p=port: _port_open(p), f"{x} gRPC port", t0)
                self._wait(lambda p=port: self._grpc_answers(p), f"{x} QueryRoute", t0)
        except BaseException:
            self.stop(graceful=False)
            raise
        self.start_seconds = time.monotonic() - t0
        self._log(
            f"ready in {self.start_seconds:.1f}s, access point {self.access_point}"
        )
        return self

    # ---------------------------------------------------------- admin

    def sync_state(self, broker_name: str = "broker-a") -> dict[str, Any]:
        """The controller's view of ``broker_name`` (mqadmin getSyncStateSet):
        masterAddress, masterBrokerId, masterEpoch, syncStateSetEpoch, inSync,
        notInSync; {} while it knows nothing of it."""
        return json.loads(
            self._admin_call("syncstate", self.controller_addr, broker_name)
        )

    def masters(self) -> dict[str, str]:
        """brokerName -> its brokerId 0 address, as the namesrv has it."""
        return json.loads(self._admin_call("masters"))

    def _topic_targets(self) -> tuple[str, ...]:
        # Every current master (broker-a's slave copies topics from its master).
        return (",".join(a for a in self.masters().values() if a),)

    def topic_config_at(self, broker: str, name: str) -> dict[str, Any]:
        return json.loads(self._admin_call("topicconf", name, self.addr_of(broker)))

    def kill(self, *names: str) -> float:
        """SIGKILL these JVMs (checked to be ours) at once; the time.time()
        just after the signals were sent."""
        for n in names:
            pid = self._pids.get(n)
            if pid and _pid_alive(pid) and self.marker in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)
        at = time.time()
        for n in names:
            proc = self._procs.get(n)
            if proc is not None:
                proc.wait()
        return at

    def state(self) -> dict[str, Any]:
        raise PeerError("a controller-mode cluster cannot be detached")


def commitlog_bytes(store: Path) -> bytes:
    """The messages of an Apache store's commit log (``store/commitlog``), as
    bytes: each mapped file walked record by record (4-byte size, 4-byte magic
    code) up to the first hole or end-of-file blank; the JVM need not run
    (its writes are in the page cache)."""
    import mmap
    import struct

    magic = {-626843481, -626843477}  # MESSAGE_MAGIC_CODE, _V2
    blank = -875286124
    out = bytearray()
    d = store / "commitlog"
    for seg in sorted(d.iterdir()) if d.is_dir() else []:
        with open(seg, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                continue
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                pos = 0
                while pos + 8 <= size:
                    total, code = struct.unpack_from(">ii", m, pos)
                    if total <= 0 or code not in magic or pos + total > size:
                        break
                    pos += total
                out += m[:pos]
                if pos + 8 <= size and struct.unpack_from(">ii", m, pos)[1] != blank:
                    break  # the log ends inside this file
    return bytes(out)


def _prop(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


# --------------------------------------------------------------------- CLI


def _parse_kv(items: list[str], as_json: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        if as_json:
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                out[key] = value
        else:
            out[key] = value
    return out


def _status() -> int:
    if not STATE_FILE.exists():
        print("no detached Apache RocketMQ peer (no var/peers/rocketmq-state.json)")
        return 1
    st = json.loads(STATE_FILE.read_text())
    alive = {
        n: _pid_alive(p) and st["marker"] in _cmdline(p) for n, p in st["pids"].items()
    }
    ports = {n: _port_open(p) for n, p in st["ports"].items()}
    rss = {n: rss_bytes(p) // 2**20 for n, p in st["pids"].items() if alive[n]}
    print(f"Apache RocketMQ {st['version']} at {st['grpc_endpoint']}")
    print(f"  workdir {st['workdir']}")
    for n, p in st["pids"].items():
        extra = f", RSS {rss[n]} MiB" if alive[n] else ""
        print(f"  {n}: pid {p} {'running' if alive[n] else 'NOT running'}{extra}")
    for n, p in st["ports"].items():
        print(f"  port {n} {p}: {'answers' if ports[n] else 'closed'}")
    return 0 if all(alive.values()) else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description="Apache RocketMQ as a bench/conformance peer (see docs/peers.md)"
    )
    ap.add_argument(
        "command", choices=["fetch", "start", "stop", "status", "controller"]
    )
    ap.add_argument("--version", default=DEFAULT_VERSION)
    ap.add_argument("--grpc-port", type=int, default=DEFAULT_GRPC_PORT)
    ap.add_argument("--remoting-port", type=int, default=DEFAULT_REMOTING_PORT)
    ap.add_argument("--namesrv-port", type=int, default=DEFAULT_NAMESRV_PORT)
    ap.add_argument("--broker-port", type=int, default=DEFAULT_BROKER_PORT)
    ap.add_argument("--heap", default="512m", help="proxy+broker -Xmx (default 512m)")
    ap.add_argument("--heap-min", default="256m", help="proxy+broker -Xms")
    ap.add_argument("--namesrv-heap", default="256m", help="namesrv -Xmx")
    ap.add_argument(
        "--broker-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker.conf override (repeatable)",
    )
    ap.add_argument(
        "--proxy-conf",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="rmq-proxy.json override (repeatable)",
    )
    ap.add_argument(
        "--topic", action="append", default=[], metavar="NAME[:TYPE]", help="create"
    )
    ap.add_argument(
        "--group",
        action="append",
        default=[],
        metavar="NAME[:fifo][:ATTEMPTS]",
        help="create a group (fifo: orderly; ATTEMPTS: max delivery attempts)",
    )
    ap.add_argument("--workdir", help="use this dir instead of a new temp dir")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir on stop")
    ap.add_argument("--detach", action="store_true", help="start: return, leave it up")
    ap.add_argument("--timeout", type=float, default=30.0, help="stop: SIGKILL after")
    ap.add_argument("--kill", action="store_true", help="stop: SIGKILL at once")
    a = ap.parse_args(argv)

    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if a.command == "fetch":
        # SIGTERM unwinds like Ctrl-C: an interrupted fetch removes its scratch.
        signal.signal(signal.SIGTERM, on_signal)
        t0 = time.monotonic()
        was = (lib_dir(a.version) / ".complete").exists()
        d = ensure_jars(a.version, quiet=False)
        ensure_admin(a.version)
        n = len(list(d.glob("*.jar")))
        print(
            f"Apache RocketMQ {a.version}: {n} jars in {d} "
            f"({'cached' if was else 'fetched'}, {time.monotonic() - t0:.1f}s)"
        )
        return 0
    if a.command == "status":
        return _status()
    if a.command == "stop":
        try:
            rmq = ApacheRocketMQ.attach()
        except PeerError as e:
            print(e)
            return 0
        rmq.stop_timeout = a.timeout
        how = rmq.stop(graceful=not a.kill)
        print("stopped Apache RocketMQ:", ", ".join(f"{k} {v}" for k, v in how.items()))
        return 0

    if a.command == "controller":
        return _controller_foreground(a)

    # start
    if STATE_FILE.exists():
        st = json.loads(STATE_FILE.read_text())
        marker = st["marker"]
        if any(_pid_alive(p) and marker in _cmdline(p) for p in st["pids"].values()):
            print(f"a detached peer is already running ({STATE_FILE}); stop it first")
            return 1
        STATE_FILE.unlink()
    rmq = ApacheRocketMQ(
        a.version,
        grpc_port=a.grpc_port,
        namesrv_port=a.namesrv_port,
        broker_port=a.broker_port,
        remoting_port=a.remoting_port,
        broker_conf=_parse_kv(a.broker_conf, as_json=False),
        proxy_conf=_parse_kv(a.proxy_conf, as_json=True),
        heap=a.heap,
        heap_min=a.heap_min,
        namesrv_heap=a.namesrv_heap,
        workdir=a.workdir,
        keep=a.keep,
        verbose=True,
    )

    # Explicitly: a background job of a non-interactive shell starts with
    # SIGINT ignored, and SIGTERM/SIGHUP must stop the JVMs too.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        rmq.start()
        for spec in a.topic:
            name, _, mtype = spec.partition(":")
            rmq.create_topic(name, mtype or "NORMAL")
        for spec in a.group:
            name, *opts = spec.split(":")
            attempts = next((int(o) for o in opts if o.isdigit()), None)
            rmq.create_group(name, fifo="fifo" in opts, max_delivery_attempts=attempts)
    except PeerError as e:
        _ignore_signals()  # the clean-up must finish (more Ctrl-C included)
        print(f"error: {e}", file=sys.stderr)
        rmq.stop()
        return 1
    except KeyboardInterrupt:
        _ignore_signals()
        rmq.stop()
        return 130
    rss = ", ".join(f"{n} {b // 2**20} MiB" for n, b in rmq.rss().items())
    print(
        f"Apache RocketMQ {a.version} ready in {rmq.start_seconds:.1f}s: "
        f"gRPC {rmq.grpc_endpoint}, namesrv {rmq.namesrv_addr}, "
        f"pids {rmq.pid_map()}, RSS {rss}, workdir {rmq.workdir}",
        flush=True,
    )
    if a.detach:
        path = rmq.detach()
        print(f"detached; state in {path}; stop with: python {sys.argv[0]} stop")
        return 0
    print("running in the foreground; Ctrl-C stops it", flush=True)
    try:
        while all(_pid_alive(p) for p in rmq.pid_map().values()):
            time.sleep(1)
        print("a JVM exited; stopping", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    _ignore_signals()  # let the stop finish
    how = rmq.stop()
    print("stopped: " + ", ".join(f"{k} {v}" for k, v in how.items()))
    return 0


def _controller_foreground(a: argparse.Namespace) -> int:
    def on_signal(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    cl = ApacheControllerCluster(
        a.version,
        broker_conf=_parse_kv(a.broker_conf, as_json=False),
        proxy_conf=_parse_kv(a.proxy_conf, as_json=True),
        heap=a.heap,
        workdir=a.workdir,
        keep=a.keep,
        verbose=True,
    )
    try:
        cl.start()
        print(
            f"Apache RocketMQ {a.version} controller mode ready in "
            f"{cl.start_seconds:.1f}s: access point {cl.access_point}, namesrv "
            f"{cl.namesrv_addr}, controller {cl.controller_addr}, broker-a "
            f"{cl.sync_state()}, workdir {cl.workdir}; Ctrl-C stops it",
            flush=True,
        )
        while all(_pid_alive(p) for p in cl.pid_map().values()):
            time.sleep(1)
        print("a JVM exited; stopping", file=sys.stderr)
    except KeyboardInterrupt:
        pass
    except PeerError as e:
        print(f"error: {e}", file=sys.stderr)
        _ignore_signals()
        cl.stop(graceful=False)
        return 1
    _ignore_signals()
    how = cl.stop()
    print("stopped: " + ", ".join(f"{k} {v}" for k, v in how.items()))
    return 0


def _ignore_signals() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


def _cli() -> int:
    try:
        return main()
    except PeerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(_cli())
