"""A keyed streaming tool finds its key (``engine.idempotency_key()``) for every chunk, not only
while the stream opens: its generator resumes in the consumer's task, outside any attempt."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from engine import ToolManifest
from engine import idempotency_key as current_key
from engine.errors import ToolError
from engine.redaction import MARKER
from tests.engine.conftest import new_engine, recorded

pytestmark = pytest.mark.anyio


def manifest(keyed: bool = True, **fields: Any) -> ToolManifest:
    sections = {"idempotency": {"key": "context"}} if keyed else {}
    return ToolManifest(id="export", side_effect="side_effecting", timeout_ms=1000, **sections, **fields)


class Export:
    """Streams three chunks, noting the key it finds before each and as it is closed."""

    def __init__(self) -> None:
        self.seen: list[str | None] = []
        self.closed: list[str | None] = []

    async def __call__(self, rows: int) -> AsyncIterator[int]:
        try:
            for row in range(rows):
                self.seen.append(current_key())
                await anyio.sleep(0.01)
                yield row
        finally:
            self.closed.append(current_key())


async def test_every_chunk_of_a_keyed_stream_is_read_under_the_calls_key() -> None:
    engine = await new_engine(manifest())
    tool = Export()
    engine.register("export", tool.__call__)
    async with engine.stream("export", rows=3, idempotency_key="export-42") as chunks:
        assert [chunk async for chunk in chunks] == [0, 1, 2]
        assert current_key() is None, "the consumer's own context is left as it was"
    assert tool.seen == ["export-42"] * 3
    assert tool.closed == ["export-42"]


async def test_a_stream_closed_early_cleans_up_under_its_key() -> None:
    engine = await new_engine(manifest())
    tool = Export()
    engine.register("export", tool.__call__)
    async with engine.stream("export", rows=3) as chunks:
        async for _ in chunks:
            break
    [key] = set(tool.seen)
    assert key is not None and tool.closed == [key]
    assert current_key() is None


async def test_an_unkeyed_stream_sees_no_key() -> None:
    engine = await new_engine(manifest(keyed=False))
    tool = Export()
    engine.register("export", tool.__call__)
    async with engine.stream("export", rows=2) as chunks:
        assert [chunk async for chunk in chunks] == [0, 1]
    assert tool.seen == [None, None] and tool.closed == [None]


async def test_a_stream_cut_by_an_error_quoting_its_secret_key_records_it_masked() -> None:
    engine = await new_engine(manifest(secret_fields=("idempotency_key",)))
    events = recorded(engine)

    async def export(rows: int) -> AsyncIterator[int]:
        yield 0
        raise ConnectionResetError(f"export {current_key()} dropped")

    async def read_all() -> list[int]:
        async with engine.stream("export", rows=2) as chunks:
            return [chunk async for chunk in chunks]

    engine.register("export", export)
    with pytest.raises(ToolError):
        await read_all()
    [assigned] = events.of("IdempotencyKeyAssigned")
    [ended] = events.of("StreamEnded")
    assert MARKER.fullmatch(assigned.key)
    assert ended.error == f"ConnectionResetError: export {assigned.key} dropped"
