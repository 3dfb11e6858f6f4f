"""Branches and history, schema evolution, upkeep, blobs, export and the
tables as Lance datasets: each method's value is the CLI's --json shape."""

import base64
import json

import pytest
from conftest import ADD, PEOPLE, PERSONS, SCHEMA, version

import omnigraph


def test_branches(g):
    b = g.branch_create("side")
    assert b["name"] == "side" and b["head"] == g.snapshot()["head_commit"]
    assert sorted(x["name"] for x in g.branch_list()) == ["main", "side"]
    g.mutate(ADD, params={"h": "s1", "n": "S1"}, branch="side")
    assert len(g.query(PERSONS, branch="side")) == 4
    assert len(g.query(PERSONS)) == 3
    merged = g.merge("side")
    assert merged["outcome"] == "fast_forward"
    assert merged["commit"] == g.snapshot()["head_commit"]
    assert g.merge("side")["outcome"] == "up_to_date"
    assert g.branch_delete("side") == {"deleted": "side"}
    assert [x["name"] for x in g.branch_list()] == ["main"]


def test_history(g):
    r = g.mutate(ADD, params={"h": "h1", "n": "H1"})
    commits = g.commits()
    assert commits[0]["id"] == r.commit
    assert len(g.commits(limit=1)) == 1
    assert g.commit(r.commit)["id"] == r.commit
    changes = g.changes(r.commit)
    assert [(c["type"], c["id"]) for c in changes] == [("Person", "h1")]
    assert g.changes(r.commit, type="Knows") == []


def test_mutation_result(g):
    r = g.mutate(ADD, params={"h": "z", "n": "Z"})
    assert isinstance(r, omnigraph.MutationResult)
    assert r.branch == "main" and r.nodes == {"Person": 1} and r.edges == {}
    assert r.manifest_version == version(g)
    assert r.to_dict()["commit"] == r.commit


def test_schema_plan_apply_and_source(g):
    new = SCHEMA.replace("city: String?", "city: String?\n    email: String?")
    plan = g.schema_plan(new)
    assert plan["steps"] and plan["steps"][0]["kind"] == "add_property"
    applied = g.schema_apply(new)
    assert applied["changed"] is True
    assert "email" in g.schema_source()["source"]
    old = g.schema_source(version=1)
    assert "email" not in old["source"] and old["version"] == 1
    assert g.schema_apply(new)["changed"] is False


def test_optimize_and_gc(g):
    report = g.optimize()
    assert report["branch"] == "main"
    assert "indexes" in report
    gc = g.gc(dry_run=True)
    assert isinstance(gc, dict)


def test_cleanup_removes_old_versions_and_types_a_read_of_one(g):
    for i in range(3):
        g.mutate(ADD, params={"h": f"c{i}", "n": f"C{i}"})
    latest = version(g)
    dry = g.cleanup(older_than="0s", dry_run=True)
    assert dry["removed_versions"] == latest - 1 and dry["oldest_kept"] == {"main": latest}
    assert g.cleanup(older_than="0s") == dry
    with pytest.raises(omnigraph.InputError) as e:
        g.query(PERSONS, version=1)
    assert e.value.kind == "VersionExpired" and f"is {latest}" in str(e.value)
    assert [c.get("expired", False) for c in g.commits()][:2] == [False, True]
    with pytest.raises(omnigraph.InputError) as e:
        g.cleanup(older_than="a week")
    assert e.value.kind == "BadRequest" and "'a week'" in str(e.value)


def test_export_round_trips(g, tmp_path):
    lines = list(g.export())
    assert len(lines) == 5
    assert all(json.loads(l) for l in lines)
    path = tmp_path / "out.jsonl"
    assert g.export(path=path) == 5
    with omnigraph.init(str(tmp_path / "copy.omni"), SCHEMA) as copy:
        copy.load(path)
        assert copy.query(PERSONS).to_pylist() == g.query(PERSONS).to_pylist()


def test_blobs(g):
    body = bytes(range(256)) * 10
    g.load(json.dumps({"type": "Doc", "data": {"slug": "a", "body": "base64:" + base64.b64encode(body).decode()}}) + "\n")
    stat = g.blob_stat("Doc", "a", "body")
    assert stat["kind"] == "managed" and stat["length"] == len(body)
    assert stat["etag"].startswith('"')
    assert g.read_blob("Doc", "a", "body") == body
    assert g.read_blob("Doc", "a", "body", offset=10, length=5) == body[10:15]
    assert g.read_blob("Doc", "a", "body", offset=len(body) - 3, length=100) == body[-3:]
    with pytest.raises(omnigraph.InputError) as e:
        g.read_blob("Doc", "a", "body", offset=len(body) + 1)
    assert e.value.kind == "BlobRangeNotSatisfiable"


def test_dataset_is_pinned_at_its_version(g):
    v = version(g)
    g.mutate(ADD, params={"h": "later", "n": "Later"})
    now = g.dataset("Person")
    then = g.dataset("Person", version=v)
    assert now.count_rows() == 4
    assert then.count_rows() == 3
    assert "later" not in then.to_table(columns=["handle"]).column("handle").to_pylist()
    with pytest.raises(omnigraph.OmnigraphError) as e:
        g.dataset("Robot")
    assert e.value.kind == "NotFound"


def test_dataset_of_a_branch(g):
    g.branch_create("side")
    g.mutate(ADD, params={"h": "s", "n": "S"}, branch="side")
    assert g.dataset("Person", branch="side").count_rows() == 4
    assert g.dataset("Person").count_rows() == 3


def test_duckdb_and_polars_on_a_dataset(g):
    import duckdb
    import polars

    ds = g.dataset("Person")
    assert duckdb.sql("select count(*) from ds where age > 30").fetchall() == [(2,)]
    assert polars.scan_pyarrow_dataset(ds).filter(polars.col("city") == "Paris").collect().height == 1
