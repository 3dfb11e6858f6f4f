"""The package on `s3://` (the local S3-compatible server the test script
starts; skipped where OMNIGRAPH_TEST_S3 is not set)."""

import os
import uuid

import pytest
from conftest import PEOPLE, PERSONS, SCHEMA

import omnigraph

BUCKET = os.environ.get("OMNIGRAPH_TEST_S3")
pytestmark = pytest.mark.skipif(BUCKET is None, reason="OMNIGRAPH_TEST_S3 is not set")


def test_init_load_query_reopen_and_time_travel_on_s3():
    uri = f"{BUCKET}/py-{uuid.uuid4().hex}"
    with omnigraph.init(uri, SCHEMA) as g:
        g.load(PEOPLE)
        loaded = g.snapshot()["manifest_version"]
        g.mutate(
            "query add($h: String, $n: String) { insert Person { handle: $h, name: $n } }",
            params={"h": "dan", "n": "Dan"},
        )
    with omnigraph.open(uri, read_only=True) as g:
        handles = [r["p.handle"] for r in g.query(PERSONS).to_pylist()]
        assert handles == ["ada", "bob", "cy", "dan"]
        assert len(g.query(PERSONS, version=loaded)) == 3
        assert g.dataset("Person").count_rows() == 4
