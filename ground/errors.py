"""Errors a user can act on: the CLI prints them as one line and exits non-zero."""


class UserError(Exception):
    """Bad input or environment: printed as `aitax: <message>` with exit status 2."""

    exit_code = 2
