"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` with the
HTTP status (400 for bad input, 404 for an unknown model, 503 when the queue is full)."""

from __future__ import annotations

import re

from fastapi.responses import JSONResponse


def error_response(status: int, message: str, param: str | None = None,
                   kind: str = "invalid_request_error", headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, headers=headers, content={"error": {
        "message": message, "type": kind, "param": param, "code": status}})


def validation_error_response(errors: list[dict]) -> JSONResponse:
    """A pydantic validation failure as a 400 naming the first bad field (a body that is
    not JSON says so; a field of several allowed types lists what each wanted)."""
    if not errors:
        return error_response(400, "invalid request")
    first = errors[0]
    if first.get("type") == "json_invalid":
        where = first.get("loc", ("body", "?"))[-1]
        why = first.get("ctx", {}).get("error", "JSON decode error")
        return error_response(400, f"the request body is not valid JSON: {why} (at character {where})")
    field = _field(first.get("loc", ()))
    wanted = dict.fromkeys(e.get("msg", "invalid") for e in errors if _field(e.get("loc", ())) == field)
    message = "; or ".join(wanted)
    return error_response(400, f"{field or 'the request body'}: {message}", field)


def _field(loc) -> str | None:
    """The field's dotted path, without pydantic's union-member steps (`str`, `list[int]`)."""
    parts = [str(x) for x in loc if x != "body" and not _UNION_STEP.search(str(x))]
    return ".".join(parts) or None


_UNION_STEP = re.compile(r"^(str|int|float|bool|list|dict|none)$|\[")
