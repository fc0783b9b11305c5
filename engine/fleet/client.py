"""Redis access that works under both anyio backends: ``redis.asyncio`` on asyncio; on trio, which
redis-py does not support, the synchronous client in a worker thread.

Everything the fleet sends is a batch of raw commands in one round trip (a pipeline, not a
transaction: each script is atomic on its own). redis-py's own retries are off: the fleet guards
Redis with its own breaker and backoff (:mod:`engine.fleet.guard`), so a dead Redis is known at
the first failed round trip, not after redis-py's ten quiet retries.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import anyio
import anyio.lowlevel
import redis
import redis.asyncio
from redis.backoff import NoBackoff
from redis.retry import Retry

from engine.errors import one_line
from engine.fleet.config import PASSWORD_ENV, FleetConfig

Command = tuple[Any, ...]

UNAVAILABLE: tuple[type[Exception], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    redis.exceptions.AuthenticationError,
    OSError,
    TimeoutError,
)
"""Errors that say Redis cannot be used now (as opposed to a command Redis refused)."""


def redis_problem(config: FleetConfig, error: BaseException) -> str:
    """What ``error`` (one of :data:`UNAVAILABLE`) says about the fleet's Redis, on one line for a
    person: credentials Redis refused are named so, with where the password came from (never it)."""
    server = f"the fleet's Redis {config.server}"
    detail = one_line(str(error)) or type(error).__name__
    if not isinstance(error, redis.exceptions.AuthenticationError):
        return f"{server} cannot be reached: {detail}"
    if config.password is None:  # Redis's words ("HELLO must be called…") do not say so
        return (
            f"{server} refused the credentials: it requires a password and none was given (an owner-only"
            f" file, password_file=PATH in the URL, or ${PASSWORD_ENV})"
        )
    source = {"file": f" from {config.password_file}", "environment": f" from ${PASSWORD_ENV}"}
    user = f"user {config.username}" if config.username else "the default user"
    given = f"{user} with the password{source.get(config.password_source, ' in the URL')}"
    return f"{server} refused the credentials ({given}): {detail}"


def on_asyncio() -> bool:
    """Whether the running anyio backend is asyncio (asyncio is only looked up if imported)."""
    asyncio = sys.modules.get("asyncio")
    loop = getattr(anyio.lowlevel.current_token(), "native_token", None)
    return asyncio is not None and isinstance(loop, asyncio.AbstractEventLoop)


def _connection_options(config: FleetConfig) -> dict[str, Any]:
    timeout = config.timeout_ms / 1000.0
    options: dict[str, Any] = {
        "host": config.host,
        "port": config.port,
        "db": config.db,
        "username": config.username,
        "password": config.password.reveal() if config.password is not None else None,
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "retry": Retry(NoBackoff(), 0),
        "decode_responses": True,
        "client_name": "tripwire-fleet",
    }
    if config.tls:
        options["ssl"] = True
        if config.ca_file:
            options["ssl_ca_certs"] = config.ca_file
    return options


class FleetClient:
    """One fleet's Redis: :meth:`execute` sends commands in one round trip, on either backend.

    The redis-py client is made on first use, in the backend then running; ``repr`` names the
    server, never the password.
    """

    def __init__(self, config: FleetConfig) -> None:
        self.config = config
        self._async: redis.asyncio.Redis | None = None
        self._sync: redis.Redis | None = None

    def __repr__(self) -> str:
        return f"FleetClient({self.config.server})"

    async def execute(self, *commands: Command) -> list[Any]:
        """Send ``commands`` in one round trip; their replies in order. Raises what redis-py raises
        (:data:`UNAVAILABLE` when Redis cannot be reached)."""
        if on_asyncio():
            if self._async is None:
                self._async = redis.asyncio.Redis(**_connection_options(self.config))
            async with self._async.pipeline(transaction=False) as pipe:
                for command in commands:
                    pipe.execute_command(*command)
                with anyio.fail_after(self.config.timeout_ms / 1000.0 * 2):
                    return list(await pipe.execute())
        return await anyio.to_thread.run_sync(self._execute_sync, commands, abandon_on_cancel=True)

    def _execute_sync(self, commands: Sequence[Command]) -> list[Any]:
        if self._sync is None:
            self._sync = redis.Redis(**_connection_options(self.config))
        with self._sync.pipeline(transaction=False) as pipe:
            for command in commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
            return list(pipe.execute())

    async def aclose(self) -> None:
        """Close the connections (each client on the backend it was made on)."""
        client, self._async = self._async, None
        if client is not None:
            with anyio.CancelScope(shield=True):
                await client.aclose()
        sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()


__all__ = ["UNAVAILABLE", "Command", "FleetClient", "on_asyncio", "redis_problem"]
