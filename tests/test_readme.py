"""README is the front door: its commands, example and tables must be true."""

from __future__ import annotations

import ast
import inspect
import json
import re
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import Engine
from engine.demo import DEMO_TOOLS
from engine.events import BreakerTripped, vocabulary_markdown
from engine.store import TraceStore
from engine.store.command_auth import command_origin

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.DOTALL)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    marker = README.index("<!-- test-command")
    command = re.search(r"```sh\n(.*?)\n```", README[marker:], flags=re.DOTALL)
    assert command is not None
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command.group(1) in ci


def run_example(example: str, monkeypatch: pytest.MonkeyPatch, cwd: Path = ROOT, **given: Any) -> Any:
    """Run a README example as written, on the real clock, in ``cwd``.

    A fragment (top-level ``await``, names defined elsewhere in README) runs with ``given``
    in scope, in an event loop of its own; its namespace is returned.
    """
    monkeypatch.chdir(cwd)
    namespace: dict[str, Any] = {"__name__": "readme", **given}
    code = compile(example, "README.md", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if code.co_flags & inspect.CO_COROUTINE:
        anyio.run(partial(eval, code, namespace))
    else:
        exec(code, namespace)
    return namespace


def runnable_examples() -> list[str]:
    return [block for block in code_blocks("python") if "anyio.run(main)" in block]


def fragments() -> list[str]:
    return [block for block in code_blocks("python") if "anyio.run(main)" not in block]


def example(marker: str) -> str:
    """The one runnable example that contains ``marker``."""
    (found,) = [block for block in runnable_examples() if marker in block]
    return found


RUN_ELSEWHERE = {
    "from engine.adapters.mcp import": "tests/engine/integrations/test_mcp.py",
    "from engine.adapters.openai_agents import": "tests/engine/integrations/test_openai_agents.py",
    "from engine.adapters.pydantic_ai import": "tests/engine/integrations/test_pydantic_ai.py",
    "from engine.adapters.langgraph import": "tests/engine/integrations/test_langgraph.py",
    "from engine.exporters.otel import": "tests/engine/integrations/test_otel.py",
    "from engine.exporters.prometheus import": "tests/engine/integrations/test_prometheus.py",
    "from engine.fleet import": "tests/engine/fleet/test_readme_example.py",
}
"""The adapters' and exporters' examples: each runs in its own test, which also checks README
shows exactly the code it runs."""


def test_every_python_example_is_run_here() -> None:
    assert (len(runnable_examples()), len(fragments())) == (9 + len(RUN_ELSEWHERE), 2)
    for marker, where in RUN_ELSEWHERE.items():
        example(marker)
        runner = (ROOT / where).read_text(encoding="utf-8")
        assert "readme_example(" in runner, f"{where} does not run README's example"


def test_the_api_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run_example(example('engine.register("flight_search", flight_search)'), monkeypatch)
    out = capsys.readouterr().out
    assert "['SFO-JFK 08:15', 'SFO-JFK 17:40']" in out
    assert "Tool succeeded on retry 3 (flight_search)" in out
    assert "invalid_parameters - exception class ValueError means invalid_parameters" in out
    assert "True 1" in out


def test_the_turns_example_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run_example(example("turn = Turn("), monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Completed flight search, hotel search, compare prices and create itinerary."
    assert [line.split()[:2] for line in lines[1:]] == [
        ["flights", "succeeded"], ["hotels", "succeeded"], ["compare", "succeeded"], ["book", "succeeded"],
    ]  # fmt: skip


def test_the_strategy_pipeline_example_runs_and_prints_what_readme_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = 'bulkhead={"max_concurrent": 2'
    run_example(example(marker), monkeypatch)
    printed = capsys.readouterr().out
    shown = README[README.index(marker) :].split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert printed == shown
    assert "latam bulkhead full: 2 in flight, 1 queued" in printed
    assert "asia 2 retry refused: retry budget spent: 1 retries over 5 calls in 10 s" in printed


def test_the_added_strategy_example_runs_and_prints_what_readme_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = "class Freeze(Strategy[FreezeOptions]):"
    run_example(example(marker), monkeypatch)
    printed = capsys.readouterr().out
    shown = README[README.index(marker) :].split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert printed == shown == "not_permitted 0 deploy: release week\n"


def test_the_rate_limit_example_runs_and_prints_what_readme_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = 'rate_limit={"rate_per_s": 20'
    run_example(example(marker), monkeypatch)
    printed = capsys.readouterr().out
    shown = README[README.index(marker) :].split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert printed == shown
    assert "5 throttled" in printed, "the caller that could not wait out the cooldown was refused"


def test_the_idempotency_example_runs_and_prints_what_readme_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = 'idempotency={"key": "request_id"}'
    namespace = run_example(example(marker), monkeypatch)
    printed = capsys.readouterr().out
    shown = README[README.index(marker) :].split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert printed == shown
    assert len(namespace["booked"]) == 2, "each call booked once, its re-send recognised by its key"
    # Without the section, the same tool is sent once: never re-sent after the timeout.
    example_code = example(marker).replace('    idempotency={"key": "request_id"},', "")
    namespace = run_example(example_code, monkeypatch)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("→ escalate: side-effecting tool: not re-sent after an ambiguous timeout")
    assert lines[1:] == ["1 None 1", "1 False 1"], "sent once; the second call has no key to pass at all"


def test_the_hedging_example_runs_and_prints_what_readme_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = 'hedging={"hedge_after_ms": 100, "max_hedges": 1}'
    run_example(example(marker), monkeypatch)
    printed = capsys.readouterr().out
    shown = README[README.index(marker) :].split("prints\n\n```\n", 1)[1].split("```", 1)[0]
    assert printed == shown
    assert printed.startswith("hotels in Lisbon from the fast replica - attempt 2\n")


def test_event_vocabulary_table_is_generated_from_the_code() -> None:
    assert vocabulary_markdown() in README


def test_the_trace_store_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "manifests").symlink_to(ROOT / "manifests")
    (tmp_path / "traces").mkdir()
    run_example(example("replay matches"), monkeypatch, cwd=tmp_path)
    assert capsys.readouterr().out.splitlines() == ["ok 4 events; replay matches: True"]
    assert (tmp_path / "traces" / "traces.db").stat().st_mode & 0o777 == 0o600
    exported = [
        json.loads(line)["event_type"] for line in (tmp_path / "last-hour.jsonl").read_text().splitlines()
    ]
    # The manifest versions in force when recording started (by when they were loaded) and the
    # tools' breakers then, then the turn.
    manifests = exported.count("ManifestLoaded")
    tools = len([p for p in (ROOT / "manifests").glob("*.yaml") if p.name != "defaults.yaml"])
    assert manifests == tools == 8 and sorted(exported[: manifests + 1]) == ["ManifestLoaded"] * tools + [
        "RecordingStarted"
    ]
    assert exported[manifests + 1] == "TurnStarted" and len(exported) == manifests + 5


def test_the_operator_commands_example_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "manifests").symlink_to(ROOT / "manifests")
    (tmp_path / "traces").mkdir()
    run_example(example("serve_operator_commands"), monkeypatch, cwd=tmp_path)
    assert capsys.readouterr().out.splitlines() == ["FORCED_OPEN applied"]
    with TraceStore(tmp_path / "traces" / "traces.db", readonly=True) as store:
        (tripped,) = [e for e in store.events() if isinstance(e, BreakerTripped)]
        me = command_origin()  # the OS user, host and pid of the process that sent it
        assert (tripped.tool_id, tripped.actor, tripped.reason) == (
            "hotel_search", f"operator:{me.user}@{me.host}", "vendor maintenance",
        )  # fmt: skip


def demo_engine_here() -> Engine:
    engine = Engine(ROOT / "manifests")
    for name, tool in DEMO_TOOLS.items():
        engine.register(name, tool)
    return engine


def test_the_tool_call_executor_fragment_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    (executor,) = [block for block in fragments() if "ToolCallExecutor" in block]
    args = {"origin": "SFO", "destination": "JFK"}
    openai_message = {
        "role": "assistant",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "flight_search", "arguments": json.dumps(args)},
            }
        ],
    }
    anthropic_message = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "toolu_1", "name": "flight_search", "input": args}],
    }
    done = run_example(
        executor, monkeypatch, engine=demo_engine_here(), openai_message=openai_message,
        anthropic_message=anthropic_message,
    )  # fmt: skip
    (reply,) = done["messages"]
    assert (reply["role"], reply["tool_call_id"]) == ("tool", "call_1")
    (result,) = done["user_message"]["content"]
    assert (result["type"], result["tool_use_id"], result.get("is_error", False)) == (
        "tool_result",
        "toolu_1",
        False,
    )


def test_the_streaming_fragment_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    (streaming,) = [block for block in fragments() if "engine.stream" in block]
    done = run_example(streaming, monkeypatch, engine=demo_engine_here())
    assert done["chunk"] == {"page": 2, "query": "hotels in Lisbon"}, "every page was read"
