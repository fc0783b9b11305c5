"""Scenarios: a YAML script of turns, optionally with a fault plan, for headless runs.

```yaml
scenario:
  name: travel agent demo
  seed: 2025                 # jitter and chaos: the same seed gives the same run
  faults: faults.yaml        # a fault plan, relative to this file (optional)
  turns:
    - id: plan-trip
      after_ms: 0            # pause before this turn starts
      deadline_ms: 60000     # the turn's deadline
      calls:
        - {id: flights, tool: flight_search, args: {origin: SFO, destination: JFK}}
        - {id: hotels, tool: hotel_search, args: {city: New York}}
        - id: compare
          tool: compare_prices
          depends_on: [flights, hotels]
          default: []        # used in place of a failed dependency's output
          optional: true     # skipped (not escalated) when a dependency fails
    - id: ask-model
      model: true            # an assistant message's tool calls: through the LLM executor
      calls:
        - {id: call_1, tool: hotel_search, args: {city: Rome}}
```

Internal: ``tripwire run`` is its API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import anyio
from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.config import ConfigError, ConfigIssue, read_yaml
from engine.faults import FaultPlan, FaultPlanError, load_fault_plan
from engine.handler import MISSING
from engine.llm import LLMToolCall, ToolCallExecutor
from engine.turn import ToolCall, Turn, TurnError, validate

if TYPE_CHECKING:
    from engine.engine import Engine
    from engine.outcomes import TurnResult


class ScenarioError(ConfigError):
    what = "scenario"


class CallSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    tool: str = Field(min_length=1)
    args: dict[str, Any] = Field(default_factory=dict)
    depends_on: list[str] = Field(default_factory=list)
    optional: bool = False
    default: Any = None
    inputs: dict[str, str] | None = None

    def to_call(self) -> ToolCall:
        default = self.default if "default" in self.model_fields_set else MISSING
        return ToolCall(
            self.id, self.tool, self.args, tuple(self.depends_on), self.optional, default, self.inputs
        )


class TurnSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    after_ms: float = Field(default=0.0, ge=0)
    deadline_ms: float | None = Field(default=300_000.0, gt=0)
    model: bool = False
    """The calls of an assistant message: the LLM executor runs them and answers each with the
    text the model would receive (refusing unknown tools and bad arguments itself)."""
    calls: list[CallSpec] = Field(min_length=1)

    @model_validator(mode="after")
    def _model_calls_are_independent(self) -> Self:
        if self.model and any(c.depends_on for c in self.calls):
            raise ValueError("a model turn's calls cannot depend on each other (a model sends them at once)")
        return self

    def to_turn(self) -> Turn:
        deadline = self.deadline_ms / 1000.0 if self.deadline_ms is not None else None
        return Turn(tuple(c.to_call() for c in self.calls), self.id, deadline)


class ScenarioSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = ""
    seed: int = 0
    faults: str | None = None
    turns: list[TurnSpec] = Field(min_length=1)


class _ScenarioFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scenario: ScenarioSpec


@dataclass(frozen=True, slots=True)
class Scenario:
    spec: ScenarioSpec
    path: Path
    faults: FaultPlan | None
    lines: dict[tuple[str | int, ...], int]

    @property
    def name(self) -> str:
        return self.spec.name or self.path.stem

    def turns(self, run: str | None = None) -> list[Turn]:
        """The turns; ``run`` namespaces their ids (``run/plan-trip``) so runs never collide."""
        turns = [t.to_turn() for t in self.spec.turns]
        if run is None:
            return turns
        return [Turn(t.calls, f"{run}/{t.id}", t.deadline_s) for t in turns]

    def check(self, tools: Iterable[str]) -> None:
        """Every turn must be runnable with ``tools``; problems name the file and the turn's line."""
        known = list(tools)
        issues = []
        for index, spec in enumerate(self.spec.turns):
            if spec.model:  # the executor answers unknown tools and bad arguments to the model
                continue
            try:
                validate(spec.to_turn(), known)
            except TurnError as exc:
                line = self.lines.get(("scenario", "turns", index))
                field = f"scenario.turns.{index}"
                issues += [ConfigIssue(str(self.path), line, field, p) for p in exc.problems]
        if issues:
            raise ScenarioError(issues)


def load_scenario(path: str | Path) -> Scenario:
    """Load a scenario and its fault plan; raises :class:`ScenarioError` or ``FaultPlanError``."""
    path = Path(path)
    parsed = read_yaml(path, "scenario", ScenarioError)
    spec = parsed.validate(_ScenarioFile, ScenarioError).scenario
    faults = None
    if spec.faults is not None:
        plan_path = (path.parent / spec.faults).resolve()
        if not plan_path.is_file():
            line = parsed.lines.get(("scenario", "faults"))
            raise ScenarioError(
                [ConfigIssue(str(path), line, "scenario.faults", f"no such file: {spec.faults}")]
            )
        faults = load_fault_plan(plan_path)
    return Scenario(spec, path, faults, parsed.lines)


async def run_scenario(
    engine: Engine,
    scenario: Scenario,
    *,
    on_turn: Callable[[TurnResult], Awaitable[None] | None] | None = None,
    run: str | None = None,
) -> list[TurnResult]:
    """Run the scenario's turns in order on ``engine``, pausing ``after_ms`` before each.

    ``run`` namespaces the turn ids (fault plans still match the scenario's own ids).
    """
    scenario.check(engine.tools)
    results = []
    for spec, turn in zip(scenario.spec.turns, scenario.turns(run), strict=True):
        if spec.after_ms:
            await anyio.sleep(spec.after_ms / 1000.0)
        if spec.model:
            executor = ToolCallExecutor(engine, deadline_s=turn.deadline_s)
            calls = [LLMToolCall(c.id, c.tool, dict(c.args)) for c in spec.calls]
            batch = await executor.run(calls, turn_id=turn.id)
            if batch.turn is None:  # the executor refused every call: no turn ran
                continue
            result = batch.turn
        else:
            result = await engine.run_turn(turn)
        results.append(result)
        if on_turn is not None:
            maybe = on_turn(result)
            if maybe is not None:
                await maybe
    return results


__all__ = ["FaultPlanError", "Scenario", "ScenarioError", "ScenarioSpec", "load_scenario", "run_scenario"]
