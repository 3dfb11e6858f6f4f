"""Policies from Python: `open(uri, actor=..., policy=...)` decides every
call; a refusal raises `PolicyDenied` naming the actor, action and branch,
and leaves every file as it was."""

import asyncio

import pytest

import omnigraph
from conftest import ADD, PERSONS, files_under

TEAM = """
version: 1
groups:
  agents: [agent]
rules:
  - id: all-read
    allow: { actors: "*", actions: [read] }
  - id: agents-write-unprotected
    allow: { actors: { group: agents }, actions: [change], branch_scope: unprotected }
"""


@pytest.fixture
def team(g, uri, tmp_path):
    g.branch_create("dev")
    g.close()
    policy = tmp_path / "team.yaml"
    policy.write_text(TEAM)
    return uri, str(policy)


def test_an_actor_writes_where_the_policy_allows_and_nowhere_else(team):
    uri, policy = team
    with omnigraph.open(uri, actor="agent", policy=policy) as g:
        g.mutate(ADD, params={"h": "dee", "n": "Dee"}, branch="dev")
        assert len(g.query(PERSONS, branch="dev").to_pylist()) == 4
        before = files_under(uri)
        with pytest.raises(omnigraph.InputError) as e:
            g.mutate(ADD, params={"h": "eve", "n": "Eve"}, branch="main")
        assert e.value.kind == "PolicyDenied"
        assert (e.value.actor, e.value.action, e.value.branch) == ("agent", "change", "main")
        assert e.value.exit_code == 2
        with pytest.raises(omnigraph.InputError) as e:
            g.merge("dev", into="main")
        assert (e.value.kind, e.value.action, e.value.target_branch) == (
            "PolicyDenied",
            "branch_merge",
            "main",
        )
        assert files_under(uri) == before
    # The commit records its actor.
    with omnigraph.open(uri, read_only=True) as g:
        assert g.commits(branch="dev")[0]["actor"] == "agent"


def test_with_a_policy_and_no_actor_calls_fail_closed(team):
    uri, policy = team
    with omnigraph.open(uri, policy=policy) as g:
        with pytest.raises(omnigraph.InputError) as e:
            g.query(PERSONS)
        assert e.value.kind == "PolicyDenied" and "no actor" in str(e.value)


def test_the_async_graph_is_decided_alike(team):
    uri, policy = team

    async def run():
        g = await omnigraph.open_async(uri, actor="stranger", policy=policy)
        try:
            assert len((await g.query(PERSONS)).to_pylist()) == 3
            with pytest.raises(omnigraph.InputError) as e:
                await g.mutate(ADD, params={"h": "zed", "n": "Zed"}, branch="dev")
            assert (e.value.kind, e.value.actor) == ("PolicyDenied", "stranger")
        finally:
            await g.close()

    asyncio.run(run())


def test_a_bad_policy_file_is_refused_naming_the_rule(uri, g, tmp_path):
    g.close()
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nrules:\n  - id: r\n    allow: { actors: a, actions: [fly] }\n")
    with pytest.raises(omnigraph.InputError) as e:
        omnigraph.open(uri, actor="a", policy=bad)
    assert "rule 'r'" in str(e.value) and "fly" in str(e.value)
    with pytest.raises(TypeError):
        omnigraph.open(uri, actor="a", policy=3)
