"""Results of reads and writes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import _omnigraph


class QueryResult:
    """What a query returned, with the snapshot it read.

    The rows stay in the engine's Arrow buffers until asked for:
    `to_arrow()`, `to_polars()`, `to_pandas()` and `pyarrow.table(r)`,
    `polars.DataFrame(r)` or DuckDB read them through the Arrow C stream
    interface (`__arrow_c_stream__`) without copying a column;
    `to_pylist()` builds dicts keyed like the CLI's JSON rows."""

    __slots__ = ("_r",)

    def __init__(self, native: _omnigraph.QueryResult) -> None:
        self._r = native

    @property
    def query_name(self) -> str:
        return self._r.query_name

    @property
    def branch(self) -> str:
        return self._r.branch

    @property
    def graph_commit_id(self) -> str:
        return self._r.graph_commit_id

    @property
    def manifest_version(self) -> int:
        return self._r.manifest_version

    @property
    def columns(self) -> list[str]:
        """Column names, in the query's `return` order."""
        return self._r.columns

    def __len__(self) -> int:
        return len(self._r)

    def __arrow_c_stream__(self, requested_schema: Any = None) -> Any:
        return self._r.__arrow_c_stream__(requested_schema)

    def to_pylist(self) -> list[dict[str, Any]]:
        """Every row as a dict, values as the CLI's `--format json` gives them."""
        return self._r.to_pylist()

    def to_arrow(self) -> Any:
        """The rows as a `pyarrow.Table` (needs pyarrow); no column is copied."""
        import pyarrow

        return pyarrow.table(self)

    def to_polars(self) -> Any:
        """The rows as a `polars.DataFrame` (needs polars)."""
        import polars

        return polars.DataFrame(self)

    def to_pandas(self) -> Any:
        """The rows as a `pandas.DataFrame` (needs pyarrow and pandas)."""
        return self.to_arrow().to_pandas()

    def __repr__(self) -> str:
        return repr(self._r)


@dataclass(frozen=True)
class MutationResult:
    """What a mutation did: its commit, the graph version it made, and the
    rows it touched per node and edge type (as the CLI's `--json`)."""

    branch: str
    commit: str
    manifest_version: int
    nodes: dict[str, int] = field(default_factory=dict)
    edges: dict[str, int] = field(default_factory=dict)
    # Its place among the members of a commit it shared with mutations
    # queued beside it (group commit); None when the commit is its own.
    member: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {
            "branch": self.branch,
            "commit": self.commit,
            "manifest_version": self.manifest_version,
            "nodes": dict(self.nodes),
            "edges": dict(self.edges),
        }
        if self.member is not None:
            out["member"] = self.member
        return out
