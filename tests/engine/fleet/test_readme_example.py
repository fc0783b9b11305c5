"""README's fleet example, run as written against this module's Redis."""

from __future__ import annotations

import contextlib
import io

from tests.engine.fleet.conftest import RedisServer
from tests.readme_examples import readme_example

EXAMPLE = readme_example("## A fleet of processes (Redis)")


def test_the_readme_example_joins_a_fleet_and_reads_it(redis_server: RedisServer) -> None:
    code = EXAMPLE.replace("localhost:6379", f"127.0.0.1:{redis_server.port}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README fleet example", "exec"), {"__name__": "example"})
    assert out.getvalue() == "results for tripwire\n{'CLOSED': 1}\n"
