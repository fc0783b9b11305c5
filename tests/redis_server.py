"""A real ``redis-server`` for tests: on a free port, with no persistence, in a directory of the
test's, killed at the end. The fleet's engine tests (tests/engine/fleet/) and the multi-process
fleet test (tests/reliability/test_fleet_processes.py) share it. Without a ``redis-server``
binary the tests that need one are skipped, saying so.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import redis

from tests.polling import wait_for

REDIS_SERVER = shutil.which("redis-server")
START_TIMEOUT_S = 5.0
NO_REDIS = "no redis-server binary on PATH: install Debian's redis-server to run the fleet tests"


def free_port() -> int:
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
        self.port = free_port()
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
        client = self.client()

        def answering() -> bool:
            assert self.process is not None and self.process.poll() is None, "redis-server exited"
            try:
                return bool(client.ping())
            except redis.exceptions.ConnectionError:
                return False

        wait_for(answering, "redis-server answering", START_TIMEOUT_S)
        client.close()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=5)
        self.process = None


@contextmanager
def running_redis(directory: Path, password: str | None = None) -> Iterator[RedisServer]:
    """A started server for the block (the test is skipped when there is no ``redis-server``)."""
    if REDIS_SERVER is None:
        pytest.skip(NO_REDIS)
    server = RedisServer(directory, password)
    server.start()
    try:
        yield server
    finally:
        server.kill()


__all__ = ["NO_REDIS", "REDIS_SERVER", "RedisServer", "free_port", "running_redis"]
