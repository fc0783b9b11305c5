"""Regenerate README's tables that come from code (error kinds, event vocabulary).

python tools/readme_tables.py        # rewrites README.md in place
"""

from __future__ import annotations

import re
from pathlib import Path

from engine.events import vocabulary_markdown
from engine.kinds import kinds_table_markdown

README = Path(__file__).parents[1] / "README.md"


def main() -> None:
    text = README.read_text(encoding="utf-8")
    for header, table in (
        ("| kind | class |", kinds_table_markdown()),
        ("| event_type |", vocabulary_markdown()),
    ):
        pattern = re.compile(rf"^{re.escape(header)}.*?(?=\n\n)", re.MULTILINE | re.DOTALL)
        text, count = pattern.subn(lambda _, table=table: table, text, count=1)
        if count != 1:
            raise SystemExit(f"README.md: table starting {header!r} not found")
    README.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
