"""`--help` that never cuts an option's name: typer's option table lets rich shrink every column evenly when the
terminal is narrow, so at 80 columns `--max-memory-fraction` printed as `--max-memory-fra…`. The table typer builds
(typer.rich_utils, 0.29) is given this subclass, which keeps the columns of option names whole (`no_wrap`); rich then
narrows the metavar and help columns, whose words wrap (or fold, when one is longer than the column). Installed only
when the command line asks for help: importing typer.rich_utils brings rich's markdown, syntax and traceback modules
(~40 ms of every command's start-up)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from rich.columns import Columns
from rich.table import Table
from rich.text import Text


class _WholeNamesTable(Table):
    """A rich Table whose columns of option names (cells like `--tp`, `-m`) never wrap or shorten."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*renderables, **kwargs)
        for column, cell in zip(self.columns, renderables, strict=False):
            text = cell.plain if isinstance(cell, Text) else cell if isinstance(cell, str) else ""
            if text.startswith("-") and " " not in text:
                column.no_wrap = True
                column.min_width = max(column.min_width or 0, len(text))
            else:  # a long word of the help (a path, a default) folds instead of ending in "…"
                for part in cell.renderables if isinstance(cell, Columns) else [cell]:
                    if isinstance(part, Text):
                        part.overflow = "fold"


HELP_FLAGS = frozenset({"--help", "-h"})


def prints_help(args: Sequence[str], groups: Collection[str]) -> bool:
    """Whether typer may print help for the command line `args`: a help flag, no command, or a command group's name
    alone (`groups`)."""
    return not args or (len(args) == 1 and args[0] in groups) or not HELP_FLAGS.isdisjoint(args)


def keep_option_names_whole(args: Sequence[str], groups: Collection[str]) -> None:
    """Make typer's help tables keep option names whole (idempotent), where `args` can print help (`prints_help`)."""
    if not prints_help(args, groups):
        return
    import typer.rich_utils

    typer.rich_utils.Table = _WholeNamesTable  # type: ignore[misc]
