"""`omnigraph.connect`: a graph served by `omnigraph serve`, with the
embedded `Graph`'s methods and results. Queries come back as Arrow IPC and
become the same `QueryResult` an in-process query gives; every other call
returns the embedded call's (the CLI's `--json`) shape; errors raise the
same exception classes with the same `.kind`."""

from __future__ import annotations

import http.client
import json
import os
import threading
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from . import _errors, _omnigraph
from ._graph import (
    LOAD_ROWS_PER_CHUNK,
    _check_query,
    _check_str,
    _chunks,
    _json_default,
    _load_input,
)
from ._result import MutationResult, QueryResult

ARROW_STREAM = "application/vnd.apache.arrow.stream"

#: The engine's error kinds by the CLI's exit code (the exception groups;
#: README.md's table of kinds, which a Rust test holds to the engine).
_KINDS_BY_EXIT = {
    2: {
        "ParseError",
        "SchemaError",
        "TypeError",
        "InvalidData",
        "KeyConflict",
        "BadRequest",
        "ReadOnly",
        "ResourceLimitExceeded",
        "BlobRangeNotSatisfiable",
        "VersionExpired",
        "NotFound",
        "AlreadyExists",
        "CursorRejected",
        "ChangeFeedGap",
        "PolicyDenied",
    },
    4: {"ReadSetChanged", "SchemaChanged", "Contended", "PreconditionFailed"},
    5: {"MergeConflicts"},
}

#: Bytes of a file sent per chunk of a load's body.
_FILE_CHUNK = 1 << 20


def _exit_code(kind: str) -> int:
    for code, kinds in _KINDS_BY_EXIT.items():
        if kind in kinds:
            return code
    return 1


def _raise(status: int, body: bytes) -> None:
    try:
        err = json.loads(body)
        kind, message = err["kind"], err["error"]
    except (ValueError, KeyError, TypeError):
        err, kind, message = {}, "ServerError", f"HTTP {status}: {body[:200]!r}"
    code = _exit_code(kind)
    cls = {
        2: _errors.InputError,
        4: _errors.RetryableError,
        5: _errors.MergeConflictError,
    }.get(code, _errors.OmnigraphError)
    exc = cls(message)
    exc.kind = kind
    exc.exit_code = code
    exc.status = status  # type: ignore[attr-defined]
    at = err.get("at") or {}
    for key, attr in (
        ("line", "line"),
        ("row", "row"),
        ("column", "column"),
        ("type", "type_name"),
        ("property", "property"),
        ("value", "value"),
        ("first", "first"),
    ):
        if key in at:
            setattr(exc, attr, at[key])
    if err.get("key_conflict"):
        exc.type_name = err["key_conflict"]["type"]
        exc.id = err["key_conflict"]["id"]
    exc.blob_range = err.get("blob_range")  # type: ignore[attr-defined]
    if isinstance(exc, _errors.MergeConflictError):
        exc.conflicts = err.get("merge_conflicts") or []
    raise exc


def _commit_record(c: Mapping[str, Any]) -> dict[str, Any]:
    """A server commit as the embedded `commit` returns it."""
    parents = [p for p in (c["parent_commit_id"], c["merged_parent_commit_id"]) if p is not None]
    return {
        "id": c["graph_commit_id"],
        "parents": parents,
        "branch": c["graph_branch"],
        "manifest_version": c["graph_manifest_version"],
        "actor": c["actor_id"],
        "timestamp": c["created_at"],
        "kind": c["kind"],
        "summary": c["summary"],
    }


class RemoteGraph:
    """A graph on an Omnigraph server. Safe to share across threads (each
    thread keeps its own connection). Use it as a context manager, or
    `close()` it."""

    def __init__(self, url: str, graph: str, token: str | None = None, timeout: float = 300.0) -> None:
        _check_str("url", url)
        _check_str("graph", graph)
        _check_str("token", token, optional=True)
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"url must be http://HOST[:PORT] or https://..., not {url!r}")
        self._scheme = u.scheme
        self._host = u.hostname
        self._port = u.port
        self._prefix = u.path.rstrip("/")
        self._graph = urllib.parse.quote(graph, safe="")
        self._token = token
        self._timeout = timeout
        self._local = threading.local()
        self._closed = False
        self.url = url
        self.graph = graph

    # -- transport -----------------------------------------------------

    def _new_conn(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        return cls(self._host, self._port, timeout=self._timeout)

    def _conn(self) -> http.client.HTTPConnection:
        c = getattr(self._local, "conn", None)
        if c is None:
            c = self._new_conn()
            self._local.conn = c
        return c

    def _send(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
        query: Mapping[str, Any] | None = None,
        streamed: bool = False,
    ) -> http.client.HTTPResponse:
        """One request. A `streamed` answer (read by the caller at its own
        pace) gets a connection of its own, so that this thread's kept-alive
        one stays free for other calls meanwhile."""
        if self._closed:
            raise _errors.InputError("the connection was closed")
        url = f"{self._prefix}{path}"
        if query:
            q = {k: v for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        h = dict(headers or {})
        if self._token is not None:
            h["Authorization"] = f"Bearer {self._token}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body, default=_json_default).encode()
            h.setdefault("Content-Type", "application/json")
        chunked = body is not None and not isinstance(body, (bytes, str))
        for attempt in (0, 1):
            conn = self._new_conn() if streamed else self._conn()
            try:
                conn.request(method, url, body=body, headers=h, encode_chunked=chunked)
                return conn.getresponse()
            except BaseException as e:
                # The connection is in an unknown state: never reuse it.
                conn.close()
                if not streamed:
                    self._local.conn = None
                stale = isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError))
                # A kept-alive connection the server had closed: once more,
                # fresh (only when no streamed body was consumed).
                if attempt == 1 or not stale or chunked:
                    raise
        raise AssertionError("unreachable")

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        r = self._send(method, f"/graphs/{self._graph}{path}", body, **kw)
        data = r.read()
        if r.status >= 400:
            _raise(r.status, data)
        return json.loads(data)

    # -- reads ---------------------------------------------------------

    def query(
        self,
        source: str,
        name: str | None = None,
        params: Any = None,
        branch: str | None = None,
        snapshot: str | None = None,
        version: int | None = None,
    ) -> QueryResult:
        """As `Graph.query`; the rows travel as Arrow IPC."""
        _check_query(source, name, params)
        body = {"query": source, "name": name, "params": params, "branch": branch,
                "snapshot": snapshot, "version": version}
        r = self._send(
            "POST",
            f"/graphs/{self._graph}/query",
            {k: v for k, v in body.items() if v is not None},
            headers={"Accept": ARROW_STREAM},
        )
        data = r.read()
        if r.status >= 400:
            _raise(r.status, data)
        native = _omnigraph.result_from_ipc(
            data,
            r.getheader("Omnigraph-Query-Name", name or ""),
            r.getheader("Omnigraph-Graph-Branch", branch or "main"),
            r.getheader("Omnigraph-Graph-Commit-Id", ""),
            int(r.getheader("Omnigraph-Graph-Manifest-Version", "0")),
        )
        return QueryResult(native)

    def snapshot(
        self, branch: str | None = None, commit: str | None = None, version: int | None = None
    ) -> Any:
        """As `Graph.snapshot`."""
        s = self._call("GET", "/snapshot", query={"branch": branch, "snapshot": commit, "version": version})
        return {
            "branch": s["graph_branch"],
            "manifest_version": s["graph_manifest_version"],
            "head_commit": s["graph_commit_id"],
            "schema_id": s["schema_id"],
            "types": [
                {
                    "name": d["type"],
                    "kind": d["kind"],
                    "rows": d["rows"],
                    "fragments": d["fragments"],
                    "table_version": d["version"],
                    "lance_branch": d["lance_branch"],
                }
                for d in s["datasets"]
            ],
        }

    def export(
        self,
        branch: str = "main",
        path: str | os.PathLike[str] | None = None,
        snapshot: str | None = None,
        version: int | None = None,
        type_names: list[str] | None = None,
    ) -> Any:
        """As `Graph.export` (`version` is not served: give a snapshot);
        `type_names` keeps only those types."""
        if version is not None:
            raise _errors.InputError("a server exports a branch head or a snapshot, not a version")
        body: dict[str, Any] = {"branch": None if snapshot else branch, "snapshot": snapshot, "type_names": type_names}
        r = self._send(
            "POST",
            f"/graphs/{self._graph}/export",
            {k: v for k, v in body.items() if v is not None},
            streamed=True,
        )
        if r.status >= 400:
            _raise(r.status, r.read())
        if path is None:
            return _lines(r)
        tmp = os.fspath(path) + ".partial"
        n = 0
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                for line in _lines(r):
                    f.write(line + "\n")
                    n += 1
            os.replace(tmp, path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        return n

    def _blob(self, method: str, type: str, id: str, prop: str, headers: dict[str, str],
              branch: str | None, snapshot: str | None) -> http.client.HTTPResponse:
        r = self._send(
            method,
            f"/graphs/{self._graph}/blob",
            headers=headers,
            query={"type": type, "id": id, "property": prop, "branch": branch, "snapshot": snapshot},
        )
        if r.status >= 400:
            _raise(r.status, r.read())
        return r

    def blob_stat(self, type: str, id: str, prop: str, branch: str | None = None,
                  snapshot: str | None = None) -> Any:
        """As `Graph.blob_stat`, for a managed value."""
        r = self._blob("HEAD", type, id, prop, {}, branch, snapshot)
        r.read()
        return {"kind": "managed", "length": int(r.getheader("Content-Length")), "etag": r.getheader("ETag")}

    def read_blob(self, type: str, id: str, prop: str, offset: int = 0, length: int | None = None,
                  branch: str | None = None, snapshot: str | None = None) -> bytes:
        """As `Graph.read_blob`: the bytes `offset..offset+length`."""
        if length == 0:
            return b""
        headers = {}
        if offset or length is not None:
            end = "" if length is None else str(offset + length - 1)
            headers["Range"] = f"bytes={offset}-{end}"
        try:
            return self._blob("GET", type, id, prop, headers, branch, snapshot).read()
        except _errors.InputError as e:
            # HTTP has no empty range; an offset at the very end reads
            # nothing, as in-process.
            at_end = (getattr(e, "blob_range", None) or {}).get("length") == offset
            if e.kind == "BlobRangeNotSatisfiable" and at_end:
                return b""
            raise

    # -- writes --------------------------------------------------------

    def mutate(self, source: str, name: str | None = None, params: Any = None, branch: str = "main",
               if_commit: str | None = None) -> MutationResult:
        """As `Graph.mutate`; the commit records the token's actor."""
        _check_query(source, name, params)
        _check_str("branch", branch)
        body = {k: v for k, v in {"query": source, "name": name, "params": params, "branch": branch}.items()
                if v is not None}
        if if_commit is None:
            m = self._call("POST", "/mutate", body)
        else:
            m = self._call("POST", "/mutate/if-graph-commit", body,
                           headers={"Omnigraph-If-Graph-Commit": if_commit})
        return MutationResult(
            branch=m["branch"],
            commit=m["commit"]["graph_commit_id"],
            manifest_version=m["commit"]["graph_manifest_version"],
            nodes=m["affected_nodes_by_type"],
            edges=m["affected_edges_by_type"],
            member=m.get("member"),
        )

    def load(self, data: Any, mode: str = "append", branch: str = "main", from_: str | None = None) -> Any:
        """As `Graph.load`: JSONL text, a path, an iterable of dicts, or a
        mapping of Arrow tables, streamed to the server as NDJSON."""
        kind, arg, _ = _load_input(data, mode, branch, from_)
        body: Any
        if kind == "path":
            body = _file_chunks(arg)
        elif kind == "text":
            body = arg.encode("utf-8")
        elif kind == "tables":
            # Asked before the load's body starts: one request at a time.
            kinds = {t["name"]: t["kind"] for t in self.snapshot(branch=from_ or branch)["types"]}
            body = (c.encode("utf-8") for c in _chunks(_table_rows(arg, kinds)))
        else:
            body = (c.encode("utf-8") for c in arg)
        r = self._call("POST", "/load/ndjson", body,
                       headers={"Content-Type": "application/x-ndjson"},
                       query={"mode": mode, "branch": branch, "from": from_})
        return {
            "branch": r["branch"],
            "branch_created": r["branch_created"],
            "mode": r["mode"],
            "nodes": {t["name"]: t["entities_loaded"] for t in r["nodes"]},
            "edges": {t["name"]: t["entities_loaded"] for t in r["edges"]},
            "commit": r["commit"]["graph_commit_id"],
            "manifest_version": r["commit"]["graph_manifest_version"],
        }

    def branch_create(self, name: str, from_: str = "main") -> Any:
        _check_str("name", name)
        return self._call("POST", "/branches", {"name": name, "from": from_})

    def branch_list(self) -> Any:
        return self._call("GET", "/branches")["branches"]

    def branch_delete(self, name: str) -> Any:
        _check_str("name", name)
        return self._call("DELETE", f"/branches/{urllib.parse.quote(name, safe='')}")

    def merge(self, source: str, into: str = "main") -> Any:
        """As `Graph.merge`: `{"outcome", "commit"}`; conflicts raise
        `MergeConflictError` with `.conflicts`."""
        _check_str("source", source)
        m = self._call("POST", "/branches/merge", {"source": source, "target": into})
        return {"outcome": m["outcome"], "commit": m["graph_commit_id"]}

    def commits(self, branch: str = "main", limit: int | None = None) -> Any:
        c = self._call("GET", "/commits", query={"branch": branch, "limit": limit})
        return [_commit_record(x) for x in c["commits"]]

    def commit(self, id: str) -> Any:
        return _commit_record(self._call("GET", f"/commits/{urllib.parse.quote(id, safe='')}"))

    def changes(
        self,
        id: str | None = None,
        type: str | None = None,
        *,
        branch: str = "main",
        cursor: str | None = None,
        start: str | None = None,
        types: Any = (),
        kind: str | None = None,
        ops: Any = (),
        limit: int | None = None,
        wait_ms: int | None = None,
    ) -> Any:
        """As `Graph.changes`; a feed poll may wait up to `wait_ms` for a
        commit when nothing is new (long-poll)."""
        if id is not None:
            c = self._call("GET", f"/commits/{urllib.parse.quote(id, safe='')}/changes", query={"type": type})
            return c["changes"]
        query = {
            "branch": branch,
            "cursor": cursor,
            "start": start,
            "type": ",".join(types) or None,
            "kind": kind,
            "op": ",".join(ops) or None,
            "limit": limit,
            "wait_ms": wait_ms,
        }
        return self._call("GET", "/changes", query=query)

    def watch(
        self,
        branch: str = "main",
        cursor: str | None = None,
        start: str | None = None,
        types: Any = (),
        kind: str | None = None,
        ops: Any = (),
    ) -> Any:
        """As `Graph.watch`, each poll waiting on the server for a commit."""
        while True:
            page = self.changes(
                branch=branch, cursor=cursor, start=start, types=types, kind=kind, ops=ops, wait_ms=30_000
            )
            yield from page["blocks"]
            cursor, start = page["cursor"], None

    def schema_apply(self, source: str) -> Any:
        _check_str("source", source)
        r = self._call("POST", "/schema/apply", {"schema_source": source})
        return {
            "commit": r["graph_commit_id"],
            "manifest_version": r["graph_manifest_version"],
            "schema": r["schema_id"],
            "changed": r["changed"],
            "steps": r["steps"],
        }

    def schema_source(self, version: int | None = None) -> Any:
        if version is not None:
            raise _errors.InputError("a server serves the accepted schema now, not at a version")
        return {"version": None, "source": self._call("GET", "/schema")["schema_source"]}

    # -- the handle ----------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Drop this thread's connection; later calls raise."""
        c = getattr(self._local, "conn", None)
        if c is not None:
            c.close()
        self._closed = True

    def __enter__(self) -> RemoteGraph:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RemoteGraph({self.url!r}, graph={self.graph!r})"


def _table_rows(tables: list[tuple[str, Any]], kinds: Mapping[str, str]) -> Iterator[dict[str, Any]]:
    """Arrow tables as load-format rows (an edge table's `from` and `to`
    columns are its endpoints); `kinds` says which types are edges."""
    import pyarrow

    for type_name, table in tables:
        if type_name not in kinds:
            raise _errors.InputError(f"the schema has no type {type_name!r}")
        for batch in pyarrow.table(table).to_batches(LOAD_ROWS_PER_CHUNK):
            for row in batch.to_pylist():
                data = {k: v for k, v in row.items() if v is not None}
                if kinds[type_name] == "edge":
                    yield {"edge": type_name, "from": data.pop("from"), "to": data.pop("to"), "data": data}
                else:
                    yield {"type": type_name, "data": data}


def _file_chunks(path: str) -> Iterator[bytes]:
    with open(path, "rb") as f:
        while chunk := f.read(_FILE_CHUNK):
            yield chunk


def _lines(r: http.client.HTTPResponse) -> Iterator[str]:
    """The lines of a streamed NDJSON response; a cut stream raises."""
    rest = b""
    try:
        while chunk := r.read1(1 << 16):
            rest += chunk
            *lines, rest = rest.split(b"\n")
            for line in lines:
                if line:
                    yield line.decode("utf-8")
    except http.client.IncompleteRead as e:
        raise _errors.OmnigraphError(f"the export stopped midway: {e}") from e
    if rest:
        yield rest.decode("utf-8")


def connect(url: str, graph: str, token: str | None = None, timeout: float = 300.0) -> RemoteGraph:
    """The graph `graph` of the Omnigraph server at `url`, with `token`
    (its bearer token; None for an unauthenticated server)."""
    return RemoteGraph(url, graph, token, timeout)

