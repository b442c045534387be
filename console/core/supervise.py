"""Run the ``Procfile``'s processes under supervisord (``make run``).

The Procfile stays the one list of the system's processes. This writes a
supervisord configuration from it and runs supervisord in the foreground: a
process that exits is started again (the gRPC endpoint keeps serving while a
console process is down; none is stopped because another died), every line of
every process goes to standard output, and Ctrl-C (SIGINT) or SIGTERM stops them
all, each with its process group.

    python -m console.core.supervise [--procfile Procfile] [--dir var/supervise]
    python -m console.core.supervise --write-only      # the config, not run

Each process's state: ``supervisorctl -c var/supervise/supervisord.conf status``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_NAME = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def read_procfile(path: Path) -> dict[str, str]:
    """The processes of a Procfile, name -> command line, in order."""
    out: dict[str, str] = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if m is None:
            raise SystemExit(f"{path}:{n}: not 'name: command'")
        out[m.group(1)] = m.group(2)
    return out


def _quote(command: str) -> str:
    if "'" in command:
        raise SystemExit(f"a Procfile command may not hold a single quote: {command}")
    # supervisord interpolates %(...)s: a literal % is written %%.
    return "/bin/sh -c 'exec " + command.replace("%", "%%") + "'"


def write_config(procfile: Path, directory: Path) -> Path:
    """Write ``supervisord.conf`` for ``procfile`` into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    sock = directory / "supervisor.sock"
    lines = [
        "[supervisord]",
        "nodaemon=true",
        "logfile=/dev/stdout",
        "logfile_maxbytes=0",
        "loglevel=info",
        f"pidfile={directory / 'supervisord.pid'}",
        f"childlogdir={directory}",
        "",
        "[unix_http_server]",
        f"file={sock}",
        "chmod=0700",
        "",
        "[rpcinterface:supervisor]",
        "supervisor.rpcinterface_factory = "
        "supervisor.rpcinterface:make_main_rpcinterface",
        "",
        "[supervisorctl]",
        f"serverurl=unix://{sock}",
        "",
    ]
    for name, command in read_procfile(procfile).items():
        lines += [
            f"[program:{name}]",
            f"command={_quote(command)}",
            f"directory={procfile.resolve().parent}",
            "autostart=true",
            # Started again whenever it exits, whatever its status.
            "autorestart=true",
            "startsecs=2",
            "startretries=1000",
            # The whole group: gunicorn's and Celery's children go with them.
            "stopasgroup=true",
            "killasgroup=true",
            "stopsignal=TERM",
            "stopwaitsecs=30",
            "redirect_stderr=true",
            "stdout_logfile=/dev/stdout",
            "stdout_logfile_maxbytes=0",
            "",
        ]
    path = directory / "supervisord.conf"
    path.write_text("\n".join(lines))
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--procfile", default=str(ROOT / "Procfile"))
    ap.add_argument("--dir", default=str(ROOT / "var" / "supervise"))
    ap.add_argument("--write-only", action="store_true")
    args = ap.parse_args(argv)
    conf = write_config(Path(args.procfile), Path(args.dir).resolve())
    if args.write_only:
        print(conf)
        return 0
    supervisord = Path(sys.executable).with_name("supervisord")
    os.execv(str(supervisord), [str(supervisord), "-n", "-c", str(conf)])
    return 1  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
