"""Streaming tools: async-generator tools consumed chunk by chunk under the engine's guard.

Opening a stream is a guarded call whose result is the first chunk: breaker check, timeout,
classification, retries and alternatives all apply, and retrying is safe because nothing
has reached the consumer yet. After that each chunk must arrive within the tool's
``timeout_ms`` (an idle timeout: a long stream is fine, a stalled one is not). A failure
once chunks were delivered cannot be retried without duplicating them: it is a truncated
stream — a transient ``partial_result`` failure that counts against the breaker. A
consumer that stops reading early is not a failure and does not count at all.

Internal: :meth:`Engine.stream <engine.Engine.stream>` is its API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio import CancelScope, current_time

from engine.cancellation import is_stray_cancellation, stray_cancellation_error
from engine.errors import ToolError
from engine.events import StreamEnded
from engine.kinds import ErrorClass, ErrorKind
from engine.strategies.idempotency.keys import enter_key, idempotency_key, leave_key
from engine.strategies.idempotency.options import keying

if TYPE_CHECKING:
    from engine.call import CallContext
    from engine.protocols import EngineForStreams


class _Opened:
    """The value of a stream's opening call: the generator, its first chunk, and the idempotency
    key of the attempt that opened it (None: the tool is not keyed)."""

    __slots__ = ("first", "key", "stream")

    def __init__(self, stream: AsyncIterator[Any], first: Any, key: str | None) -> None:
        self.stream = stream
        self.first = first
        self.key = key


_EMPTY = object()


async def open_stream(stream: AsyncIterator[Any]) -> _Opened:
    """Pull the first chunk (runs inside the guarded attempt, where a keyed tool's key is set)."""
    try:
        first = await anext(stream)
    except StopAsyncIteration:
        first = _EMPTY
    return _Opened(stream, first, idempotency_key())


class ToolStream:
    """``async with engine.stream("tool", **args) as chunks: async for chunk in chunks: ...``"""

    def __init__(
        self, engine: EngineForStreams, tool_id: str, args: dict[str, Any], ctx: CallContext | None
    ) -> None:
        self._engine = engine
        self.tool_id = tool_id
        self._args = args
        self._ctx = ctx
        self._stream: AsyncIterator[Any] | None = None
        self._key: str | None = None
        """The call's idempotency key: set again while the tool's generator resumes (in the
        consumer's task, outside any attempt) so ``engine.idempotency_key()`` holds for every chunk."""
        self._pending: Any = _EMPTY
        self._served_by = tool_id
        self._call_id = ctx.call_id if ctx is not None else ""
        self.chunks = 0
        self.done = False

    async def __aenter__(self) -> Self:
        await self._open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        if self.done:
            raise StopAsyncIteration
        if self._stream is None:
            await self._open()
        if self._pending is not _EMPTY:
            chunk, self._pending = self._pending, _EMPTY
            self.chunks += 1
            return chunk
        assert self._stream is not None
        manifest = self._engine.manifest(self._served_by)
        key = self._key
        with CancelScope(deadline=current_time() + manifest.timeout_s) as scope:
            try:
                if key is None:
                    chunk = await anext(self._stream)
                else:
                    enter_key(key)
                    try:
                        chunk = await anext(self._stream)
                    finally:
                        leave_key()
            except StopAsyncIteration:
                self._end("completed")
                raise
            except Exception as exc:
                raise self._truncated(exc) from exc
            except BaseException as exc:
                if not is_stray_cancellation(exc):
                    raise
                raise self._truncated(stray_cancellation_error(exc, self._served_by)) from exc
        if scope.cancelled_caught:
            raise self._truncated(TimeoutError(f"no chunk within {manifest.timeout_s:g}s"))
        self.chunks += 1
        return chunk

    async def aclose(self) -> None:
        """Stop early: not a failure. Closes the tool's generator."""
        if not self.done and self._stream is not None:
            self._end("abandoned")
        stream, self._stream = self._stream, None
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            key = self._key  # the generator's cleanup runs now: under its key too
            if key is not None:
                enter_key(key)
            try:
                with CancelScope(shield=True):
                    await aclose()
            finally:
                if key is not None:
                    leave_key()

    async def _open(self) -> None:
        result = await self._engine.execute(self.tool_id, self._args, self._ctx, opening_stream=True)
        opened = result.unwrap()
        assert isinstance(opened, _Opened)
        self._stream, self._pending = opened.stream, opened.first
        self._served_by = result.served_by or self.tool_id
        if keying(self._engine.manifest(self._served_by).strategies) is not None:
            self._key = opened.key  # not an outer call's key, current while an unkeyed stream opened
        if opened.first is _EMPTY:
            self._end("completed")

    def _truncated(self, error: BaseException) -> ToolError:
        engine = self._engine
        cut = ToolError(
            ErrorKind.PARTIAL_RESULT,
            f"stream cut after {self.chunks} chunk(s): {error}",
            tool_id=self._served_by,
            original_error=error,
        )
        # The stream opened fine earlier; its truncation is a failure now, counted as this call's.
        timed_out = isinstance(error, TimeoutError)
        classification = engine.failed_after_opening(
            self._served_by, cut, self._ctx, self._call_id, timed_out=timed_out
        )
        policy = engine.redaction_for(self._served_by)
        secrets, key = policy.secrets_in(self._args), self._key
        keyed = keying(engine.manifest(self._served_by).strategies) if key is not None else None
        if key is not None and keyed is not None and keyed.hides_key(policy):  # in no argument, maybe
            secrets = (key, *secrets)
        problem = policy.text(f"{type(error).__name__}: {error}", secrets)
        error_class = classification.error_class
        self._end(
            "truncated", error=problem, kind=classification.kind, error_class=error_class, timed_out=timed_out
        )
        return ToolError(
            classification.kind,
            f"stream cut after {self.chunks} chunk(s): {error}",
            tool_id=self._served_by,
            original_error=error,
            tool_input=self._args,
            at=engine.wall_clock(),
            classification=classification,
        )

    def _end(
        self, outcome: str, *, error: str | None = None, kind: ErrorKind | None = None,
        error_class: ErrorClass | None = None, timed_out: bool = False,
    ) -> None:  # fmt: skip
        self.done = True
        engine = self._engine
        trace = self._ctx.trace if self._ctx is not None else None
        if trace is not None or engine.bus.active:
            engine.publish(
                StreamEnded(
                    at=engine.wall_clock(), t=current_time(), tool_id=self._served_by, call_id=self._call_id,
                    turn_id=self._ctx.turn_id if self._ctx is not None else None,
                    outcome=outcome, chunks=self.chunks, error=error, kind=kind,
                    classification=error_class, timed_out=timed_out,
                ),
                trace,
            )  # fmt: skip


async def collect(stream: AsyncIterator[Any]) -> list[Any]:
    """A streaming tool called as a plain call: its chunks, as a list."""
    chunks = [chunk async for chunk in stream]
    await anyio.lowlevel.checkpoint()
    return chunks
