"""Async tests run on both backends, each on a virtual clock: a 30 s breaker timeout takes milliseconds.

trio runs with ``MockClock(autojump_threshold=0)``; asyncio with a ``looptime`` event loop, which
fast-forwards the loop's clock (``anyio.current_time`` follows it) whenever nothing is ready.
A module that cannot run on one of them overrides ``anyio_backend`` and says why.
"""

from __future__ import annotations

from typing import Any

import looptime
import pytest
import trio.testing

BACKENDS = ("trio", "asyncio")


def virtual_time_backend(name: str) -> tuple[str, dict[str, Any]]:
    """``name``'s anyio backend with its virtual clock, as the ``anyio_backend`` fixture returns it."""
    if name == "trio":
        return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
    return "asyncio", {"loop_factory": lambda: looptime.new_event_loop(start=0.0)}


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time_backend(request.param)


@pytest.fixture(autouse=True)
def own_data_directory(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test records into the user's data directory (the default trace store outside a project)."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path_factory.mktemp("xdg-data")))
