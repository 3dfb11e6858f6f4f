"""The change feed from Python: a page, a cursor resumed, and watching a
branch (blocking and with `async for`)."""

import asyncio
import threading

import pytest

import omnigraph
from conftest import ADD, SCHEMA


def test_a_page_from_the_beginning_and_a_cursor_resumed(g):
    page = g.changes(start="beginning")
    assert page["caught_up"] is True
    assert len(page["blocks"]) == 2
    load = page["blocks"][1]
    assert sorted((c["type"], c["id"]) for c in load["changes"] if c["kind"] == "node") == [
        ("Person", "ada"),
        ("Person", "bob"),
        ("Person", "cy"),
    ]
    r = g.mutate(ADD, params={"h": "dee", "n": "Dee"})
    nxt = g.changes(cursor=page["cursor"])
    [block] = nxt["blocks"]
    assert block["graph_commit_id"] == r.commit
    assert block["cursor"] == nxt["cursor"]
    [c] = block["changes"]
    assert c == {"kind": "node", "type": "Person", "id": "dee", "op": "insert",
                 "after": {"data": {"handle": "dee", "name": "Dee"}}}
    # A block's cursor resumes right after it.
    assert g.changes(cursor=load["cursor"])["blocks"][0]["graph_commit_id"] == r.commit
    # The per-commit form is still there.
    assert [x["id"] for x in g.changes(r.commit)] == ["dee"]


def test_a_cursor_under_another_filter_is_rejected(g):
    page = g.changes(start="beginning", types=["Person"], ops=["insert"])
    with pytest.raises(omnigraph.InputError) as e:
        g.changes(cursor=page["cursor"])
    assert e.value.kind == "CursorRejected" and e.value.exit_code == 2


def test_watch_yields_each_block_as_it_lands(g):
    start = g.changes()["cursor"]
    handles = ["w1", "w2", "w3"]

    def write():
        for h in handles:
            g.mutate(ADD, params={"h": h, "n": h.upper()})

    t = threading.Thread(target=write)
    t.start()
    seen = []
    for block in g.watch(cursor=start):
        seen.extend(c["id"] for c in block["changes"])
        if len(seen) == len(handles):
            break
    t.join()
    assert seen == handles


def test_async_watch(uri):
    async def main():
        async with await omnigraph.init_async(uri, SCHEMA) as g:
            start = (await g.changes())["cursor"]
            r = await g.mutate(ADD, params={"h": "as", "n": "As"})
            async for block in g.watch(cursor=start):
                return block, r

    block, r = asyncio.run(main())
    assert block["graph_commit_id"] == r.commit
    assert block["changes"][0]["id"] == "as"
