"""The manifests view: the versions in force, the last reloads, and files refused with their errors."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import DataTable, Static

from console import render
from console.model import Changes, ConsoleModel, ManifestChange
from console.screens.base import ConsoleScreen
from console.screens.text import TextModal, clock_field, field_text
from console.widgets.item_table import ItemTable, Row, hint


def change_rows(model: ConsoleModel) -> list[tuple[str, ManifestChange]]:
    """The kept changes, newest first, each keyed by its place among every change ever folded."""
    first = model.manifest_change_count - len(model.manifest_changes) + 1
    numbered = [(str(first + i), change) for i, change in enumerate(model.manifest_changes)]
    return list(reversed(numbered))


def change_fields(change: ManifestChange) -> list[tuple[str, object]]:
    fields: list[tuple[str, object]] = [
        ("time", clock_field(change.at)), ("change", change.what), ("tool", change.tool_id),
        ("version", f"v{change.version}" if change.version is not None else None), ("digest", change.digest),
        ("file", change.path),
    ]  # fmt: skip
    fields += [(f"error {i}", error) for i, error in enumerate(change.errors, 1)]
    return fields


class ManifestScreen(ConsoleScreen):
    """A hot reload shows here as it happens: the tool's row changes version (and digest), the
    change is listed, and a refused file shows its errors while the last good version stays in
    force. ``tries`` is the retry policy's attempts, ``opens at`` the breaker's failure threshold.
    ``enter`` on a row opens it in full (a tool's manifest, or a change with all its errors)."""

    HELP_TITLE = "Manifests"

    BINDINGS = [
        Binding(
            "f", "follow", "Follow", tooltip="Follow the newest change, or hold the cursor on its change"
        ),
    ]
    DEFAULT_CSS = """
    ManifestScreen .title { color: $accent; text-style: bold; padding: 0 1; }
    ManifestScreen #in-force { height: auto; max-height: 60%; margin: 0 1 1 1; }
    ManifestScreen #rejected { height: auto; padding: 0 1; margin-bottom: 1; }
    ManifestScreen #changes { height: auto; margin: 0 1; }
    """

    def compose_body(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="headline", classes="title")
            yield ItemTable(
                "tool", "version", "timeout", "tries", "opens at", "loaded", "file", flex="file",
                following=False, id="in-force",
            )  # fmt: skip
            yield Static("Refused files", classes="title")
            yield Static(id="rejected")
            yield Static("Recent changes", classes="title", id="changes-title")
            yield ItemTable("time", "change", "tool", "version", "digest", "file", flex="file", id="changes")

    def show(self, changes: Changes, now: float, *, full: bool = False) -> None:
        if not (full or changes.manifests):
            return
        model = self.console_app.model
        self.query_one("#headline", Static).update(
            f"Manifests in force — registry version {model.manifest_version}"
        )
        rows: list[Row] = []
        for tool_id, view in sorted(model.tools.items()):
            m = view.manifest
            # The tool's name stays whole (a plain string: tool ids are identifiers, never markup);
            # at 80 columns the file, a key away in full, is what gives way.
            if m is None:
                rows.append((tool_id, (tool_id, "—", "—", "—", "—", "—", Text("defaults"))))
                continue
            retry = m.content.get("retry_policy") or {}
            rows.append((tool_id, (
                tool_id, f"v{m.version} {render.short_digest(m.digest)}",
                render.duration(m.content.get("timeout_ms")), str(retry.get("max_attempts", "—")),
                str(m.failure_threshold or "—"), render.clock(m.loaded_at) if m.loaded_at else "—",
                Text(m.path),
            )))  # fmt: skip
        self.query_one("#in-force", ItemTable).fill(rows)
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
        log: list[Row] = []
        for key, change in change_rows(model):
            what = change.what
            if change.what == "rejected" and change.errors:
                what = f"rejected ({len(change.errors)} error(s))"
            log.append((key, (
                render.clock(change.at) if change.at else "—", what, Text(change.tool_id or "—"),
                f"v{change.version}" if change.version is not None else "—",
                render.short_digest(change.digest), Text(change.path),
            )))  # fmt: skip
        self.query_one("#changes", ItemTable).fill(log)
        self._hint()

    def _hint(self) -> None:
        table = self.query_one("#changes", ItemTable)
        title = Content.assemble("Recent changes  ", (hint(table.list_cursor), "$foreground-muted not bold"))
        self.query_one("#changes-title", Static).update(title if table.row_count else "Recent changes")

    def action_follow(self) -> None:
        table = self.query_one("#changes", ItemTable)
        table.follow(not table.list_cursor.following)
        self._hint()

    @on(DataTable.RowHighlighted, "#changes")
    def _moved(self) -> None:
        self._hint()

    @on(DataTable.RowSelected, "#changes")
    def _open_change(self, event: DataTable.RowSelected) -> None:
        found = dict(change_rows(self.console_app.model)).get(str(event.row_key.value))
        if found is not None:
            title = f"manifest {found.what}: {found.tool_id or found.path}"
            self.app.push_screen(TextModal(title, field_text(change_fields(found))))

    @on(DataTable.RowSelected, "#in-force")
    def _open_manifest(self, event: DataTable.RowSelected) -> None:
        view = self.console_app.model.tools.get(str(event.row_key.value))
        if view is None:
            return
        m = view.manifest
        if m is None:
            text = "no manifest: the defaults apply"
        else:
            head: list[tuple[str, object]] = [
                ("version", f"v{m.version}"), ("digest", m.digest), ("file", m.path),
                ("loaded", clock_field(m.loaded_at)),
            ]  # fmt: skip
            text = field_text([*head, *m.content.items()])
        self.app.push_screen(TextModal(f"manifest in force: {view.tool_id}", text))
