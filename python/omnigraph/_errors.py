"""The package's exceptions. Each carries `.kind`, the CLI's `error[Kind]`,
and `.exit_code`, the code the CLI exits with; the groups follow the exit
codes, so a caller can catch "my input is wrong" or "retry" as a whole."""

from __future__ import annotations

from typing import Any


class OmnigraphError(Exception):
    """An error of the engine. `kind` names it (`NotFound`, `StorageError`,
    ...); kinds that name a place in the input carry it as attributes
    (`line`, `row`, `type_name`, `property`, `value`, `column`, `id`;
    `first`: the line or row of the earlier row a duplicate repeats)."""

    kind: str = "Error"
    exit_code: int = 1
    line: int | None = None
    row: int | None = None
    column: int | None = None
    type_name: str | None = None
    property: str | None = None
    value: str | None = None
    first: int | None = None
    id: str | None = None

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"error[{self.kind}]: {self.message}"


class InputError(OmnigraphError, ValueError):
    """The input is wrong (a parse, schema or type error, bad data, a key
    that exists, a bad request, a write on a read-only graph or over a
    limit, an unsatisfiable blob range, a version a cleanup removed, a
    graph, branch, commit, type or row that does not exist or one to create
    that does): fix it and call again. The CLI exits 2 for these."""

    exit_code = 2


class RetryableError(OmnigraphError):
    """A condition or another writer got in the way (the branch moved, the
    schema changed, a gate stayed held, a precondition failed): nothing was
    written; read again and retry. The CLI exits 4 for these."""

    exit_code = 4
    expected: str | None = None
    actual: str | None = None


class MergeConflictError(OmnigraphError):
    """A merge found conflicts and wrote nothing. `conflicts` lists them in
    the CLI's JSON shape (`kind`, `type`, `id`, `property`). The CLI exits 5."""

    exit_code = 5
    conflicts: list[dict[str, Any]]

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.conflicts = []
