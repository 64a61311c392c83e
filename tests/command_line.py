"""The real command line, parsed without running anything: a command's path and its options' values, as the
command function would receive them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import click

from aitax.cli import build_cli


def parse(argv: Sequence[str]) -> tuple[tuple[str, ...], dict]:
    """(the command's path, its parameters); a bad argv raises click's UsageError."""
    command: click.Command = build_cli()
    context = command.make_context("aitax", list(argv))
    path: list[str] = []
    # click keeps the subcommand's own argv apart until it is invoked
    while isinstance(command, click.Group) and (rest := [*context._protected_args, *context.args]):
        name, command, rest = command.resolve_command(context, rest)
        path.append(name)
        context = command.make_context(name, rest, parent=context)
    return tuple(path), context.params


def command_paths(command: click.Command | None = None, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and group's path, the root's first."""
    command = command or build_cli()
    yield prefix
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from command_paths(sub, (*prefix, name))


def find(path: Sequence[str]) -> click.Command:
    command: click.Command = build_cli()
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return command
