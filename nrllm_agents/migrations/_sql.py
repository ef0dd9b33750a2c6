"""The migrations' SQL, read from ``store/sql/notify.sql`` by section (the one place of every trigger).

Named with a leading underscore so that Django's migration loader does not take it for a migration;
it imports nothing of the app, so a migration that reads a section loads no model.
"""

from __future__ import annotations

from pathlib import Path

NOTIFY = Path(__file__).resolve().parent.parent / "store" / "sql" / "notify.sql"
MARK = "-- section: "


def sections(path: Path = NOTIFY) -> dict[str, str]:
    """Each ``-- section: NAME`` of the file: its lines up to the next section or ``-- ====`` heading."""
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(MARK):
            name = line[len(MARK) :].strip()
            if name in found:
                raise ValueError(f"{path.name}: section {name!r} appears twice")
            current = found[name] = []
        elif line.startswith("-- ===="):
            current = None
        elif current is not None:
            current.append(line)
    return {name: "\n".join(lines).strip() + "\n" for name, lines in found.items()}


def section(name: str) -> str:
    """The SQL text of one section; ``KeyError`` names a section the file does not hold."""
    try:
        return sections()[name]
    except KeyError:
        raise KeyError(f"{NOTIFY.name} has no section {name!r}") from None
