"""A real ``redis-server`` for the fleet tests, and engines that share it.

Redis is real, so these tests run on real clocks (``anyio_backend`` without the virtual clocks
of tests/conftest.py: a virtual clock would jump past every network wait) and wait with bounded
polls. Each module gets its own server on a free port, with no persistence, in a temporary
directory, killed at teardown; a test that kills Redis gets a server of its own. Without a
``redis-server`` binary the tests are skipped, saying so.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.polling import eventually
from tests.redis_server import REDIS_SERVER, RedisServer, running_redis

__all__ = ["REDIS_SERVER", "RedisServer", "eventually"]


def _server(tmp_path_factory: pytest.TempPathFactory, password: str | None = None) -> Iterator[RedisServer]:
    with running_redis(tmp_path_factory.mktemp("redis"), password) as server:
        yield server


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """This module's Redis (tests share it, each in a namespace of its own)."""
    yield from _server(tmp_path_factory)


@pytest.fixture
def own_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A Redis for one test, with a password (the test may kill and restart it)."""
    yield from _server(tmp_path_factory, password="s3cret-Pa55word")


@pytest.fixture(params=["trio", "asyncio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real clocks: Redis is a real server (see the module docstring)."""
    backend: str = request.param
    return backend
