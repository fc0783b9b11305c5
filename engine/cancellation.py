"""Telling a real cancellation from a stray one.

On asyncio a tool can raise ``CancelledError`` although nobody cancelled its call: it awaited
a future or task that something else cancelled (a shared connection's request, a library's
internal task). Treated as a cancellation, that error would cut healthy sibling calls off and
end the turn; it is the tool's own failure. A cancellation is real when it was asked for: an
enclosing cancel scope was cancelled or passed its deadline, or (asyncio) the task has a
pending cancel request from ``Task.cancel()``.

Internal: the engine's machinery, no public names.
"""

from __future__ import annotations

import sys

import anyio

from engine.errors import ToolError
from engine.kinds import ErrorKind


def is_stray_cancellation(error: BaseException) -> bool:
    """``error`` is the backend's cancellation exception, yet nothing asked to cancel this task."""
    if not isinstance(error, anyio.get_cancelled_exc_class()):
        return False
    if anyio.current_effective_deadline() <= anyio.current_time():  # -inf once a scope is cancelled
        return False
    # start-up: asyncio is not imported for this check (15 ms at `import engine`); an asyncio task
    # can only be running if something imported it.
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return True
    try:
        task = asyncio.current_task()
    except RuntimeError:  # not on asyncio
        return True
    return task is None or not task.cancelling()


def stray_cancellation_error(error: BaseException, tool_id: str) -> ToolError:
    """The tool's failure that a stray cancellation stands for.

    A transport error: something the tool was waiting on was aborted mid-exchange, so the
    request may or may not have reached the service — ambiguous, never resent for a
    side-effecting tool unless its manifest allows it.
    """
    return ToolError(
        ErrorKind.TRANSPORT_ERROR,
        f"the tool raised {type(error).__name__} although its call was not cancelled "
        "(an operation it was waiting on was cancelled)",
        tool_id=tool_id,
        original_error=error,
    )
