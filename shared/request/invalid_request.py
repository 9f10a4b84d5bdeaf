"""The one error a bad request raises, naming the field and the value at fault."""

from __future__ import annotations

from typing import Any


class InvalidRequestError(ValueError):
    """A request (prompt or sampling parameter) the engine refuses before allocating anything.

    `.field` names the parameter (`"input_ids"`, `"max_new_tokens"`, `"top_p"`, ...) and
    `.value` holds the offending value; the message names both.
    """

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"invalid {field}={_short_repr(value)}: {reason}")

    def __reduce__(self):
        return (type(self), (self.field, self.value, self.reason))


def _short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
