"""Engine tests run on trio with a virtual clock: a 30 s breaker timeout takes milliseconds."""

from __future__ import annotations

from typing import Any

import pytest
import trio.testing


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return "trio", {"clock": trio.testing.MockClock(autojump_threshold=0)}
