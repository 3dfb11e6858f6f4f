"""`omnigraph.connect`: a served graph with the embedded Graph's methods and
results, against a real `omnigraph serve` on loopback."""

import json
import os
import signal
import subprocess

import pyarrow
import pytest

import omnigraph
from conftest import ADD, FRIENDS, PEOPLE, PERSONS, SCHEMA

TOKENS = {"ada": "ada-token", "bob": "bob-token"}


def binary():
    path = os.environ.get("OMNIGRAPH_BIN")
    assert path and os.path.exists(path), (
        "set OMNIGRAPH_BIN to the omnigraph binary (scripts/python-test.sh does)"
    )
    return path


@pytest.fixture
def served(tmp_path):
    """A loaded graph, closed in this process, served by `omnigraph serve`."""
    uri = str(tmp_path / "g.omni")
    with omnigraph.init(uri, SCHEMA) as graph:
        graph.load(PEOPLE)
        graph.load('{"type": "Doc", "data": {"slug": "d1", "body": "base64:aGVsbG8gYmxvYg=="}}')
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    # Tokens alone allow only reads: this policy lets every actor write.
    policy = tmp_path / "policy.yaml"
    policy.write_text('version: 1\nrules:\n  - id: all\n    allow: { actors: "*", actions: ["*"] }\n')
    proc = subprocess.Popen(
        [binary(), "serve", "--graph", f"g={uri}", "--listen", "127.0.0.1:0", "--tokens", str(tokens), "--policy", str(policy)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("OMNIGRAPH_LISTEN_ADDR="), line
        url = "http://" + line.split("=", 1)[1]
        yield url, uri
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_remote_query_is_the_same_result_as_an_embedded_one(served):
    url, uri = served
    with omnigraph.connect(url, "g", token="ada-token") as remote:
        r = remote.query(PERSONS)
        assert isinstance(r, omnigraph.QueryResult)
        assert r.query_name == "persons"
        assert r.branch == "main"
        assert r.columns == ["p.handle", "p.name", "p.age"]
        assert len(r) == 3
        table = r.to_arrow()
        assert table.column("p.handle").to_pylist() == ["ada", "bob", "cy"]
        assert pyarrow.table(r).num_rows == 3
        friends = remote.query(FRIENDS, params={"h": "ada"}).to_pylist()
        head = remote.snapshot()["head_commit"]
        assert r.graph_commit_id == head
    with omnigraph.open(uri, read_only=True) as local:
        assert local.query(PERSONS).to_pylist() == r.to_pylist()
        assert local.query(FRIENDS, params={"h": "ada"}).to_pylist() == friends
        assert local.snapshot()["head_commit"] == head


def test_remote_writes_record_the_tokens_actor_and_return_the_embedded_shapes(served):
    url, uri = served
    remote = omnigraph.connect(url, "g", token="bob-token")
    m = remote.mutate(ADD, params={"h": "dee", "n": "Dee"})
    assert isinstance(m, omnigraph.MutationResult)
    assert m.nodes == {"Person": 1}
    c = remote.commit(m.commit)
    assert c["actor"] == "bob"
    assert c["id"] == m.commit
    assert remote.commits(limit=1)[0] == c
    assert remote.changes(m.commit) == [{"change": "insert", "type": "Person", "id": "dee"}]
    with pytest.raises(omnigraph.RetryableError) as e:
        remote.mutate(ADD, params={"h": "eve", "n": "Eve"}, if_commit=c["parents"][0])
    assert e.value.kind == "PreconditionFailed"
    ok = remote.mutate(ADD, params={"h": "eve", "n": "Eve"}, if_commit=m.commit)
    assert ok.manifest_version > m.manifest_version

    b = remote.branch_create("feature")
    assert b["name"] == "feature" and b["head"] == ok.commit
    assert sorted(x["name"] for x in remote.branch_list()) == ["feature", "main"]
    report = remote.load(
        [{"type": "Person", "data": {"handle": f"p{i}", "name": f"P{i}"}} for i in range(5000)],
        branch="feature",
    )
    assert report["nodes"] == {"Person": 5000} and report["branch"] == "feature"
    merged = remote.merge("feature")
    assert merged == {"outcome": "fast_forward", "commit": report["commit"]}
    assert remote.branch_delete("feature") == {"deleted": "feature"}
    assert remote.snapshot()["types"][0]["rows"] == 5005
    with omnigraph.open(uri, read_only=True) as local:
        assert local.commit(m.commit) == c
        assert local.snapshot()["types"] == remote.snapshot()["types"]


def test_remote_loads_take_text_files_and_arrow_tables(served, tmp_path):
    url, _ = served
    remote = omnigraph.connect(url, "g", token="ada-token")
    f = tmp_path / "more.jsonl"
    f.write_text('{"type": "Person", "data": {"handle": "fay", "name": "Fay"}}\n')
    assert remote.load(str(f))["nodes"] == {"Person": 1}
    assert remote.load('{"type": "Person", "data": {"handle": "gus", "name": "Gus"}}')["nodes"] == {"Person": 1}
    people = pyarrow.table({"handle": ["hal", "ivy"], "name": ["Hal", "Ivy"], "age": [3, None]})
    knows = pyarrow.table({"from": ["hal"], "to": ["ivy"], "since": [2024]})
    r = remote.load({"Person": people, "Knows": knows})
    assert r["nodes"] == {"Person": 2} and r["edges"] == {"Knows": 1}
    assert remote.query(FRIENDS, params={"h": "hal"}).to_pylist() == [{"f.handle": "ivy"}]
    lines = list(remote.export())
    assert sum(1 for x in lines if json.loads(x).get("type") == "Person") == 7
    out = tmp_path / "export.jsonl"
    assert remote.export(path=out) == len(lines)
    assert out.read_text().splitlines() == lines
    only = list(remote.export(type_names=["Knows"]))
    assert all(json.loads(x)["edge"] == "Knows" for x in only) and len(only) == 3


def test_remote_errors_are_the_embedded_exceptions(served):
    url, _ = served
    remote = omnigraph.connect(url, "g", token="ada-token")
    with pytest.raises(omnigraph.InputError) as e:
        remote.query("query q( {")
    assert e.value.kind == "ParseError" and e.value.line == 1
    before = remote.snapshot()["manifest_version"]
    with pytest.raises(omnigraph.OmnigraphError) as e:
        remote.load('{"type": "Person", "data": {"handle": "x", "name": "X"}}\n{"type": "Person", "data": {"handle": "y", "name": "Y", "age": "old"}}\n')
    err = e.value
    assert type(err) is omnigraph.InputError
    assert err.kind == "InvalidData" and err.exit_code == 2
    assert err.line == 2 and err.type_name == "Person" and err.property == "age"
    assert remote.snapshot()["manifest_version"] == before
    with pytest.raises(omnigraph.OmnigraphError) as e:
        remote.load('{"type": "Person", "data": {"handle": "ada", "name": "Again"}}\n')
    assert e.value.kind == "KeyConflict" and isinstance(e.value, omnigraph.InputError)
    assert e.value.type_name == "Person" and e.value.id == "ada"
    with pytest.raises(omnigraph.OmnigraphError) as e:
        remote.commit("nope")
    assert e.value.kind == "NotFound"
    with pytest.raises(omnigraph.OmnigraphError) as e:
        omnigraph.connect(url, "g", token="wrong").snapshot()
    assert e.value.kind == "Unauthorized"
    with pytest.raises(omnigraph.OmnigraphError) as e:
        omnigraph.connect(url, "other", token="ada-token").snapshot()
    assert e.value.kind == "NotFound"


def test_remote_blobs_read_ranges_and_stat(served):
    url, uri = served
    remote = omnigraph.connect(url, "g", token="ada-token")
    with omnigraph.open(uri, read_only=True) as local:
        want = local.blob_stat("Doc", "d1", "body")
    assert remote.blob_stat("Doc", "d1", "body") == want
    assert remote.read_blob("Doc", "d1", "body") == b"hello blob"
    assert remote.read_blob("Doc", "d1", "body", offset=6) == b"blob"
    assert remote.read_blob("Doc", "d1", "body", offset=1, length=3) == b"ell"
    assert remote.read_blob("Doc", "d1", "body", offset=10) == b""
    with pytest.raises(omnigraph.InputError) as e:
        remote.read_blob("Doc", "d1", "body", offset=50)
    assert e.value.kind == "BlobRangeNotSatisfiable"


def test_a_remote_feed_is_the_embedded_feed(served):
    url, uri = served
    remote = omnigraph.connect(url, "g", token="bob-token")
    page = remote.changes(start="beginning")
    history = [c["id"] for c in reversed(remote.commits())]
    assert page["caught_up"] is True
    assert [b["graph_commit_id"] for b in page["blocks"]] == history
    m = remote.mutate(ADD, params={"h": "fee", "n": "Fee"})
    block = next(remote.watch(cursor=page["cursor"]))
    assert block["graph_commit_id"] == m.commit and block["actor"] == "bob"
    assert block["changes"][0]["after"]["data"]["handle"] == "fee"
    with pytest.raises(omnigraph.InputError) as e:
        remote.changes(cursor=block["cursor"], types=["Person"])
    assert e.value.kind == "CursorRejected"
