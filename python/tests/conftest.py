"""Shared fixtures: a small social graph with a blob type, on local disk."""

import os
import sys

import pytest

import omnigraph

SCHEMA = """
node Person {
    handle: String @key
    name: String
    age: I32?
    city: String?
}
node Doc {
    slug: String @key
    body: Blob?
}
edge Knows: Person -> Person { since: I32? }
"""

PEOPLE = """{"type": "Person", "data": {"handle": "ada", "name": "Ada", "age": 36, "city": "London"}}
{"type": "Person", "data": {"handle": "bob", "name": "Bob", "age": 41}}
{"type": "Person", "data": {"handle": "cy", "name": "Cy", "city": "Paris"}}
{"edge": "Knows", "from": "ada", "to": "bob", "data": {"since": 2020}}
{"edge": "Knows", "from": "bob", "to": "cy"}
"""

PERSONS = "query persons() { match { $p: Person } return { $p.handle, $p.name, $p.age } order { $p.handle asc } }"
FRIENDS = "query friends($h: String) { match { $p: Person { handle: $h } $p knows $f } return { $f.handle } order { $f.handle asc } }"
ADD = "query add($h: String, $n: String) { insert Person { handle: $h, name: $n } }"


@pytest.fixture
def uri(tmp_path):
    return str(tmp_path / "g.omni")


@pytest.fixture
def g(uri):
    with omnigraph.init(uri, SCHEMA) as graph:
        graph.load(PEOPLE)
        yield graph


def version(graph, branch="main"):
    return graph.snapshot(branch=branch)["manifest_version"]


def files_under(path):
    """Every file under `path` (to show a refused write left none)."""
    out = set()
    for root, _, names in os.walk(path):
        for n in names:
            out.add(os.path.join(root, n))
    return out


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
