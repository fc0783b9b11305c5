"""Where the console's engine runs, and what drives it: the host thread, scenarios in a loop,
your own workload."""

from __future__ import annotations

import textwrap
import threading
from pathlib import Path

import anyio
import pytest
import trio.testing

from console.cli import main
from console.host import EngineHost, WorkloadError, import_workload, scenario_workload
from engine.demo import demo_engine
from engine.engine import Engine
from engine.events import BreakerOpened, CallSucceeded, Event, TurnStarted
from engine.faults import FaultInjector
from engine.scenario import load_scenario
from engine.strategies.breaker.machine import BreakerState

ROOT = Path(__file__).parents[2]


def test_a_scenario_plays_in_passes_each_with_its_own_turn_ids_and_the_same_faults() -> None:
    scenario = load_scenario(ROOT / "manifests" / "demo" / "live.yaml")
    assert scenario.faults is not None
    engine = demo_engine(ROOT / "manifests", faults=FaultInjector(scenario.faults), seed=scenario.spec.seed)
    events: list[Event] = []
    engine.subscribe(events.append, direct=True)

    async def play() -> None:
        async with engine:
            await scenario_workload(scenario, passes=2, pause_s=5.0)(engine)

    anyio.run(play, backend="trio", backend_options={"clock": trio.testing.MockClock(autojump_threshold=0)})
    turns = [e.turn_id for e in events if isinstance(e, TurnStarted)]
    assert len(turns) == 2 * len(scenario.spec.turns)
    assert len({t.rsplit("/", 1)[0] for t in turns}) == 2, "a run id per pass"
    opened = [e for e in events if isinstance(e, BreakerOpened) and e.tool_id == "flight_search"]
    assert len(opened) == 2, "the outage happens in every pass"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("nocolon", "expected module:function"),
        ("no_such_module_xyz:run", "cannot import no_such_module_xyz"),
        ("json:not_there", "json has no 'not_there'"),
        ("json:dumps", "dumps must be an async function taking the engine"),
    ],
)
def test_a_workload_that_cannot_load_says_why_in_one_line(spec: str, problem: str) -> None:
    with pytest.raises(WorkloadError) as info:
        import_workload(spec)
    assert problem in str(info.value) and "\n" not in str(info.value)


def test_the_command_line_refuses_a_bad_workload_before_any_screen(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("console.cli.terminal_problem", lambda: None)  # as if in a terminal
    assert main(["console", "--workload", "json:dumps", "--no-record"]) == 2
    assert capsys.readouterr().err.startswith("tripwire: --workload 'json:dumps': dumps must be")


def test_a_workload_from_a_file_drives_the_engine_in_its_own_thread(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(
        textwrap.dedent(
            """
            import anyio

            async def lookup(city: str) -> str:
                return f"sunny in {city}"

            async def run(engine):
                engine.register("weather", lookup)
                for city in ("Lisbon", "Oslo"):
                    await engine.call("weather", city=city)
                await anyio.sleep_forever()
            """
        )
    )
    engine = Engine(ROOT / "manifests")
    host = EngineHost(engine, import_workload(f"{tmp_path / 'agent.py'}:run"))
    seen: list[Event] = []
    done = threading.Event()

    def sink(event: Event) -> None:
        seen.append(event)
        if sum(isinstance(e, CallSucceeded) for e in seen) == 2:
            done.set()

    host.subscribe(sink)
    host.start()
    try:
        seeds = {s.tool_id for s in host.seeds()}
        assert "flight_search" in seeds, "tools with a manifest are on the board before they register"
        assert done.wait(10), "the workload's calls reached the subscriber"
        assert threading.current_thread() is threading.main_thread()
        assert [e.tool_id for e in seen if isinstance(e, CallSucceeded)] == ["weather", "weather"]  # type: ignore[attr-defined]
        host.act("trip", "weather", actor="operator:test", reason="drill")
        assert host._portal is not None
        assert host._portal.call(lambda: engine.state("weather")) is BreakerState.FORCED_OPEN
        assert host.problem() is None
    finally:
        host.close()


def test_a_failing_workload_is_reported_and_the_engine_stays_up() -> None:
    async def broken(engine: Engine) -> None:
        raise RuntimeError("agent crashed")

    host = EngineHost(Engine(ROOT / "manifests"), broken, read_only=True)
    host.start()
    try:
        for _ in range(500):  # the workload fails on the engine's thread
            if host.problem() is not None:
                break
            threading.Event().wait(0.01)
        assert host.problem() == "workload failed: RuntimeError: agent crashed"
        assert host.seeds(), "the engine still answers"
        with pytest.raises(PermissionError):
            host.act("trip", "flight_search", actor="operator:test", reason="")
    finally:
        host.close()
