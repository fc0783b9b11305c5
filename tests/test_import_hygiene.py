"""The engine is embeddable: importing it must not pull in Textual or Rich."""

from __future__ import annotations

import subprocess
import sys


def test_import_engine_does_not_import_textual_or_rich() -> None:
    code = (
        "import sys, engine\n"
        "import engine.engine, engine.classify, engine.manifest, engine.bus\n"
        "import engine.strategies.timeout.supervisor\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'textual', 'rich', 'console'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"engine imported: {out.stdout.strip()}"
