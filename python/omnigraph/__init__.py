"""Omnigraph: a typed property-graph database on Lance, in-process.

    import omnigraph
    with omnigraph.init("/tmp/g.omni", schema_source) as g:
        g.load("data.jsonl")
        table = g.query("query q() { match { $p: Person } return { $p.name } }").to_arrow()

`init` and `open` give a `Graph` (blocking calls, the GIL released while
the engine works); `init_async` and `open_async` an `AsyncGraph` (the same
methods as coroutines); `connect(url, graph, token)` a `RemoteGraph` on an
`omnigraph serve` server, with the same methods and results. A `uri` is a local path, `memory://name` or
`s3://bucket/path` (with the usual AWS environment). See docs/python.md."""

from __future__ import annotations

from typing import Any

from . import _omnigraph
from ._errors import InputError, MergeConflictError, OmnigraphError, RetryableError
from ._graph import AsyncGraph, Graph
from ._remote import RemoteGraph, connect
from ._result import MutationResult, QueryResult

__version__: str = _omnigraph.__version__

__all__ = [
    "AsyncGraph",
    "Graph",
    "InputError",
    "MergeConflictError",
    "MutationResult",
    "OmnigraphError",
    "QueryResult",
    "RemoteGraph",
    "RetryableError",
    "__version__",
    "connect",
    "init",
    "init_async",
    "open",
    "open_async",
]


def _check_uri(uri: object) -> str:
    import os

    if isinstance(uri, os.PathLike):
        return os.fspath(uri)  # type: ignore[return-value]
    if not isinstance(uri, str):
        raise TypeError(f"uri must be a str or a path, not {type(uri).__name__}")
    return uri


def _path(p: Any) -> str | None:
    """A policy file's path as text (a `str` or an `os.PathLike`)."""
    import os

    if p is None:
        return None
    if not isinstance(p, (str, os.PathLike)):
        raise TypeError(f"policy must be a file's path, not {type(p).__name__}")
    return os.fspath(p)


def init(uri: str, schema: str, actor: str | None = None) -> Graph:
    """Create a graph at `uri` with `schema` (schema source text, `.pg`).
    `actor` is recorded in every commit this handle makes (default: $USER)."""
    if not isinstance(schema, str):
        raise TypeError(f"schema must be the schema's source text, not {type(schema).__name__}")
    return Graph(_omnigraph.init(_check_uri(uri), schema, actor, False))


def open(  # noqa: A001
    uri: str, read_only: bool = False, actor: str | None = None, policy: str | None = None
) -> Graph:
    """Open the graph at `uri`. A read-only handle refuses writes and leaves
    recovery to writers. `actor` is who acts (recorded in commits); with
    `policy` (a policy file: YAML rules, or Cedar in a `.cedar` file) every
    call is checked and a refused one raises `PolicyDenied`."""
    return Graph(_omnigraph.open(_check_uri(uri), bool(read_only), actor, _path(policy), False))


async def init_async(uri: str, schema: str, actor: str | None = None) -> AsyncGraph:
    """`init` for asyncio: an `AsyncGraph`."""
    if not isinstance(schema, str):
        raise TypeError(f"schema must be the schema's source text, not {type(schema).__name__}")
    return AsyncGraph(await _omnigraph.init(_check_uri(uri), schema, actor, True))


async def open_async(
    uri: str, read_only: bool = False, actor: str | None = None, policy: str | None = None
) -> AsyncGraph:
    """`open` for asyncio: an `AsyncGraph`."""
    return AsyncGraph(
        await _omnigraph.open(_check_uri(uri), bool(read_only), actor, _path(policy), True)
    )
