"""`Graph` and `AsyncGraph`: one set of methods over the native handle,
run to completion (the GIL released while the engine works) or awaited.
Values come back in the CLI's `--json` shapes, so the CLI's docs are these
methods' docs too."""

from __future__ import annotations

import base64
import datetime
import json
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from typing import Any, Callable, Union

from . import _omnigraph
from ._result import MutationResult, QueryResult

Params = Union[Mapping[str, Any], None]
Progress = Union[Callable[[int], Any], bool, None]

#: Rows of an iterable given to `load` that are turned into text at a time.
LOAD_ROWS_PER_CHUNK = 2048

_MODES = ("append", "merge", "overwrite")


def _check_str(name: str, v: Any, optional: bool = False) -> None:
    if v is None and optional:
        return
    if not isinstance(v, str):
        raise TypeError(f"{name} must be a str, not {type(v).__name__}")


def _check_params(params: Any) -> None:
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping, not {type(params).__name__}")


def _check_query(source: Any, name: Any, params: Any) -> None:
    """The arguments every call that runs a query's text takes."""
    _check_str("source", source)
    _check_str("name", name, optional=True)
    _check_params(params)


def _json_default(v: Any) -> Any:
    if isinstance(v, (datetime.date, datetime.datetime)):
        return v.isoformat()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return "base64:" + base64.b64encode(bytes(v)).decode("ascii")
    if hasattr(v, "tolist"):  # NumPy arrays and scalars
        return v.tolist()
    raise TypeError(f"a value of type {type(v).__name__} has no JSONL form")


def _chunks(rows: Iterable[Any]) -> Iterator[str]:
    """An iterable of load-format dicts as JSONL text, a chunk at a time."""
    chunk: list[str] = []
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise TypeError(
                f"row {i} of the load is a {type(row).__name__}, not a dict in the JSONL load format"
            )
        chunk.append(json.dumps(row, ensure_ascii=False, default=_json_default))
        if len(chunk) == LOAD_ROWS_PER_CHUNK:
            yield "\n".join(chunk) + "\n"
            chunk = []
    if chunk:
        yield "\n".join(chunk) + "\n"


def _progress(progress: Progress, total: int | None) -> tuple[Callable[[int], Any] | None, Any]:
    """The callback the engine calls with bytes read, and a bar to close."""
    if progress is None or progress is False:
        return None, None
    if progress is True:
        from tqdm import tqdm

        bar = tqdm(total=total, unit="B", unit_scale=True, desc="load")

        def tick(read: int) -> None:
            bar.update(read - bar.n)

        return tick, bar
    if not callable(progress):
        raise TypeError("progress must be a callable, True (a tqdm bar) or None")
    return progress, None


def _is_file(s: str) -> bool:
    return "\n" not in s and len(s) < 4096 and os.path.isfile(s)


def _load_input(data: Any, mode: Any, branch: Any, from_: Any) -> tuple[str, Any, int | None]:
    """A load's arguments checked, and its data told apart: `("path",
    path)`, `("text", str)`, `("tables", [(type_name, arrow source)])` or
    `("chunks", JSONL chunks)`, with its size in bytes when known."""
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {', '.join(_MODES)}, not {mode!r}")
    _check_str("branch", branch)
    _check_str("from_", from_, optional=True)
    if isinstance(data, os.PathLike) or (isinstance(data, str) and _is_file(data)):
        path = os.fspath(data)
        return "path", path, os.path.getsize(path)
    if isinstance(data, (str, bytes, bytearray)):
        text = data if isinstance(data, str) else bytes(data).decode("utf-8")
        return "text", text, len(text)
    if isinstance(data, Mapping):
        tables = []
        for type_name, table in data.items():
            _check_str("a table's type name", type_name)
            tables.append((type_name, _arrow_source(table)))
        return "tables", tables, None
    if isinstance(data, Iterable):
        return "chunks", _chunks(data), None
    raise TypeError(
        "data must be JSONL text, a path, an iterable of dicts or a mapping of tables, "
        f"not {type(data).__name__}"
    )


class _Methods:
    """The methods `Graph` and `AsyncGraph` share; `_run` decides whether a
    call blocks or is awaited."""

    _g: _omnigraph.Graph
    _async: bool

    def _run(self, call: Any, wrap: Callable[[Any], Any] | None = None) -> Any:
        raise NotImplementedError

    # -- reads ---------------------------------------------------------

    def query(
        self,
        source: str,
        name: str | None = None,
        params: Params = None,
        branch: str | None = None,
        snapshot: str | None = None,
        version: int | None = None,
    ) -> Any:
        """Run the read query `name` of `source` (a `.gq` text; `name` may be
        left out when it declares one query) against one snapshot: the head
        of `branch` (default `main`), the commit `snapshot`, or `branch` as of
        graph manifest `version`. Returns a `QueryResult`."""
        _check_query(source, name, params)
        call = self._g.query(source, name, params, branch, snapshot, version, self._async)
        return self._run(call, QueryResult)

    def explain(
        self,
        source: str,
        name: str | None = None,
        params: Params = None,
        branch: str | None = None,
        snapshot: str | None = None,
        version: int | None = None,
    ) -> Any:
        """The steps `query` would run and what each would read, without
        running them (the CLI's `query --explain --format json`)."""
        _check_query(source, name, params)
        return self._run(
            self._g.explain(source, name, params, branch, snapshot, version, self._async)
        )

    def snapshot(
        self, branch: str | None = None, commit: str | None = None, version: int | None = None
    ) -> Any:
        """One state of the graph: its branch, manifest version, head commit,
        schema and each table's rows and version (the CLI's `snapshot --json`)."""
        return self._run(self._g.snapshot(branch, commit, version, self._async))

    def export(
        self,
        branch: str = "main",
        path: str | os.PathLike[str] | None = None,
        snapshot: str | None = None,
        version: int | None = None,
    ) -> Any:
        """The graph as JSONL in the load format. With `path`, written there
        (the number of lines is returned); without, an iterator of lines
        produced as they are taken."""
        if path is None:
            lines = self._g.export_lines(branch, snapshot, version)
            if self._async:
                return _aiter_of(lines)
            return lines
        return self._run(self._g.export_path(os.fspath(path), branch, snapshot, version, self._async))

    def blob_stat(
        self,
        type: str,
        id: str,
        prop: str,
        branch: str | None = None,
        snapshot: str | None = None,
        version: int | None = None,
    ) -> Any:
        """What a Blob cell holds: `{"kind": "managed", "length", "etag"}` or
        `{"kind": "external", "uri", "offset", "length", "etag"}` (the
        object's ETag when the reference was written)."""
        return self._run(self._g.blob_stat(type, id, prop, branch, snapshot, version, self._async))

    def read_blob(
        self,
        type: str,
        id: str,
        prop: str,
        offset: int = 0,
        length: int | None = None,
        branch: str | None = None,
        snapshot: str | None = None,
        version: int | None = None,
    ) -> Any:
        """The bytes `offset..offset+length` of a managed Blob cell (to its
        end when `length` is None) as `bytes`."""
        return self._run(
            self._g.read_blob(
                type, id, prop, offset, length, branch, snapshot, version, self._async
            )
        )

    # -- writes --------------------------------------------------------

    def mutate(
        self,
        source: str,
        name: str | None = None,
        params: Params = None,
        branch: str = "main",
        if_commit: str | None = None,
    ) -> Any:
        """Run the mutation `name` of `source` on `branch` as one commit. With
        `if_commit`, only if the branch head is still that commit (otherwise
        `RetryableError` of kind `PreconditionFailed`, nothing written).
        Returns a `MutationResult`."""
        _check_query(source, name, params)
        _check_str("branch", branch)
        call = self._g.mutate(source, name, params, branch, if_commit, self._async)
        return self._run(call, lambda d: MutationResult(**d))

    def load(
        self,
        data: Any,
        mode: str = "append",
        branch: str = "main",
        from_: str | None = None,
        progress: Progress = None,
    ) -> Any:
        """Load `data` into `branch` as one commit, checked as a JSONL file is
        (errors name the line, or the table's row).

        `data` is JSONL text (a `str` that names no file), a path (an
        `os.PathLike`, or a `str` naming a file), an iterable of dicts in the
        JSONL load format (consumed in chunks), or a mapping `{type_name:
        table}` of tables exporting `__arrow_c_stream__` (pyarrow, polars,
        ...) whose columns are the type's properties (an edge's also `from`
        and `to`). `mode` is `append`, `merge` or `overwrite`; with `from_`, a
        missing `branch` is first made from that branch. `progress` is a
        callable told the input bytes read so far, or True for a tqdm bar.
        Returns the CLI's `load --json` report."""
        kind, arg, total = _load_input(data, mode, branch, from_)
        tick, bar = _progress(progress, total)
        try:
            call = self._g.load(kind, arg, mode, branch, from_, tick, self._async)
        except BaseException:
            if bar is not None:
                bar.close()
            raise
        if bar is None:
            return self._run(call)

        def closing(report: Any) -> Any:
            bar.close()
            return report

        return self._run(call, closing)

    def branch_create(self, name: str, from_: str = "main") -> Any:
        """Create branch `name` at the head of `from_`; the CLI's branch object."""
        _check_str("name", name)
        return self._run(self._g.branch_create(name, from_, self._async))

    def branch_list(self) -> Any:
        """Every branch, as the CLI's `branch list --json`."""
        return self._run(self._g.branch_list(self._async))

    def branch_delete(self, name: str) -> Any:
        """Delete branch `name`: `{"deleted": name}`."""
        _check_str("name", name)
        return self._run(self._g.branch_delete(name, self._async))

    def merge(self, source: str, into: str = "main") -> Any:
        """Merge branch `source` into `into` as one write: `{"outcome":
        "up_to_date" | "fast_forward" | "merged", "commit"}`; conflicts raise
        `MergeConflictError` with `.conflicts` and write nothing."""
        _check_str("source", source)
        return self._run(self._g.merge(source, into, self._async))

    def commits(self, branch: str = "main", limit: int | None = None) -> Any:
        """The commits of `branch`, newest first (the CLI's `commit list --json`)."""
        return self._run(self._g.commits(branch, limit, self._async))

    def commit(self, id: str) -> Any:
        """One commit (the CLI's `commit show --json`)."""
        return self._run(self._g.commit(id, self._async))

    def changes(
        self,
        id: str | None = None,
        type: str | None = None,
        *,
        branch: str = "main",
        cursor: str | None = None,
        start: str | None = None,
        types: Sequence[str] = (),
        kind: str | None = None,
        ops: Sequence[str] = (),
        limit: int | None = None,
    ) -> Any:
        """With a commit `id`: what that commit changed against its first
        parent, per entity (`type`: of one type). Without: a page of
        `branch`'s change feed (docs/changes.md) after `cursor` (or from
        `start`: "now", "beginning" or "after:COMMIT"), filtered by `types`,
        `kind` and `ops`: `{"blocks", "cursor", "caught_up"}`, each block
        with the `cursor` that resumes right after it."""
        if id is not None:
            return self._run(self._g.changes(id, type, self._async))
        _check_str("branch", branch)
        return self._run(
            self._g.feed(branch, cursor, start, list(types), kind, list(ops), limit, self._async)
        )

    # -- schema and upkeep ---------------------------------------------

    def schema_plan(self, source: str) -> Any:
        """The steps applying schema `source` would take, and whether it can."""
        _check_str("source", source)
        return self._run(self._g.schema_plan(source, self._async))

    def schema_apply(self, source: str) -> Any:
        """Apply schema `source` on `main` as one commit."""
        _check_str("source", source)
        return self._run(self._g.schema_apply(source, self._async))

    def schema_source(self, version: int | None = None) -> Any:
        """The accepted schema's source: `{"version", "source"}`."""
        return self._run(self._g.schema_source(version, self._async))

    def optimize(self, branch: str = "main") -> Any:
        """Build every declared index that is not current, and the graph
        index files; the CLI's `optimize --json` report."""
        return self._run(self._g.optimize(branch, self._async))

    def gc(self, dry_run: bool = False) -> Any:
        """Collect index files no graph version uses; the CLI's `gc --json`."""
        return self._run(self._g.gc(dry_run, self._async))

    def cleanup(
        self, older_than: str = "7d", keep_versions: int | None = None, dry_run: bool = False
    ) -> Any:
        """Remove graph versions older than `older_than` (`7d`, `12h`, `30m`,
        `0s`) except each branch's newest `keep_versions` commits, and the
        files only they or crashed writes hold; the CLI's `cleanup --json`."""
        _check_str("older_than", older_than)
        return self._run(self._g.cleanup(older_than, keep_versions, dry_run, self._async))

    def dataset(self, type_name: str, branch: str = "main", version: int | None = None) -> Any:
        """The table of `type_name` as a `lance.LanceDataset` opened at exactly
        the table version graph version `version` of `branch` names (its
        head when None). Read it only; needs pylance."""
        return self._run(
            self._g.table_location(type_name, branch, version, self._async), _open_dataset
        )

    # -- the handle ----------------------------------------------------

    @property
    def uri(self) -> str:
        return self._g.uri

    @property
    def read_only(self) -> bool:
        return self._g.read_only

    @property
    def closed(self) -> bool:
        return self._g.closed

    def __repr__(self) -> str:
        return repr(self._g)


def _arrow_source(table: Any) -> Any:
    if hasattr(table, "__arrow_c_stream__"):
        return table
    # pandas before 2.2 has no stream export of its own.
    if type(table).__module__.startswith("pandas"):
        import pyarrow

        return pyarrow.Table.from_pandas(table, preserve_index=False)
    raise TypeError(
        "a table to load must export __arrow_c_stream__ (a pyarrow Table or RecordBatchReader, "
        f"a polars or pandas DataFrame), not {type(table).__name__}"
    )


def _open_dataset(loc: dict[str, Any]) -> Any:
    import lance

    ds = lance.dataset(loc["uri"])
    if loc["lance_branch"] is not None:
        return ds.checkout_version((loc["lance_branch"], loc["version"]))
    return ds.checkout_version(loc["version"])


async def _aiter_of(lines: Any) -> Any:
    import asyncio

    loop = asyncio.get_running_loop()
    done = object()
    while True:
        line = await loop.run_in_executor(None, next, lines, done)
        if line is done:
            return
        yield line


class Graph(_Methods):
    """A graph opened in this process. Share one across threads freely;
    every call releases the GIL while the engine works. Use it as a context
    manager, or `close()` it."""

    _async = False

    def __init__(self, native: _omnigraph.Graph) -> None:
        self._g = native

    def watch(
        self,
        branch: str = "main",
        cursor: str | None = None,
        start: str | None = None,
        types: Sequence[str] = (),
        kind: str | None = None,
        ops: Sequence[str] = (),
        poll: float = 0.02,
    ) -> Iterator[Any]:
        """Follow `branch`'s change feed: yield each block as it lands
        (each with the `cursor` that resumes right after it), waiting
        `poll` seconds between looks once caught up; never ends."""
        import time

        while True:
            page = self.changes(
                branch=branch, cursor=cursor, start=start, types=types, kind=kind, ops=ops
            )
            yield from page["blocks"]
            cursor, start = page["cursor"], None
            if page["caught_up"]:
                time.sleep(poll)

    def _run(self, call: Any, wrap: Callable[[Any], Any] | None = None) -> Any:
        return call if wrap is None else wrap(call)

    def close(self) -> None:
        """Stop the handle; later calls raise. Closing twice does nothing."""
        self._g.close(False)

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class AsyncGraph(_Methods):
    """`Graph`'s methods as coroutines, for asyncio. Many calls may run at
    once on one handle (`asyncio.gather`); the work runs on the engine's own
    threads, never on the event loop."""

    _async = True

    def __init__(self, native: _omnigraph.Graph) -> None:
        self._g = native

    def _run(self, call: Any, wrap: Callable[[Any], Any] | None = None) -> Any:
        async def run() -> Any:
            value = await call
            return value if wrap is None else wrap(value)

        return run()

    async def close(self) -> None:
        await self._g.close(True)

    async def watch(
        self,
        branch: str = "main",
        cursor: str | None = None,
        start: str | None = None,
        types: Sequence[str] = (),
        kind: str | None = None,
        ops: Sequence[str] = (),
        poll: float = 0.02,
    ) -> AsyncIterator[Any]:
        """`Graph.watch` for `async for`."""
        import asyncio

        while True:
            page = await self.changes(
                branch=branch, cursor=cursor, start=start, types=types, kind=kind, ops=ops
            )
            for block in page["blocks"]:
                yield block
            cursor, start = page["cursor"], None
            if page["caught_up"]:
                await asyncio.sleep(poll)

    async def __aenter__(self) -> AsyncGraph:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
