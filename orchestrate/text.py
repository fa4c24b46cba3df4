"""Plain-text helpers shared by every printed table and message."""
from __future__ import annotations


def first_line(text: str) -> str:
    """Return the first non-empty line of ``text``."""
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Format rows as left-aligned columns under a header and a rule."""
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*header).rstrip(), "  ".join("-" * w for w in widths)]
    out += [fmt.format(*row).rstrip() for row in rows]
    return out


def grace_ran_out(node: str, still_running: list[str]) -> str:
    """The line that names a node whose stop grace ran out, so that it got SIGKILL: said by the
    launcher and by ``stop RUN`` as it happens, and in the run's summary."""
    ran = f"; what still ran: {'; '.join(still_running)}" if still_running else ""
    return f"{node} did not stop within its grace after SIGTERM, so it got SIGKILL{ran}"
