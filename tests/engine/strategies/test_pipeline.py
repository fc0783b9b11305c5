"""The strategy pipeline (issue 23 §1): a strategy added from here, without touching engine code,
is configured by its manifest section, runs its hooks in order, refuses attempts unsent, tells a
custom handler and ``engine.stats()`` its facts, and keeps its state across a hot reload; both
paths (fused, general) run the suite (tests/engine/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from pydantic import Field

from engine import Engine, ManifestError, ToolManifest
from engine.handler import FailureContext, HandlerDecision
from engine.kinds import ErrorKind
from engine.manifest import load_manifest
from engine.side_effect import SideEffect
from engine.strategies import registry
from engine.strategies.base import CallView, PolicyView, Refusal, Strategy, StrategyOptions
from engine.strategies.retry.policy import RetryPolicy
from tests.engine.conftest import Scripted, general_path, new_engine, recorded

pytestmark = pytest.mark.anyio

NO_WAIT = RetryPolicy(initial_delay_ms=0, max_delay_ms=0, jitter_percent=0)


class GateOptions(StrategyOptions):
    open: bool = True
    label: str = Field(default="gate", min_length=1)


class CallLog:
    """Shared across reloads: what the gate saw."""

    def __init__(self) -> None:
        self.hooks: list[tuple[str, str, int]] = []
        self.calls = 0


class Gate(Strategy[GateOptions]):
    """A trivial strategy: counts calls, logs its hooks, refuses attempts while closed."""

    section = "gate"
    options_type = GateOptions

    def __init__(self, tool_id: str, options: GateOptions) -> None:
        super().__init__(tool_id, options)
        self.log = CallLog()

    @classmethod
    def refuse_policy(cls, options: GateOptions, policy: PolicyView) -> str | None:
        if options.label == "reads" and policy.side_effect is not SideEffect.READ_ONLY:
            return f"only for read_only tools (side_effect is {policy.side_effect.value})"
        return None

    def handover(self, previous: Strategy[GateOptions]) -> None:
        assert isinstance(previous, Gate)
        self.log = previous.log

    def call_started(self, call: CallView) -> None:
        self.log.calls += 1
        self.log.hooks.append(("call_started", call.call_id, call.attempt))

    async def admit(self, call: CallView) -> Refusal | None:
        self.log.hooks.append(("admit", call.call_id, call.attempt))
        if not self.options.open:
            return Refusal(ErrorKind.NOT_PERMITTED, f"{self.options.label} is closed", self.section)
        return None

    def attempt_ended(self, call: CallView) -> None:
        self.log.hooks.append(("attempt_ended", call.call_id, call.attempt))

    def retry_refusal(self, call: CallView) -> str | None:
        self.log.hooks.append(("retry_refusal", call.call_id, call.attempt))
        return None

    def facts(self, now: float) -> Mapping[str, Any]:
        return {"calls": self.log.calls, "label": self.options.label}


@pytest.fixture
def gate() -> Iterator[None]:
    uninstall = registry.install_strategy(Gate, before="retry_budget")
    try:
        yield
    finally:
        uninstall()


def gate_of(engine: Engine, tool_id: str) -> Gate:
    strategy = engine.runtime.tools[tool_id].pipeline.own("gate")
    assert isinstance(strategy, Gate)
    return strategy


async def test_every_engine_test_runs_on_the_path_its_mode_says(engine_mode: str, anyio_backend: Any) -> None:
    engine = await new_engine(ToolManifest(id="t"))
    engine.register("t", Scripted("ok"))
    assert engine.runtime.tools["t"].pipeline.general is general_path(anyio_backend, engine_mode)
    assert await engine.call("t") == "ok"


@pytest.mark.usefixtures("gate")
async def test_a_strategy_from_outside_the_engine_runs_its_hooks_in_order() -> None:
    tool = Scripted(ConnectionResetError("boom"), "ok")
    engine = await new_engine(ToolManifest(id="t", retry_policy=NO_WAIT, gate={"label": "g"}))
    engine.register("t", tool)
    assert await engine.call("t") == "ok"
    log = gate_of(engine, "t").log
    steps = [(hook, attempt) for hook, _, attempt in log.hooks]
    assert steps == [
        ("call_started", 0),
        ("admit", 1),
        ("attempt_ended", 1),
        ("retry_refusal", 1),
        ("admit", 2),
        ("attempt_ended", 2),
    ]
    assert engine.stats()["t"].strategies == {"gate": {"calls": 1, "label": "g"}}
    assert engine.manifest("t").model_dump()["gate"] == {"open": True, "label": "g"}


@pytest.mark.usefixtures("gate")
async def test_a_refused_first_attempt_never_reaches_the_tool_and_says_why() -> None:
    tool = Scripted("ok")
    engine = await new_engine(ToolManifest(id="t", gate={"open": False, "label": "maintenance"}))
    engine.register("t", tool)
    events = recorded(engine)
    result = await engine.try_call("t")
    assert tool.calls == 0
    assert result.error is not None
    assert result.error.kind is ErrorKind.NOT_PERMITTED
    assert result.error.executed is False
    assert result.attempts == 0
    assert result.reason == "maintenance is closed"
    [rejected] = events.of("CallRejected")
    assert (rejected.kind, rejected.reason) == (ErrorKind.NOT_PERMITTED, "maintenance is closed")
    assert engine.stats()["t"].life.rejections == 1
    assert engine.breaker("t").consecutive_failures == 0, "an unsent attempt is no evidence"


@pytest.mark.usefixtures("gate")
async def test_a_refused_retry_ends_the_call_on_its_last_attempt() -> None:
    engine = await new_engine(ToolManifest(id="t", retry_policy=NO_WAIT, gate={"open": True}))

    async def fail_then_close() -> Any:  # the gate closes during the first attempt
        gate_of(engine, "t").options = GateOptions(open=False, label="shut")
        raise ConnectionResetError("reset")

    tool = Scripted(fail_then_close, "ok")
    engine.register("t", tool)
    result = await engine.try_call("t")
    assert tool.calls == 1
    assert result.error is not None
    assert result.error.kind is ErrorKind.CONNECTION_RESET, "the last attempt's kind, not the refusal's"
    assert result.error.executed is True
    assert result.reason.startswith("retry refused: shut is closed")


@pytest.mark.usefixtures("gate")
async def test_a_custom_handler_is_told_each_strategys_facts() -> None:
    seen: list[FailureContext] = []

    def handler(failure: FailureContext) -> HandlerDecision | None:
        seen.append(failure)
        return None

    engine = await new_engine(
        ToolManifest(id="t", retry_policy=NO_WAIT, gate={"label": "g"}), handler=handler
    )
    engine.register("t", Scripted(ConnectionResetError("x"), "ok"))
    await engine.call("t")
    assert [f.strategies for f in seen] == [{"gate": {"calls": 1, "label": "g"}}]


@pytest.mark.usefixtures("gate")
def test_a_strategy_section_is_validated_with_the_file_field_and_line(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  gate:\n    open: maybe\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value).startswith(f"{path}:5: tool.gate.open: ")
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  gate:\n    colour: red\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert str(caught.value) == f"{path}:5: tool.gate.colour: unknown key"


@pytest.mark.usefixtures("gate")
def test_a_section_a_tool_may_not_have_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: side_effecting\n  gate:\n    label: reads\n")
    with pytest.raises(ManifestError) as caught:
        load_manifest(path)
    assert (
        str(caught.value) == f"{path}:4: tool.gate: only for read_only tools (side_effect is side_effecting)"
    )
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  gate:\n    label: reads\n")
    assert load_manifest(path).strategies["gate"] == GateOptions(label="reads")
    with pytest.raises(ValueError, match="only for read_only tools"):
        ToolManifest.model_validate({"id": "t", "gate": {"label": "reads"}})  # idempotent by default


def test_without_the_strategy_installed_its_section_is_an_unknown_key(tmp_path: Path) -> None:
    path = tmp_path / "t.yaml"
    path.write_text("tool:\n  id: t\n  side_effect: read_only\n  gate:\n    open: true\n")
    with pytest.raises(ManifestError, match=r":4: tool.gate: unknown key"):
        load_manifest(path)


@pytest.mark.usefixtures("gate")
async def test_a_reload_swaps_the_pipeline_and_hands_over_the_strategys_state(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("tool:\n  id: t\n  side_effect: read_only\n  gate: {label: one}\n")
    engine = Engine(tmp_path)
    engine.register("t", Scripted("ok"))
    await engine.call("t")
    before = engine.runtime.tools["t"].pipeline
    (tmp_path / "t.yaml").write_text("tool:\n  id: t\n  side_effect: read_only\n  gate: {label: two}\n")
    engine.reload_manifests()
    after = engine.runtime.tools["t"].pipeline
    assert after is not before
    await engine.call("t")
    assert engine.stats()["t"].strategies == {"gate": {"calls": 2, "label": "two"}}
    (tmp_path / "t.yaml").write_text("tool:\n  id: t\n  side_effect: read_only\n")
    engine.reload_manifests()
    assert engine.runtime.tools["t"].pipeline.general is False
    assert engine.stats()["t"].strategies == {}
