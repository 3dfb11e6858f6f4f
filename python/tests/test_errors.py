"""Each failure kind as its exception: the group follows the CLI's exit
code, `.kind` is the CLI's error[Kind], and the fields name the place."""

import pytest
from conftest import ADD, PERSONS, version

import omnigraph


def test_a_parse_error_is_an_input_error_with_its_position(g):
    with pytest.raises(omnigraph.InputError) as e:
        g.query("query q( { }")
    err = e.value
    assert isinstance(err, ValueError)
    assert err.kind == "ParseError" and err.exit_code == 2
    assert err.line == 1 and err.column > 0
    assert str(err).startswith("error[ParseError]: ")


def test_a_type_error_names_the_type(g):
    with pytest.raises(omnigraph.InputError) as e:
        g.query("query q() { match { $p: Nope } return { $p.x } }")
    assert e.value.kind == "TypeError"
    assert "Nope" in str(e.value)


def test_bad_data_names_the_line_and_writes_nothing(g):
    before = version(g)
    bad = '{"type": "Person", "data": {"handle": "x", "name": "X"}}\n{"type": "Person", "data": {"handle": "y", "name": "Y", "age": "old"}}\n'
    with pytest.raises(omnigraph.OmnigraphError) as e:
        g.load(bad)
    err = e.value
    assert type(err) is omnigraph.InputError
    assert err.kind == "InvalidData" and err.exit_code == 2
    assert err.line == 2 and err.type_name == "Person" and err.property == "age"
    assert version(g) == before
    assert len(g.query(PERSONS)) == 3


def test_a_key_conflict_names_the_type_and_id(g):
    with pytest.raises(omnigraph.OmnigraphError) as e:
        g.load('{"type": "Person", "data": {"handle": "ada", "name": "Again"}}\n')
    assert e.value.kind == "KeyConflict" and isinstance(e.value, omnigraph.InputError)
    assert e.value.type_name == "Person" and e.value.id == "ada"


def test_a_failed_precondition_is_retryable(g):
    head = g.snapshot()["head_commit"]
    g.mutate(ADD, params={"h": "p1", "n": "P1"})
    with pytest.raises(omnigraph.RetryableError) as e:
        g.mutate(ADD, params={"h": "p2", "n": "P2"}, if_commit=head)
    err = e.value
    assert err.kind == "PreconditionFailed" and err.exit_code == 4
    assert err.expected == head and err.actual == g.snapshot()["head_commit"]
    assert len(g.query(PERSONS)) == 4
    r = g.mutate(ADD, params={"h": "p2", "n": "P2"}, if_commit=err.actual)
    assert r.nodes == {"Person": 1}


def test_merge_conflicts_are_listed(g):
    g.branch_create("side")
    upd = 'query u($n: String) { update Person set { name: $n } where handle = "ada" }'
    g.mutate(upd, params={"n": "Main"})
    g.mutate(upd, params={"n": "Side"}, branch="side")
    before = version(g)
    with pytest.raises(omnigraph.MergeConflictError) as e:
        g.merge("side")
    err = e.value
    assert err.kind == "MergeConflicts" and err.exit_code == 5
    assert err.conflicts == [
        {"kind": "DivergentUpdate", "type": "Person", "id": "ada", "property": "name"}
    ]
    assert version(g) == before


def test_a_name_of_nothing_is_wrong_input(g):
    with pytest.raises(omnigraph.InputError) as e:
        g.branch_delete("nope")
    assert e.value.kind == "NotFound" and e.value.exit_code == 2
    with pytest.raises(omnigraph.InputError) as e:
        g.branch_create("main")
    assert e.value.kind == "AlreadyExists" and e.value.exit_code == 2
    with pytest.raises(omnigraph.OmnigraphError) as e:
        omnigraph.open("/nonexistent/graph.omni")
    assert e.value.kind == "NotFound"
    assert "/nonexistent/graph.omni" in str(e.value)


def test_the_groups_are_exceptions_of_the_base():
    assert issubclass(omnigraph.InputError, omnigraph.OmnigraphError)
    assert issubclass(omnigraph.InputError, ValueError)
    assert issubclass(omnigraph.RetryableError, omnigraph.OmnigraphError)
    assert issubclass(omnigraph.MergeConflictError, omnigraph.OmnigraphError)
