"""Reads: results as Arrow, rows, columns in return order, snapshots and
time travel, names left out, and the data stack reading a result."""

import pyarrow as pa
import pytest
from conftest import FRIENDS, PERSONS, SCHEMA, version

import omnigraph


def test_query_result_is_arrow_with_the_schemas_types(g):
    r = g.query(PERSONS)
    assert len(r) == 3
    assert r.columns == ["p.handle", "p.name", "p.age"]
    assert r.query_name == "persons"
    t = r.to_arrow()
    assert t.schema.field("p.age").type == pa.int32()
    assert t.column("p.handle").to_pylist() == ["ada", "bob", "cy"]
    assert pa.table(r).equals(t)


def test_rows_keep_the_return_order(g):
    r = g.query('query q() { match { $p: Person { handle: "ada" } } return { $p.name, $p.handle } }')
    rows = r.to_pylist()
    assert rows == [{"p.name": "Ada", "p.handle": "ada"}]
    assert list(rows[0]) == ["p.name", "p.handle"]


def test_nulls_and_params(g):
    r = g.query(FRIENDS, params={"h": "ada"})
    assert r.to_pylist() == [{"f.handle": "bob"}]
    rows = g.query(PERSONS).to_pylist()
    assert rows[2] == {"p.handle": "cy", "p.name": "Cy", "p.age": None}


def test_polars_pandas_and_duckdb_read_a_result(g):
    import duckdb
    import polars

    r = g.query(PERSONS)
    assert polars.DataFrame(r)["p.handle"].to_list() == ["ada", "bob", "cy"]
    assert r.to_polars().shape == (3, 3)
    assert r.to_pandas()["p.name"].tolist() == ["Ada", "Bob", "Cy"]
    rel = duckdb.sql('select count(*) from r where "p.age" > 40')
    assert rel.fetchall() == [(1,)]


def test_the_result_names_its_snapshot(g):
    r = g.query(PERSONS)
    snap = g.snapshot()
    assert r.graph_commit_id == snap["head_commit"]
    assert r.manifest_version == snap["manifest_version"]
    assert r.branch == "main"


def test_time_travel_by_version_and_by_commit(g):
    before = g.snapshot()
    g.mutate('query m() { insert Person { handle: "dee", name: "Dee" } }')
    assert len(g.query(PERSONS)) == 4
    assert len(g.query(PERSONS, version=before["manifest_version"])) == 3
    assert len(g.query(PERSONS, snapshot=before["head_commit"])) == 3


def test_snapshot_and_version_together_are_refused(g):
    with pytest.raises(omnigraph.InputError) as e:
        g.query(PERSONS, snapshot="x", version=1)
    assert e.value.kind == "BadRequest"


def test_a_name_is_needed_when_the_source_has_several(g):
    src = PERSONS + "\n" + FRIENDS
    with pytest.raises(omnigraph.InputError) as e:
        g.query(src)
    assert e.value.kind == "BadRequest"
    assert "persons, friends" in str(e.value)
    assert len(g.query(src, name="friends", params={"h": "bob"})) == 1


def test_an_empty_result_still_has_its_columns(g):
    r = g.query('query q() { match { $p: Person { handle: "nobody" } } return { $p.handle, $p.age } }')
    assert len(r) == 0
    t = r.to_arrow()
    assert t.num_rows == 0
    assert t.schema.names == ["p.handle", "p.age"]


def test_explain_lists_the_steps(g):
    steps = g.explain(FRIENDS, params={"h": "ada"})
    assert isinstance(steps, list) and steps
    assert all("op" in s or "step" in s or "detail" in s for s in steps)


def test_read_only_handles_refuse_writes(g, uri):
    with omnigraph.open(uri, read_only=True) as ro:
        assert ro.read_only
        assert len(ro.query(PERSONS)) == 3
        with pytest.raises(omnigraph.InputError) as e:
            ro.mutate('query m() { insert Person { handle: "x", name: "X" } }')
        assert e.value.kind == "ReadOnly"


def test_memory_graphs_reopen_within_the_process():
    with omnigraph.init("memory://py-test", SCHEMA) as a:
        a.mutate('query m() { insert Person { handle: "m", name: "M" } }')
        with omnigraph.open("memory://py-test") as b:
            assert b.query(PERSONS).to_pylist()[0]["p.handle"] == "m"


def test_a_closed_graph_refuses_calls(uri):
    g = omnigraph.init(uri, SCHEMA)
    g.close()
    g.close()
    assert g.closed
    with pytest.raises(omnigraph.InputError) as e:
        g.query(PERSONS)
    assert "closed" in str(e.value)


def test_python_mistakes_are_python_errors(g):
    for run in (g.query, g.explain, g.mutate):
        with pytest.raises(TypeError, match="source must be a str, not int"):
            run(42)
        with pytest.raises(TypeError, match="name must be a str, not int"):
            run(PERSONS, name=1)
        with pytest.raises(TypeError, match="params must be a mapping, not list"):
            run(PERSONS, params=["h"])
    with pytest.raises(TypeError):
        g.query(FRIENDS, params={"h": object()})
    with pytest.raises(ValueError):
        g.load("", mode="upsert")


def test_version_is_the_crates():
    assert omnigraph.__version__ == "0.1.0"
