"""OpenAI-style error bodies: `{"error": {"message", "type", "param", "code"}}` with the
HTTP status (400 for bad input, 404 for an unknown model, 503 when the queue is full)."""

from __future__ import annotations

from fastapi.responses import JSONResponse


def error_response(status: int, message: str, param: str | None = None,
                   kind: str = "invalid_request_error", headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, headers=headers, content={"error": {
        "message": message, "type": kind, "param": param, "code": status}})


def validation_error_response(errors: list[dict]) -> JSONResponse:
    """A pydantic validation failure as a 400 naming the first bad field."""
    first = errors[0] if errors else {}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    field = ".".join(loc) or None
    message = first.get("msg", "invalid request")
    return error_response(400, f"{field}: {message}" if field else message, field)
