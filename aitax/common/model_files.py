"""YAML files of typed models (experiment specs, emulate's workload and driver files, designs, catalogs): a file
that cannot be read, is not YAML or holds a bad field is one line naming the file, and the field."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from aitax.common.errors import UserError, invalid

Model = TypeVar("Model", bound=BaseModel)


def read_yaml(path: Path, kind: str, error: type[UserError] = UserError) -> Any:
    """The document in `path`, a `kind` of file (named in the error)."""
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except OSError as failure:
        raise error(f"{path}: cannot read the {kind} ({failure.strerror or failure})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as failure:
        mark = getattr(failure, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise error(f"{path}: not valid YAML{where}: {getattr(failure, 'problem', failure)}") from None


def read_model(path: Path, model: type[Model], kind: str, defaults: Mapping[str, Any] | None = None) -> Model:
    """The `model` in `path`, its fields over `defaults` (what the file may leave out)."""
    return validate_model(read_yaml(path, kind), model, path, kind, defaults)


def validate_model(document: Any, model: type[Model], path: Path, kind: str,
                   defaults: Mapping[str, Any] | None = None) -> Model:
    """The `model` in a document read from `path`, its fields over `defaults`."""
    if not isinstance(document, dict):
        raise UserError(f"{path}: a {kind} is a mapping of fields, not {type(document).__name__}")
    try:
        return model.model_validate({**(defaults or {}), **document})
    except ValidationError as failure:
        raise invalid(failure, str(path)) from None
