"""The checks every action route shares (trialflow.ui.access), on a real Starlette request."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import HTTPException
from starlette.requests import Request

from trialflow.limits import MAX_ACTION_BODY
from trialflow.ui.access import bounded_body


def _request(body: bytes) -> Request:
    async def receive() -> dict:
        return {"type": "http.request", "body": body, "more_body": False}

    scope = {"type": "http", "method": "PUT", "headers": [(b"content-length", str(len(body)).encode())]}
    return Request(scope, receive)


@pytest.mark.parametrize(
    ("body", "status", "said"),
    [
        (b'{"x": 1, "x": 2}', 422, "the request body: the key 'x' appears twice in one object; nothing changed"),
        (b'{"a": {"y": 1, "y": 1}}', 422, "the key 'y' appears twice"),  # at any depth
        (b"[" + b'{"k": 0, "k": 0},' * 3 + b"1]", 422, "the key 'k' appears twice"),
        (b"x" * (MAX_ACTION_BODY + 1), 413, "the request body is over"),
        (b"[" * (MAX_ACTION_BODY // 2), 422, "nested too deeply"),  # a RecursionError, not a 500
    ],
)
def test_a_body_past_its_bound_or_naming_a_key_twice_is_refused(body, status, said):
    with pytest.raises(HTTPException) as refused:
        asyncio.run(bounded_body(_request(body)))
    assert refused.value.status_code == status and said in str(refused.value.detail)


@pytest.mark.parametrize("body", [b"", b'{"x": 1, "y": {"x": 2}}', b"not json", b"[1, 2]"])
def test_other_bodies_pass_to_the_route(body):
    assert asyncio.run(bounded_body(_request(body))) is None  # FastAPI's reader answers what is not JSON
