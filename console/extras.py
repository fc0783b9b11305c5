"""The optional extras a command can need (``pip install 'tripwire[fleet]'``, …), and the one line
that says which is missing: every command and option that imports one goes through here, so none
ends in a ``ModuleNotFoundError`` traceback.

Light on purpose: the command line imports it at start-up.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

from console.usage import UsageError

EXTRA_MODULES: Final[dict[str, tuple[str, ...]]] = {
    "mcp": ("mcp",),
    "openai-agents": ("agents",),
    "pydantic-ai": ("pydantic_ai",),
    "langgraph": ("langgraph", "langchain_core"),
    "otel": ("opentelemetry",),
    "prometheus": ("prometheus_client",),
    "fleet": ("redis",),
}
"""Each extra of pyproject.toml by the top-level modules it is for (a test keeps the extras in step);
not their dependencies' (``openai``): a program importing one of those needs that, not the extra."""


def pip_install(extra: str) -> str:
    """What installs ``extra``: ``pip install 'tripwire[fleet]'``."""
    return f"pip install 'tripwire[{extra}]'"


def needs_extra(what: str, extra: str) -> str:
    """The one line for a missing extra: ``--fleet needs the fleet extra: pip install 'tripwire[fleet]'``."""
    return f"{what} needs the {extra} extra: {pip_install(extra)}"


def fleet_target(url: str) -> str:
    """How a command names the fleet it was pointed at, before it can read the URL (never the password)."""
    return f"--attach {url.split('://')[0]}://…: a fleet"


def missing_extra(error: ImportError) -> str | None:
    """The extra whose module ``error`` could not import, or None: then it is no missing install."""
    root = (error.name or "").partition(".")[0]
    return next((extra for extra, modules in EXTRA_MODULES.items() if root in modules), None)


@contextmanager
def requires_extra(what: str, extra: str) -> Iterator[None]:
    """Imports in the block that fail for want of ``extra`` become a :class:`UsageError`, one line
    saying that ``what`` needs it (exit 2); any other failed import stays the defect it is."""
    try:
        yield
    except ImportError as exc:
        if missing_extra(exc) != extra:
            raise
        raise UsageError(needs_extra(what, extra)) from None
