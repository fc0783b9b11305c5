"""The README's fleet example (/tmp/readme/fleet_core.md, "### The fleet"), run as written against
this module's Redis: ``EXAMPLE`` is the example's code, character for character."""

from __future__ import annotations

import contextlib
import io

from tests.engine.fleet.conftest import RedisServer

EXAMPLE = """\
import anyio
from engine import Engine, ToolManifest
from engine.fleet import Fleet, read_fleet

URL = "redis://localhost:6379/0?namespace=demo"


async def search(query: str) -> str:
    return f"results for {query}"


async def main() -> None:
    engine = Engine([ToolManifest(id="search")])
    engine.register("search", search)
    async with engine, Fleet(engine, URL):
        print(await engine.call("search", query="tripwire"))
        view = await read_fleet(URL)
        print(view.tools["search"].states)


anyio.run(main)
"""


def test_the_readme_example_joins_a_fleet_and_reads_it(redis_server: RedisServer) -> None:
    code = EXAMPLE.replace("localhost:6379", f"127.0.0.1:{redis_server.port}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README fleet example", "exec"), {"__name__": "example"})
    assert out.getvalue() == "results for tripwire\n{'CLOSED': 1}\n"
