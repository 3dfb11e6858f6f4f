"""docs/python.md's tutorial: its Python blocks, run in order."""

import os
import re

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")


def test_the_tutorial_runs():
    text = open(DOC).read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) >= 8
    scope: dict = {}
    for i, block in enumerate(blocks):
        exec(compile(block, f"docs/python.md block {i}", "exec"), scope)
