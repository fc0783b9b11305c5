"""The manifests view: the versions in force, the last reloads, and files refused with their errors."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Static

from console import render
from console.model import Changes
from console.screens.base import ConsoleScreen


class ManifestScreen(ConsoleScreen):
    """A hot reload shows here as it happens: the tool's row changes version, the change is
    listed, and a refused file shows its errors while the last good version stays in force."""

    DEFAULT_CSS = """
    ManifestScreen .title { color: $accent; text-style: bold; padding: 0 1; }
    ManifestScreen #in-force { height: auto; max-height: 60%; margin: 0 1 1 1; }
    ManifestScreen #rejected { height: auto; padding: 0 1; margin-bottom: 1; }
    ManifestScreen #changes { height: auto; margin: 0 1; }
    """

    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="headline", classes="title")
            yield DataTable(id="in-force", cursor_type="row", zebra_stripes=True)
            yield Static("Refused files", classes="title")
            yield Static(id="rejected")
            yield Static("Recent changes", classes="title")
            yield DataTable(id="changes", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.query_one("#in-force", DataTable).add_columns(
            "tool", "version", "digest", "timeout", "attempts", "threshold", "loaded", "file"
        )
        self.query_one("#changes", DataTable).add_columns(
            "time", "change", "tool", "version", "digest", "file"
        )

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        if not (full or changes.manifests):
            return
        model = self.console_app.model
        self.query_one("#headline", Static).update(
            f"Manifests in force — registry version {model.manifest_version}"
        )
        table = self.query_one("#in-force", DataTable)
        table.clear()
        for tool_id, view in sorted(model.tools.items()):
            m = view.manifest
            if m is None:
                table.add_row(tool_id, "—", "—", "—", "—", "—", "—", "defaults")
                continue
            retry = m.content.get("retry_policy") or {}
            table.add_row(
                tool_id, f"v{m.version}", render.short_digest(m.digest),
                render.duration(m.content.get("timeout_ms")), str(retry.get("max_attempts", "—")),
                str(m.failure_threshold or "—"), render.clock(m.loaded_at) if m.loaded_at else "—", m.path,
                key=tool_id,
            )  # fmt: skip
        rejected = self.query_one("#rejected", Static)
        if model.rejected:
            lines = []
            for path, change in sorted(model.rejected.items()):
                kept = f" — keeping {render.short_digest(change.digest)}" if change.digest else ""
                lines.append(Content.styled(f"✗ {path}{kept}", "bold $error"))
                lines += [Content.styled(f"    {error}", "$error") for error in change.errors]
            rejected.update(Content("\n").join(lines))
        else:
            rejected.update(Content.styled("none: every manifest file is valid", "$success"))
        log = self.query_one("#changes", DataTable)
        log.clear()
        for change in reversed(model.manifest_changes):
            what = change.what
            if change.what == "rejected" and change.errors:
                what = f"rejected ({len(change.errors)} error(s))"
            log.add_row(
                render.clock(change.at) if change.at else "—", what, change.tool_id or "—",
                f"v{change.version}" if change.version is not None else "—",
                render.short_digest(change.digest), change.path,
            )  # fmt: skip
