"""`Status` bodies shaped as the real API server writes them, and the error that carries one."""

from __future__ import annotations

from typing import Any

from tests.fakeapi.resources import ResourceType

Obj = dict[str, Any]

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status(code: int, reason: str, message: str, details: Obj | None = None) -> Obj:
    """A failure Status."""
    body: Obj = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def success(details: Obj) -> Obj:
    """The Status a delete answers: no message, reason or code, unlike failures."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
            "details": details}


class ApiError(Exception):
    """Raised inside the server; the HTTP layer answers `code` with `body`."""

    def __init__(self, body: Obj, headers: dict[str, str] | None = None) -> None:
        super().__init__(body.get("message", ""))
        self.body = body
        self.code = int(body["code"])
        self.headers = headers or {}


def _details(rt: ResourceType, name: str) -> Obj:
    d: Obj = {"name": name}
    if rt.group:
        d["group"] = rt.group
    d["kind"] = rt.plural
    return d


def not_found(rt: ResourceType, name: str) -> ApiError:
    return ApiError(status(404, "NotFound", f'{rt.qualified} "{name}" not found',
                           _details(rt, name)))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    return ApiError(status(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists',
                           _details(rt, name)))


def conflict(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(status(
        409, "Conflict",
        f'Operation cannot be fulfilled on {rt.qualified} "{name}": {why}',
        _details(rt, name),
    ))


STALE = ("the object has been modified; please apply your changes to the latest version and "
         "try again")


def invalid(rt: ResourceType, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """causes: (field, reason such as FieldValueInvalid, message without the field prefix)."""
    text = ", ".join(f"{field}: {msg}" for field, _, msg in causes)
    if len(causes) > 1:
        text = f"[{text}]"
    details: Obj = {"name": name}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = rt.kind
    details["causes"] = [
        {"reason": reason, "message": msg, "field": field} for field, reason, msg in causes
    ]
    kind = f"{rt.kind}.{rt.group}" if rt.group else rt.kind
    return ApiError(status(422, "Invalid", f'{kind} "{name}" is invalid: {text}', details))


def forbidden(rt: ResourceType, name: str, why: str) -> ApiError:
    return ApiError(status(403, "Forbidden", f'{rt.plural} "{name}" is forbidden: {why}',
                           _details(rt, name)))


def bad_request(message: str) -> ApiError:
    return ApiError(status(400, "BadRequest", message))


def expired(message: str) -> ApiError:
    return ApiError(status(410, "Expired", message))


def unauthorized() -> ApiError:
    return ApiError(status(401, "Unauthorized", "Unauthorized"))


def unknown_path() -> ApiError:
    return ApiError(status(404, "NotFound", "the server could not find the requested resource",
                           {}))


def method_not_allowed() -> ApiError:
    return ApiError(status(405, "MethodNotAllowed",
                           "the server does not allow this method on the requested resource", {}))


def injected(code: int) -> ApiError:
    """A failure as the real server (or a proxy in front of it) produces for that code."""
    reason = REASONS.get(code, "InternalError" if code >= 500 else "BadRequest")
    messages = {
        401: "Unauthorized",
        403: "forbidden: injected by the test",
        429: "Too many requests, please try again later.",
        500: "Internal error occurred: injected by the test",
        503: "the server is currently unable to handle the request",
        504: "the server was unable to return a response in the time allotted, "
             "but may still be processing the request",
    }
    headers = {"Retry-After": "1"} if code in (429, 503) else {}
    return ApiError(status(code, reason, messages.get(code, f"injected failure {code}"),
                           {"retryAfterSeconds": 1} if headers else None), headers)
