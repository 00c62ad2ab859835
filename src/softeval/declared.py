"""A file a user writes (a task file, a sweep file), declared once: pydantic models (``Declared``) say which
keys each of its mappings has, which are required, their types, ranges and choices, and how a wrong value of
each is refused (``said``). The file is checked through them (``check``), and ``softeval schema`` prints them
as JSON Schema (``json_schema``), which an editor checks the file against as it is typed (docs/reference/task-format.md,
docs/reference/sweeps.md).

pydantic's own error text is several lines in its own words; ``check`` takes the first mistake (an unknown
key before a missing one before a wrong value) as a ``Problem``, which the file's module words as the one line
every user error is (errors.UserError), naming the file and the key as the file writes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, WrapValidator, model_validator
from pydantic.json_schema import GenerateJsonSchema
from pydantic_core import PydanticCustomError

from softeval.errors import shown

# The kinds of Problem: keys a mapping does not have, required keys it lacks (pydantic's own "missing"), a value
# refused by its key's ``said`` or a rule's ``refusal``, and a refusal worded in full elsewhere (``worded``).
UNKNOWN, MISSING, SAID, WORDED = "unknown", "missing", "said", "worded"
_OURS = (UNKNOWN, MISSING, SAID, WORDED)
# Draft 7: what editors check YAML against (yaml-language-server ships draft 7 support; later drafts only in part).
# pydantic writes nothing a draft-7 validator does not read: its "$defs" are reached by JSON pointers.
DIALECT = "http://json-schema.org/draft-07/schema#"


class Declared(BaseModel):
    """One mapping of a user's file: its own keys only (an unknown one is refused with the keys there are, before
    anything else in the mapping is looked at), and strict types: no text read as a number, no true as 1."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)  # built when first used

    @model_validator(mode="before")
    @classmethod
    def _own_keys(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        unknown = [key for key in data if key not in cls.model_fields]
        if unknown:
            raise PydanticCustomError(UNKNOWN, "unknown keys", {"keys": unknown, "allowed": list(cls.model_fields)})
        return cls.as_read(data)

    @classmethod
    def as_read(cls, data: dict) -> dict:
        """The mapping as its keys are read (a file whose `key:` without a value means "not given" leaves it out)."""
        return data


def said(template: str) -> WrapValidator:
    """How a key refuses a value that breaks its declared type, range or choices, whichever rule it breaks:
    ``template`` with ``{key}`` (the key as the file writes it), ``{value}`` (the value: errors.shown) and
    ``{type}`` (its type's name). A declared mapping below the key words its own keys' refusals."""

    def check(value: Any, handler) -> Any:
        try:
            return handler(value)
        except ValidationError as err:
            if all(e["type"] in _OURS for e in err.errors()):
                raise  # each already worded by the mapping below
            raise refusal(template, value) from None

    return WrapValidator(check)


def _non_blank(text: str) -> str:
    if not text.strip():
        raise PydanticCustomError("blank", "blank")
    return text


# Text with something besides spaces. Checked in Python, not by a pydantic ``pattern``: its regex engine cannot
# read every Python string (lone surrogates, which a JSON escape can make), and then neither can its errors.
NonBlank = Annotated[str, AfterValidator(_non_blank), Field(json_schema_extra={"pattern": r"\S"})]


def refusal(template: str, value: Any = None) -> PydanticCustomError:
    """A rule's refusal (raised from a validator), worded as ``said`` words it."""
    return PydanticCustomError(SAID, "refused", {"template": template, "value": value})


def worded(message: str) -> PydanticCustomError:
    """A refusal worded in full by a check softeval already has (raised from a validator)."""
    return PydanticCustomError(WORDED, "refused", {"message": message})


@dataclass(frozen=True)
class Problem:
    """The first mistake in a file. ``at``: where, as pydantic locates it (keys, list positions, and after a
    position the tag of the union member it was read as). UNKNOWN and MISSING are at a mapping and name its
    ``keys`` (UNKNOWN: with the keys it ``allowed``); SAID and WORDED are at the value refused (``words``)."""

    kind: str
    at: tuple[str | int, ...]
    keys: tuple[str, ...] = ()
    allowed: tuple[str, ...] = ()
    value: Any = None
    template: str = ""

    def words(self, key: str) -> str:
        """The refusal, naming the key as ``key``."""
        if self.kind == WORDED:
            return self.template
        return self.template.format(key=key, value=shown(self.value), type=type(self.value).__name__)


class Refused(Exception):
    """A file its declaration refuses; ``problem``: the first mistake."""

    def __init__(self, problem: Problem):
        super().__init__(problem)
        self.problem = problem


D = TypeVar("D", bound=Declared)


def check(model: type[D], data: Any, **context: Any) -> D:
    """``data`` (a file as parsed) read as ``model``; ``context``: what its validators may ask
    (``info.context``). Refused with the first mistake."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as err:
        try:
            errors = err.errors()
        except UnicodeError:  # pydantic cannot list an error whose text is no Unicode (a lone surrogate)
            raise Refused(Problem(SAID, (), template="holds text that is not valid Unicode (a lone surrogate, "
                                                        "as a \\ud800 escape writes): write it as UTF-8")) from None
        raise Refused(first(errors)) from None


def first(errors: list[dict]) -> Problem:
    """The mistake a file's refusal names, of pydantic's errors: the first mapping's unknown keys, else the
    first mapping's missing keys, else the first value refused."""
    for kind in (UNKNOWN, MISSING):
        found = [e for e in errors if e["type"] == kind]
        if kind == UNKNOWN and found:
            ctx = found[0]["ctx"]
            return Problem(UNKNOWN, found[0]["loc"], tuple(ctx["keys"]), tuple(ctx["allowed"]))
        if found:
            at = found[0]["loc"][:-1]
            return Problem(MISSING, at, tuple(e["loc"][-1] for e in found if e["loc"][:-1] == at))
    error = errors[0]
    ctx = error.get("ctx", {})
    if error["type"] == SAID:
        return Problem(SAID, error["loc"], value=ctx["value"], template=ctx["template"])
    if error["type"] == WORDED:
        return Problem(WORDED, error["loc"], template=ctx["message"])
    # a key declared without ``said``: pydantic's one-line message, escaped for the template
    message = error["msg"].replace("{", "{{").replace("}", "}}")
    return Problem(SAID, error["loc"], value=error["input"], template=f"{{key}}: {message}, not {{type}} {{value}}")


class _Untitled(GenerateJsonSchema):
    """JSON Schema without a title per key (pydantic makes "N Tune" of n_tune): an editor shows the key itself."""

    def field_title_should_be_set(self, schema) -> bool:
        return False


def json_schema(model: type[Declared], title: str, description: str) -> dict[str, Any]:
    """``model`` as a JSON Schema document (draft 7)."""
    schema = model.model_json_schema(schema_generator=_Untitled)
    return {"$schema": DIALECT, **schema, "title": title, "description": description}
