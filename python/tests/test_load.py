"""Loads from every input kind, each checked as a file is: a bad row in
each gives a typed error naming the line (or the table's row) and writes
nothing, not even files no reader sees."""

import pathlib

import pyarrow as pa
import pytest
from conftest import PERSONS, SCHEMA, files_under, version

import omnigraph

GOOD = [
    {"type": "Person", "data": {"handle": "dee", "name": "Dee", "age": 29}},
    {"type": "Person", "data": {"handle": "eve", "name": "Eve"}},
    {"edge": "Knows", "from": "dee", "to": "eve", "data": {"since": 2021}},
]
BAD_LINE = 2  # the second Person lacks its required name


def bad_rows():
    return [
        {"type": "Person", "data": {"handle": "dee", "name": "Dee"}},
        {"type": "Person", "data": {"handle": "eve"}},
    ]


def jsonl(rows):
    import json

    return "".join(json.dumps(r) + "\n" for r in rows)


@pytest.fixture
def empty(uri):
    with omnigraph.init(uri, SCHEMA) as graph:
        yield graph


def assert_refused(graph, uri, call, line=None, row=None):
    before, files = version(graph), files_under(uri)
    with pytest.raises(omnigraph.OmnigraphError) as e:
        call()
    err = e.value
    assert err.kind == "InvalidData"
    assert err.type_name == "Person" and err.property == "name"
    assert (err.line, err.row) == (line, row)
    assert version(graph) == before
    assert files_under(uri) == files
    assert len(graph.query(PERSONS)) == 0


def counts(report):
    return report["nodes"], report["edges"]


def test_text(empty, uri):
    assert counts(empty.load(jsonl(GOOD))) == ({"Person": 2}, {"Knows": 1})
    assert len(empty.query(PERSONS)) == 2


def test_text_with_a_bad_line(empty, uri):
    assert_refused(empty, uri, lambda: empty.load(jsonl(bad_rows())), line=BAD_LINE)


def test_a_path_and_a_str_naming_a_file(empty, uri, tmp_path):
    f = tmp_path / "data.jsonl"
    f.write_text(jsonl(GOOD[:1]))
    empty.load(f)
    f.write_text(jsonl(GOOD[1:2]))
    empty.load(str(f))
    assert len(empty.query(PERSONS)) == 2


def test_a_file_with_a_bad_line(empty, uri, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text(jsonl(bad_rows()))
    assert_refused(empty, uri, lambda: empty.load(pathlib.Path(f)), line=BAD_LINE)


def test_an_iterable_of_dicts_is_consumed_as_it_goes(empty, uri):
    taken = []

    def rows():
        for i in range(5000):
            taken.append(i)
            yield {"type": "Person", "data": {"handle": f"h{i}", "name": f"N{i}"}}

    report = empty.load(rows())
    assert report["nodes"] == {"Person": 5000}
    assert len(taken) == 5000
    assert len(empty.query(PERSONS)) == 5000


def test_an_iterable_with_a_bad_row(empty, uri):
    assert_refused(empty, uri, lambda: empty.load(iter(bad_rows())), line=BAD_LINE)


def test_an_exception_of_the_iterable_reaches_the_caller(empty, uri):
    def rows():
        yield GOOD[0]
        raise KeyError("from the generator")

    before = version(empty)
    with pytest.raises(KeyError, match="from the generator"):
        empty.load(rows())
    with pytest.raises(TypeError, match="row 1 of the load"):
        empty.load([GOOD[0], "not a dict"])
    assert version(empty) == before


def test_arrow_tables_polars_and_pandas(empty):
    import polars

    people = pa.table({"handle": ["dee", "eve"], "name": ["Dee", "Eve"], "age": [29, None]})
    knows = pa.table({"from": ["dee"], "to": ["eve"], "since": pa.array([2021], pa.int16())})
    report = empty.load({"Person": people, "Knows": knows})
    assert counts(report) == ({"Person": 2}, {"Knows": 1})
    more = polars.DataFrame({"handle": ["fay"], "name": ["Fay"], "city": ["Rome"]})
    empty.load({"Person": more})
    import pandas

    empty.load({"Person": pandas.DataFrame({"handle": ["gus", "hal"], "name": ["Gus", "Hal"]})})
    rows = empty.query(PERSONS).to_pylist()
    assert [r["p.handle"] for r in rows] == ["dee", "eve", "fay", "gus", "hal"]
    assert rows[0]["p.age"] == 29 and rows[1]["p.age"] is None


def test_an_arrow_table_with_a_bad_row_names_the_row(empty, uri):
    people = pa.table({"handle": ["dee", "eve", "fay"], "name": ["Dee", None, "Fay"]})
    assert_refused(empty, uri, lambda: empty.load({"Person": people}), row=1)


BIG = 200_000  # rows: several of the blocks checked in parallel


def big_people(names):
    handles = [f"p{i}" for i in range(BIG)]
    table = pa.table({"handle": handles, "name": names})
    return pa.Table.from_batches(table.to_batches(max_chunksize=30_000))


def test_a_big_table_keeps_its_row_order_across_blocks(empty):
    names = [f"n{i}" for i in range(BIG)]
    people = big_people(names)
    report = empty.load({"Person": people}, mode="overwrite")
    assert counts(report) == ({"Person": BIG}, {})
    one = "query one($h: String) { match { $p: Person { handle: $h } } return { $p.name } }"
    for h in ["p0", "p65535", "p65536", "p199999"]:
        assert empty.query(one, params={"h": h}).to_pylist() == [{"p.name": "n" + h[1:]}]


def test_a_duplicate_across_blocks_names_both_rows(empty, uri):
    again = pa.table({"handle": ["p3"], "name": ["again"]})
    people = pa.concat_tables([big_people([f"n{i}" for i in range(BIG)]), again])
    with pytest.raises(omnigraph.OmnigraphError) as e:
        empty.load({"Person": people}, mode="overwrite")
    assert (e.value.row, e.value.first, e.value.value) == (BIG, 3, '"p3"')
    assert "row 200000, Person.id, value \"p3\", first at row 3" in str(e.value)


def test_the_first_bad_row_of_a_big_table_is_named(empty, uri):
    names = [f"n{i}" for i in range(BIG)]
    names[70_001] = None
    names[150_001] = None
    people = big_people(names)
    load = lambda: empty.load({"Person": people}, mode="overwrite")  # noqa: E731
    assert_refused(empty, uri, load, row=70_001)


def test_an_arrow_column_of_an_unloadable_type(empty, uri):
    people = pa.table({"handle": ["dee"], "name": ["Dee"], "age": pa.array([1], pa.time64("us"))})
    with pytest.raises(omnigraph.OmnigraphError) as e:
        empty.load({"Person": people})
    assert e.value.kind == "InvalidData" and e.value.property == "age"
    assert version(empty) == 1


def test_a_column_that_is_no_property(empty):
    people = pa.table({"handle": ["dee"], "name": ["Dee"], "nickname": ["D"]})
    with pytest.raises(omnigraph.OmnigraphError) as e:
        empty.load({"Person": people})
    assert e.value.kind == "InvalidData" and e.value.property == "nickname"
    assert version(empty) == 1


def test_edges_by_id_and_blobs_from_binary_columns(empty):
    empty.load({"Person": pa.table({"handle": ["a", "b"], "name": ["A", "B"]})})
    report = empty.load({
        "Knows": pa.table({"from": ["a"], "to": ["b"], "since": pa.array([5], pa.uint8())}),
        "Doc": pa.table({"slug": ["d"], "body": pa.array([b"\x00\x01bytes"], pa.binary())}),
    })
    assert counts(report) == ({"Doc": 1}, {"Knows": 1})
    assert empty.read_blob("Doc", "d", "body") == b"\x00\x01bytes"
    assert empty.query('query q() { match { $p: Person { handle: "a" } $p knows $f } return { $f.handle } }').to_pylist() == [{"f.handle": "b"}]


def test_a_missing_endpoint_names_the_edge_tables_row(empty):
    empty.load({"Person": pa.table({"handle": ["a"], "name": ["A"]})})
    with pytest.raises(omnigraph.OmnigraphError) as e:
        empty.load({"Knows": pa.table({"from": ["a", "a"], "to": ["a", "ghost"]})})
    assert e.value.kind == "InvalidData"
    assert e.value.row == 1 and e.value.line is None and e.value.type_name == "Knows"


def test_an_unknown_type_of_a_table(empty):
    with pytest.raises(omnigraph.OmnigraphError) as e:
        empty.load({"Robot": pa.table({"x": [1]})})
    assert e.value.kind == "InvalidData" and e.value.type_name == "Robot"
    with pytest.raises(TypeError, match="__arrow_c_stream__"):
        empty.load({"Person": [1, 2]})


def test_modes_branches_and_progress(g):
    seen = []
    g.load(jsonl(GOOD[:1]), mode="merge", branch="side", from_="main", progress=seen.append)
    assert seen and seen[-1] == len(jsonl(GOOD[:1]))
    assert len(g.query(PERSONS, branch="side")) == 4
    assert len(g.query(PERSONS)) == 3
    g.load(jsonl(GOOD), mode="overwrite")
    assert [r["p.handle"] for r in g.query(PERSONS).to_pylist()] == ["dee", "eve"]

def test_progress_true_draws_a_tqdm_bar_to_the_end(g, tmp_path, capsys):
    f = tmp_path / "rows.jsonl"
    f.write_text(jsonl(GOOD))
    g.load(f, mode="overwrite", progress=True)
    bar = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    size = f.stat().st_size
    assert bar.startswith("load: 100%") and f"{size}/{size}" in bar, bar


def test_a_bad_progress_is_a_type_error(g):
    with pytest.raises(TypeError, match="progress must be a callable"):
        g.load(jsonl(GOOD), progress="yes")
