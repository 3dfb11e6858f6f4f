"""One handle shared by threads and by asyncio tasks, the GIL released
while the engine works, a fork, and two processes writing one graph."""

import asyncio
import os
import subprocess
import sys
import threading

import pytest
from conftest import ADD, FRIENDS, PEOPLE, PERSONS, SCHEMA

import omnigraph

WAIT_S = 60


def test_the_gil_is_released_while_the_engine_works(g):
    # The load's rows come from a generator the engine pulls from its own
    # thread; the generator waits for another Python thread. If the caller
    # held the GIL while the engine worked, neither could go on.
    go = threading.Event()
    other_ran = []

    def other():
        other_ran.append(sum(range(1000)))
        go.set()

    def rows():
        yield {"type": "Person", "data": {"handle": "t0", "name": "T0"}}
        threading.Thread(target=other).start()
        if not go.wait(WAIT_S):
            raise RuntimeError("the other Python thread never ran")
        yield {"type": "Person", "data": {"handle": "t1", "name": "T1"}}

    assert g.load(rows())["nodes"] == {"Person": 2}
    assert other_ran == [499500]


def test_eight_threads_share_one_handle(g):
    errors = []

    def work(i):
        try:
            for j in range(5):
                g.mutate(ADD, params={"h": f"t{i}-{j}", "n": "T"})
                assert g.query(FRIENDS, params={"h": "ada"}).to_pylist() == [{"f.handle": "bob"}]
        except Exception as e:  # collected and asserted below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT_S)
    assert errors == []
    assert len(g.query(PERSONS)) == 3 + 8 * 5


def test_asyncio_calls_run_concurrently_on_one_handle(uri):
    async def main():
        async with await omnigraph.init_async(uri, SCHEMA) as g:
            await g.load(PEOPLE)
            writes = [g.mutate(ADD, params={"h": f"a{i}", "n": "A"}) for i in range(10)]
            reads = [g.query(FRIENDS, params={"h": "bob"}) for _ in range(20)]
            done = await asyncio.gather(*writes, *reads)
            assert all(isinstance(r, omnigraph.MutationResult) for r in done[:10])
            assert all(r.to_pylist() == [{"f.handle": "cy"}] for r in done[10:])
            assert len(await g.query(PERSONS)) == 13
            with pytest.raises(omnigraph.InputError):
                await g.query("query q( {")
            lines = [l async for l in g.export()]
            assert len(lines) == 15
        async with await omnigraph.open_async(uri, read_only=True) as ro:
            assert (await ro.snapshot())["branch"] == "main"

    asyncio.run(main())


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_child_opens_the_graph_again(g, uri):
    assert len(g.query(PERSONS)) == 3
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, never return into pytest
        code = 1
        try:
            try:
                g.query(PERSONS)
                said = "the inherited handle answered"
            except omnigraph.InputError as e:
                said = "refused: " + str(e)
            with omnigraph.open(uri) as mine:
                mine.mutate(ADD, params={"h": "child", "n": "Child"})
                said += f"; rows {len(mine.query(PERSONS))}"
            code = 0
        except BaseException as e:
            said = f"failed: {e!r}"
        os.write(w, said.encode())
        os._exit(code)
    os.close(w)
    _, status = os.waitpid(pid, 0)
    said = os.read(r, 4096).decode()
    assert os.waitstatus_to_exitcode(status) == 0, said
    assert said.startswith("refused: error[BadRequest]: bad request: this graph was opened in process")
    assert said.endswith("; rows 4")
    assert len(g.query(PERSONS)) == 4


WRITER = """
import sys, omnigraph
g = omnigraph.open(sys.argv[1])
for i in range(15):
    g.mutate("query add($h: String, $n: String) {{ insert Person {{ handle: $h, name: $n }} }}",
             params={{"h": f"{tag}-{{i}}", "n": "W"}})
g.close()
"""


def test_two_processes_write_one_graph(g, uri):
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER.format(tag=tag), uri], stderr=subprocess.PIPE)
        for tag in ("p", "q")
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err.decode()
    with omnigraph.open(uri, read_only=True) as fresh:
        handles = {r["p.handle"] for r in fresh.query(PERSONS).to_pylist()}
    assert {f"p-{i}" for i in range(15)} | {f"q-{i}" for i in range(15)} <= handles
    assert len(handles) == 3 + 30
