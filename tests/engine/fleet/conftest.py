"""A real ``redis-server`` for the fleet tests, and engines that share it.

Redis is real, so these tests run on real clocks (``anyio_backend`` without the virtual clocks
of tests/conftest.py: a virtual clock would jump past every network wait) and wait with bounded
polls. Each module gets its own server on a free port, with no persistence, in a temporary
directory, killed at teardown; a test that kills Redis gets a server of its own. Without a
``redis-server`` binary the tests are skipped, saying so.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import redis

REDIS_SERVER = shutil.which("redis-server")
START_TIMEOUT_S = 5.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process: :meth:`kill` it and :meth:`start` it again on the same port
    (empty: nothing is saved)."""

    def __init__(self, directory: Path, password: str | None = None) -> None:
        assert REDIS_SERVER is not None
        self.directory = directory
        self.password = password
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def url(self, namespace: str, **params: Any) -> str:
        auth = f"default:{self.password}@" if self.password else ""
        query = "&".join(f"{k}={v}" for k, v in {"namespace": namespace, **params}.items())
        return f"redis://{auth}127.0.0.1:{self.port}/0?{query}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, password=self.password, decode_responses=True)

    def start(self) -> None:
        command = [
            str(REDIS_SERVER), "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(self.directory),
        ]  # fmt: skip
        if self.password:
            command += ["--requirepass", self.password]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT_S
        client = self.client()
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                pass
            assert self.process.poll() is None, f"redis-server exited with {self.process.returncode}"
            assert time.monotonic() < deadline, f"redis-server not answering within {START_TIMEOUT_S:g}s"
            time.sleep(0.01)
        client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None


def _server(tmp_path_factory: pytest.TempPathFactory, password: str | None = None) -> Iterator[RedisServer]:
    if REDIS_SERVER is None:
        pytest.skip("no redis-server binary on PATH: install Debian's redis-server to run the fleet tests")
    server = RedisServer(tmp_path_factory.mktemp("redis"), password)
    server.start()
    try:
        yield server
    finally:
        server.kill()


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


async def eventually(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    """Poll ``condition`` every 10 ms, on the loop, until it holds: at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g}s"
        await anyio.sleep(0.01)
