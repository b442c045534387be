"""Where the reports' export and results live: a local directory or a URI.

``locate`` takes a plain path, ``file://...``, ``s3://bucket/prefix`` (any
S3-compatible store), ``hdfs://...`` or any other URI ``pyarrow.fs`` knows,
and returns a ``Location``: a pyarrow filesystem and a path on it. The export
writer, Spark's executors and the web processes all reach the data through
it, so a Spark cluster needs no disk shared with the broker host: executors
read only from the object store.

S3 settings come from the URI's query (``endpoint_override``, ``scheme``,
``region``: pyarrow's names) and from the standard ``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` variables of the process
that locates it. The filesystem object carries the resolved credentials when
it is sent to an executor (pickled with the task), so the executors need no
AWS settings of their own; use ``spark.authenticate`` and
``spark.network.crypto.enabled`` where the cluster's network is not trusted.

Like ``scan`` and ``columnar``, this module imports only pyarrow and is
shipped to Spark's executors by value.
"""

from __future__ import annotations

import os
import posixpath
import urllib.parse
import uuid
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.fs as pafs

PART_GLOB_PREFIX = "part-"


class StorageError(Exception):
    """A location that cannot be used (unknown scheme, bad URI, no access)."""


@dataclass(frozen=True)
class Location:
    """A directory on a pyarrow filesystem."""

    fs: pafs.FileSystem
    path: str
    uri: str

    @property
    def local(self) -> bool:
        """Whether the directory is on this host's own filesystem."""
        return isinstance(self.fs, pafs.LocalFileSystem)

    def child(self, *names: str) -> Location:
        path = posixpath.join(self.path, *names)
        sep = "" if self.uri.endswith("/") else "/"
        base, query = _split_query(self.uri)
        return Location(self.fs, path, base + sep + "/".join(names) + query)

    def file(self, name: str) -> str:
        """The path of ``name`` inside this directory, on ``fs``."""
        return posixpath.join(self.path, name)

    def makedirs(self) -> None:
        self.fs.create_dir(self.path, recursive=True)

    def exists(self) -> bool:
        return self.fs.get_file_info(self.path).type != pafs.FileType.NotFound

    def parts(self) -> list[str]:
        """The ``part-*.parquet`` files directly in this directory, sorted."""
        selector = pafs.FileSelector(self.path, allow_not_found=True)
        return sorted(
            info.path
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File
            and posixpath.basename(info.path).startswith(PART_GLOB_PREFIX)
            and info.path.endswith(".parquet")
        )

    def read_text(self, name: str) -> str | None:
        """The text of file ``name`` here, None when it does not exist."""
        try:
            with self.fs.open_input_stream(self.file(name)) as f:
                return f.read().decode()
        except FileNotFoundError:
            return None

    def write_text(self, name: str, text: str) -> None:
        """Replace file ``name`` whole: readers see the old or the new text.

        Local files go through a temporary file and a rename; an object
        store's PUT is whole by itself.
        """
        self.makedirs()
        target = self.file(name)
        if self.local:
            tmp = f"{target}.{uuid.uuid4().hex}.tmp"
            with open(tmp, "w") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
            return
        with self.fs.open_output_stream(target) as out:
            out.write(text.encode())

    def remove(self) -> None:
        """Delete the directory and everything in it (nothing if absent)."""
        try:
            info = self.fs.get_file_info(self.path)
            if info.type == pafs.FileType.Directory:
                self.fs.delete_dir(self.path)
            elif info.type == pafs.FileType.File:
                self.fs.delete_file(self.path)
        except FileNotFoundError:
            pass


def _split_query(uri: str) -> tuple[str, str]:
    base, sep, query = uri.partition("?")
    return base, sep + query


def is_uri(text: str) -> bool:
    """Whether ``text`` names a location by URI (``scheme://``)."""
    return "://" in text


def locate(where: str | os.PathLike[str]) -> Location:
    """Return the ``Location`` of a path or URI (see the module's doc)."""
    text = os.fspath(where)
    if not is_uri(text):
        return Location(pafs.LocalFileSystem(), os.path.abspath(text), text)
    parsed = urllib.parse.urlsplit(text)
    scheme = parsed.scheme.lower()
    if scheme in ("s3", "s3a"):
        return _s3(text, parsed)
    try:
        fs, path = pafs.FileSystem.from_uri(text)
    except (pa.ArrowException, ValueError) as exc:
        raise StorageError(f"{text}: {exc}") from exc
    return Location(fs, path.rstrip("/") or path, text)


def _s3(text: str, parsed: urllib.parse.SplitResult) -> Location:
    """An S3 location; ``s3a://`` (Hadoop's name) is read the same way."""
    if not parsed.netloc:
        raise StorageError(f"{text}: no bucket in the URI")
    query = dict(urllib.parse.parse_qsl(parsed.query))
    unknown = set(query) - {"endpoint_override", "scheme", "region"}
    if unknown:
        raise StorageError(
            f"{text}: unknown S3 option(s) {', '.join(sorted(unknown))} "
            "(endpoint_override, scheme and region are understood; "
            "credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"
        )
    options: dict[str, str] = {
        "region": query.get("region") or os.environ.get("AWS_REGION") or "us-east-1"
    }
    endpoint = query.get("endpoint_override") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        if "://" not in endpoint:
            endpoint = "//" + endpoint
        found = urllib.parse.urlsplit(endpoint)
        options["endpoint_override"] = found.netloc
        options["scheme"] = query.get("scheme") or found.scheme or "https"
    elif query.get("scheme"):
        options["scheme"] = query["scheme"]
    key = os.environ.get("AWS_ACCESS_KEY_ID")
    secret = os.environ.get("AWS_SECRET_ACCESS_KEY")
    if key and secret:
        # Explicit credentials travel with the pickled filesystem to executors.
        options.update(access_key=key, secret_key=secret)
        token = os.environ.get("AWS_SESSION_TOKEN")
        if token:
            options["session_token"] = token
    fs = pafs.S3FileSystem(**options)  # type: ignore[arg-type]
    path = (parsed.netloc + parsed.path).rstrip("/")
    return Location(fs, path, text)
