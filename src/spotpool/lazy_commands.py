"""A command group whose sub-commands are imported only when one runs.

`spotpool --help` and `spotpool notice-agent` (on every spot instance) must not pay for kopf,
Pulumi and the deploy program. The group lists every sub-command from a table (name, where it
lives, its one-line help); `get_command` imports the one asked for, so anything that walks the
commands (the flag reference, shell completion) still sees each real command with its options.
Only the group's own help page shows the table's lines without importing.
(Iterating `group.commands.items()` imports every command: what a walker of the tree wants.)
"""

from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass
from importlib import import_module
from typing import Any, ClassVar

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class LazyCommand:
    """`target` is "module:attribute": a typer.Typer (a group) or a command function."""

    target: str
    help: str
    command_class: str | None = None  # "module:attribute" of a TyperCommand subclass


def _attribute(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(import_module(module), attribute)


def load(name: str, entry: LazyCommand) -> Any:
    """The real click command of `entry`, named `name`."""
    found = _attribute(entry.target)
    if isinstance(found, typer.Typer):
        # A group even with one command (get_command would collapse it: `operator run`).
        command = typer.main.get_group(found)
        command.name = name
        return command
    single = typer.Typer(add_completion=False)  # the root has the completion options
    cls = _attribute(entry.command_class) if entry.command_class else None
    single.command(name, cls=cls)(_as_callable(found))
    return typer.main.get_command(single)


def _as_callable(found: Any) -> Callable[..., Any]:
    if not callable(found):
        raise TypeError(f"{found!r} is neither a typer app nor a command function")
    return found  # type: ignore[no-any-return]


class LazyCommands(MutableMapping[str, Any]):
    """The group's `commands` mapping: its names without importing; a command on access (so
    code that walks `group.commands` sees real commands, and typer's "Did you mean …?" every
    name)."""

    def __init__(self, eager: MutableMapping[str, Any], lazy: dict[str, LazyCommand]) -> None:
        self._eager = dict(eager)
        self._lazy = dict(lazy)

    def __getitem__(self, name: str) -> Any:
        if name not in self._eager and name in self._lazy:
            self._eager[name] = load(name, self._lazy[name])
        return self._eager[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._eager[name] = command

    def __delitem__(self, name: str) -> None:
        self._lazy.pop(name, None)
        del self._eager[name]

    def __contains__(self, name: object) -> bool:
        return name in self._eager or name in self._lazy

    def __iter__(self) -> Iterator[str]:
        yield from self._eager
        yield from (name for name in self._lazy if name not in self._eager)

    def __len__(self) -> int:
        return len(set(self._eager) | set(self._lazy))

    def help_line(self, name: str) -> str | None:
        """The table's line for a command not imported yet (None once it is)."""
        return None if name in self._eager else self._lazy[name].help


class LazyGroup(TyperGroup):
    """A TyperGroup with `lazy_commands` (name → LazyCommand) after its own commands."""

    lazy_commands: ClassVar[dict[str, LazyCommand]] = {}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = LazyCommands(self.commands, self.lazy_commands)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # the names only: nothing imported

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        commands = self.commands
        if self._listing and isinstance(commands, LazyCommands) and cmd_name in commands:
            line = commands.help_line(cmd_name)
            if line is not None:  # the group's help page: the table's line, nothing imported
                return typer.core.TyperCommand(name=cmd_name, help=line)
        return commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
