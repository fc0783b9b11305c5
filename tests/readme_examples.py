"""README's examples, as the tests that run them read them: one source, never a copy."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).parents[1] / "README.md"


def readme_example(heading: str) -> str:
    """The first Python block after ``heading`` (a whole README line, e.g. ``### LangGraph``)."""
    text = README.read_text(encoding="utf-8")
    start = re.search(rf"^{re.escape(heading)}$", text, flags=re.MULTILINE)
    assert start is not None, f"README has no {heading!r} section"
    block = re.search(r"```python\n(.*?)```", text[start.end() :], flags=re.DOTALL)
    assert block is not None, f"README's {heading!r} section has no Python example"
    return block.group(1)
