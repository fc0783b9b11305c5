"""How an attempt runs its tool: awaited, in a worker thread, or as a stream (collected, or opened
on its first chunk); or with an injected fault in its place.

Pure of the engine's state: the guarded call (:mod:`engine.guard`) times, counts and decides;
this only invokes.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from engine.streams import collect, open_stream

if TYPE_CHECKING:
    from engine.call import RegisteredTool
    from engine.faults import InjectedAttempt
    from engine.faults.models import StreamCut


async def invoke(
    tool: RegisteredTool, args: dict[str, Any], opening_stream: bool, cut: StreamCut | None = None
) -> Any:
    """Run ``tool`` once: a streaming tool's chunks collected (or, ``opening_stream``, the open
    stream with its first chunk), cut by ``cut`` when a fault says so; a plain function in a
    worker thread."""
    if tool.is_stream:
        chunks = tool.fn(**args)
        if cut is not None:
            chunks = cut(chunks)
        return await (open_stream(chunks) if opening_stream else collect(chunks))
    if tool.is_async:
        return await tool.fn(**args)
    return await anyio.to_thread.run_sync(partial(tool.fn, **args), abandon_on_cancel=True)


async def invoke_injected(
    fault: InjectedAttempt, tool: RegisteredTool, args: dict[str, Any], opening_stream: bool
) -> Any:
    """An attempt an injector stepped into: the fault runs in the tool's place, or cuts its stream."""
    cut = fault.stream_cut() if tool.is_stream else None
    if cut is None:
        return await fault.run(partial(invoke, tool, args, opening_stream))
    return await invoke(tool, args, opening_stream, cut)
