"""The retry budget in the engine (issue 23 §2): a storm's attempts stay within (1 + budget) × calls,
a refused retry is a decision with its reason and the call goes on as if retries were exhausted,
one budget may be shared by every tool (``defaults.yaml``), and a reload keeps the window."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine, ToolManifest
from engine.handler import Decision, FailureContext, HandlerDecision
from engine.kinds import ErrorKind
from engine.strategies.retry.policy import RetryPolicy
from tests.engine.conftest import new_engine, recorded

pytestmark = pytest.mark.anyio

FIVE_TRIES = RetryPolicy(initial_delay_ms=0, max_delay_ms=0, jitter_percent=0, max_attempts=5)
BUDGET = {"budget_percent": 20, "min_retries_per_s": 0, "window_s": 10}


class Flaky:
    """Fails ``share`` of its attempts (seeded), as a service in a storm does."""

    def __init__(self, share: float, seed: int = 1) -> None:
        self.share = share
        self.rng = random.Random(seed)
        self.attempts = 0

    async def __call__(self) -> str:
        self.attempts += 1
        if self.rng.random() < self.share:
            raise ConnectionResetError("connection reset by peer")
        return "ok"


async def storm(engine: Engine, tool: Flaky, calls: int) -> None:
    """``calls`` calls at 10 per second."""
    for _ in range(calls):
        await engine.try_call("svc")
        await anyio.sleep(0.1)


def manifest(**sections: Any) -> ToolManifest:
    return ToolManifest(id="svc", retry_policy=FIVE_TRIES, **sections)


@pytest.mark.parametrize("share", [0.5, 1.0], ids=["half-failing", "dead"])
async def test_a_storm_adds_at_most_the_budgets_share_of_retries(share: float) -> None:
    calls = 300
    unbudgeted, budgeted = Flaky(share), Flaky(share)
    plain = await new_engine(manifest())
    plain.register("svc", unbudgeted)
    plain.disable("svc")
    await storm(plain, unbudgeted, calls)
    engine = await new_engine(manifest(retry_budget=BUDGET))
    engine.register("svc", budgeted)
    engine.disable("svc")
    await storm(engine, budgeted, calls)
    # Without a budget, retries follow the failures: ~2× the calls at 50 %, 5× for a dead tool.
    assert unbudgeted.attempts >= (1.8 if share < 1 else 5) * calls
    # With one, they add at most 20 % of the recent window's calls.
    assert budgeted.attempts <= 1.2 * calls
    assert budgeted.attempts >= 1.15 * calls, "the budget is spent, not left unused"
    facts = engine.stats()["svc"].strategies["retry_budget"]
    assert facts["refused"] > 0
    assert facts["window_s"] == 10


async def test_a_refused_retry_is_a_decision_with_its_reason_and_the_call_escalates() -> None:
    engine = await new_engine(manifest(retry_budget={"budget_percent": 0, "min_retries_per_s": 0}))
    tool = Flaky(1.0)
    engine.register("svc", tool)
    events = recorded(engine)
    result = await engine.try_call("svc")
    assert tool.attempts == 1
    assert result.error is not None
    assert result.error.kind is ErrorKind.CONNECTION_RESET
    assert result.decision is Decision.ESCALATE
    assert result.reason.startswith("retry refused: retry budget spent: 0 retries over 1 calls in 10 s")
    [failed] = events.of("ToolError")
    assert failed.decision is Decision.ESCALATE
    assert failed.decision_reason == result.reason
    [spent] = events.of("RetryBudgetSpent")
    assert (spent.attempt, spent.calls, spent.retries, spent.shared) == (1, 1, 0, False)
    assert events.types().index("RetryBudgetSpent") < events.types().index("ToolError")


async def test_a_refused_retry_goes_to_the_alternative() -> None:
    engine = await new_engine(
        manifest(retry_budget={"budget_percent": 0, "min_retries_per_s": 0}, alternatives=("backup",)),
        ToolManifest(id="backup"),
    )
    engine.register("svc", Flaky(1.0))

    async def backup() -> str:
        return "from backup"

    engine.register("backup", backup)
    result = await engine.try_call("svc")
    assert (result.value, result.served_by) == ("from backup", "backup")


async def test_a_custom_handler_sees_the_budget_left() -> None:
    seen: list[FailureContext] = []

    def handler(failure: FailureContext) -> HandlerDecision | None:
        seen.append(failure)
        return None

    engine = await new_engine(manifest(retry_budget={"min_retries_per_s": 0.1}), handler=handler)
    engine.register("svc", Flaky(1.0))
    await engine.try_call("svc")
    budget = seen[0].strategies["retry_budget"]
    assert (budget["calls"], budget["retries"], budget["allowed"], budget["shared"]) == (1, 0, 1, False)


def write(directory: Path, name: str, text: str) -> None:
    (directory / name).write_text(text)


SVC = (
    "tool:\n  id: {name}\n  side_effect: read_only\n"
    "  retry_policy: {{initial_delay_ms: 0, max_delay_ms: 0}}\n"
)


async def test_one_budget_in_defaults_yaml_is_shared_by_every_tool(tmp_path: Path) -> None:
    write(
        tmp_path, "defaults.yaml", "defaults: {}\nretry_budget: {budget_percent: 0, min_retries_per_s: 0.1}\n"
    )
    write(tmp_path, "a.yaml", SVC.format(name="a"))
    write(tmp_path, "b.yaml", SVC.format(name="b"))
    engine = Engine(tmp_path)
    a, b = Flaky(1.0), Flaky(1.0)
    engine.register("a", a)
    engine.register("b", b)
    events = recorded(engine)
    await engine.try_call("a")  # spends the one retry the window allows (0.1/s × 10 s)
    await engine.try_call("b")  # finds it spent
    assert (a.attempts, b.attempts) == (2, 1)
    spent = [(e.tool_id, e.attempt, e.shared, e.calls, e.retries) for e in events.of("RetryBudgetSpent")]
    assert spent == [("a", 2, True, 1, 1), ("b", 1, True, 2, 1)]
    assert engine.stats()["a"].strategies["shared.retry_budget"]["retries"] == 1


async def test_a_bad_shared_budget_is_reported_at_its_line_and_the_last_good_one_stays(
    tmp_path: Path,
) -> None:
    write(
        tmp_path, "defaults.yaml", "defaults: {}\nretry_budget: {budget_percent: 0, min_retries_per_s: 0}\n"
    )
    write(tmp_path, "a.yaml", SVC.format(name="a"))
    engine = Engine(tmp_path)
    engine.register("a", Flaky(1.0))
    write(tmp_path, "defaults.yaml", "defaults: {}\nretry_budget:\n  budget_percent: -5\n")
    [rejected] = engine.reload_manifests()
    assert rejected.event_type == "ManifestRejected"
    assert rejected.errors[0].startswith(f"{tmp_path / 'defaults.yaml'}:3: retry_budget.budget_percent: ")
    result = await engine.try_call("a")
    assert result.attempts == 1, "the last good budget (none left) is still in force"


async def test_a_changed_shared_budget_is_announced_and_swapped_in_keeping_its_window(tmp_path: Path) -> None:
    write(
        tmp_path, "defaults.yaml", "defaults: {}\nretry_budget: {budget_percent: 0, min_retries_per_s: 0.1}\n"
    )
    write(tmp_path, "a.yaml", SVC.format(name="a"))
    engine = Engine(tmp_path)
    engine.register("a", Flaky(1.0))
    await engine.try_call("a")  # spends the shared budget's one retry
    write(
        tmp_path, "defaults.yaml", "defaults: {}\nretry_budget: {budget_percent: 0, min_retries_per_s: 0.2}\n"
    )
    [changed] = engine.reload_manifests()
    assert changed.event_type == "SharedStrategiesChanged"
    assert changed.strategies["retry_budget"]["min_retries_per_s"] == 0.2
    assert changed.previous["retry_budget"]["min_retries_per_s"] == 0.1
    facts = engine.stats()["a"].strategies["shared.retry_budget"]
    assert (facts["calls"], facts["retries"], facts["allowed"]) == (1, 1, 2)
    write(tmp_path, "defaults.yaml", "defaults: {}\n")
    [dropped] = engine.reload_manifests()
    assert (dropped.strategies, list(dropped.previous)) == ({}, ["retry_budget"])
    assert engine.stats()["a"].strategies == {}


async def test_a_reload_keeps_the_window(tmp_path: Path) -> None:
    write(
        tmp_path,
        "a.yaml",
        SVC.format(name="a") + "  retry_budget: {budget_percent: 0, min_retries_per_s: 0.1}\n",
    )
    engine = Engine(tmp_path)
    tool = Flaky(1.0)
    engine.register("a", tool)
    await engine.try_call("a")
    assert tool.attempts == 2
    write(
        tmp_path,
        "a.yaml",
        SVC.format(name="a") + "  retry_budget: {budget_percent: 1, min_retries_per_s: 0.1}\n",
    )
    engine.reload_manifests()
    await engine.try_call("a")
    assert tool.attempts == 3, "the retry spent before the reload still counts"
    facts = engine.stats()["a"].strategies["retry_budget"]
    assert (facts["calls"], facts["retries"], facts["refused"]) == (2, 1, 2)
