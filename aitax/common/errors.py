"""Errors a user can act on: the CLI prints them as one line and exits non-zero."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class UserError(Exception):
    """Bad input or environment: printed as `aitax: <message>` with exit status 2."""

    exit_code = 2


def invalid(error: ValidationError, where: str = "", names: Mapping[str, str] | None = None) -> UserError:
    """A model's first validation error as one line: `WHERE: FIELD VALUE: what is wrong`. `names` maps a field
    to what the user typed for it (a command-line option)."""
    first = error.errors()[0]
    path = ".".join(str(part) for part in first["loc"])
    field = (names or {}).get(path, path)
    # A value check says what was wrong in its own words; a type error shows the value it got.
    value = "" if first["type"] in ("missing", "value_error") else f" {repr(first['input'])[:80]}"
    message = first["msg"].removeprefix("Value error, ")
    subject = ": ".join(part for part in (where, f"{field}{value}") if part)  # a check of the whole has no field
    return UserError(f"{subject + ': ' if subject else ''}{message[0].lower()}{message[1:]}")
