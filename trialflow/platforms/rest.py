"""One HTTP request path for the REST platforms (OpenPAI, DLTS): retries, errors, no secrets.

Every call goes through :meth:`RestClient.request`, so a 429 or 503 is retried
the same way everywhere (its Retry-After honoured but capped, the attempts
bounded), a dropped connection is retried, and any other status becomes a
:class:`RestError` that says the method, the path and the service's own
message, with every configured secret replaced by ``***``. Query strings
never reach a message or a log line: DLTS takes the password as a query
parameter, and httpx logs each request's URL at INFO, so a filter on its
logger drops query strings.

A client is made per event loop (httpx's connections belong to the loop that
opened them): the worker's platform loop and the triggerer's each get one.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx
import tenacity

from trialflow.platforms.base import PlatformUnreachable

log = logging.getLogger(__name__)

#: Statuses that mean "later", not "no".
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: Bounded: at most this many attempts per request, and never a longer wait than this.
ATTEMPTS = 6
MAX_WAIT_SECONDS = 30.0


class RestError(RuntimeError):
    """A refused or failed call; ``status`` is None when no response came back."""

    def __init__(self, status: int | None, method: str, path: str, message: str):
        self.status = status
        self.method = method
        self.path = path
        self.service_message = message
        where = f"{method} {path}"
        super().__init__(f"{where} failed: {message}" if status is None else f"{where} answered {status}: {message}")


class RestUnreachable(RestError, PlatformUnreachable):
    """No answer came back through every attempt (refused, timed out): the service may come back."""


class _RetryLater(Exception):
    def __init__(self, response: httpx.Response, wait: float | None):
        self.response = response
        self.wait = wait


class _NoQueryInUrls(logging.Filter):
    """httpx logs ``HTTP Request: GET <url> "HTTP/1.1 200 OK"``; keep the URL, drop its query."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and record.args:
            record.args = tuple(_without_query(a) if isinstance(a, httpx.URL | str) else a for a in record.args)
        record.msg = _without_query(record.msg) if isinstance(record.msg, str) else record.msg
        return True


def _without_query(value: Any) -> Any:
    if isinstance(value, httpx.URL):
        return value.copy_with(query=None)
    if isinstance(value, str):
        return re.sub(r"(https?://[^\s?\"']*)\?[^\s\"']*", r"\1", value)
    return value


for _name in ("httpx", "httpcore"):
    if not any(isinstance(f, _NoQueryInUrls) for f in logging.getLogger(_name).filters):
        logging.getLogger(_name).addFilter(_NoQueryInUrls())


def retry_after(response: httpx.Response) -> float | None:
    """Retry-After in seconds (the HTTP-date form is read as "soon": a clock we do not share)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return 1.0


def _wait(state: tenacity.RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    backoff = min(MAX_WAIT_SECONDS, 0.5 * 2 ** (state.attempt_number - 1))
    if isinstance(exc, _RetryLater) and exc.wait is not None:
        return min(MAX_WAIT_SECONDS, exc.wait)
    return backoff


def service_message(response: httpx.Response, scrub: Callable[[str], str] = str) -> str:
    """The service's own words: JSON ``message``/``error``/``code``, else the body's start;
    secrets taken out by ``scrub`` before it is cut, so an echoed secret is not cut to its start."""
    try:
        body = response.json()
    except ValueError:
        return scrub(response.text.strip())[:300] or response.reason_phrase
    if isinstance(body, dict):
        for key in ("message", "error", "code"):
            value = body.get(key)
            if isinstance(value, dict):
                value = value.get("message") or value.get("code")
            if value:
                return scrub(str(value))[:300]
    return scrub(str(body))[:300]


class RestClient:
    """Requests to one service; ``secrets`` are scrubbed from every error it raises."""

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        secrets: Iterable[str] = (),
        timeout: float = 30.0,
        attempts: int = ATTEMPTS,
    ):
        self.base_url = base_url.rstrip("/")
        self.headers = dict(headers or {})
        self.params = dict(params or {})
        self.secrets = [s for s in secrets if s]
        self.timeout = timeout
        self.attempts = attempts
        self._clients: dict[int, httpx.AsyncClient] = {}

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        client = self._clients.get(id(loop))
        if client is None or client.is_closed:
            client = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=self.timeout)
            self._clients[id(loop)] = client
        return client

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | str | None = None,
        data: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        accept: Iterable[int] = (),
        idempotent: bool = True,
    ) -> httpx.Response:
        """The response when its status is 2xx or in ``accept``; RestError otherwise, after
        bounded retries of 429/502/503/504 and dropped connections. ``idempotent=False`` (a
        submit the service cannot recognise again): a connection that dropped after the request
        went out is not retried, since the service may have acted on it; only one that never
        connected is."""
        accepted = set(accept)
        tries = 0
        query = {**self.params, **(params or {})}

        async def once() -> httpx.Response:
            response = await self._client().request(
                method, path, json=json, content=content, data=data, headers=headers, params=query or None
            )
            if response.status_code in RETRY_STATUSES and response.status_code not in accepted:
                raise _RetryLater(response, retry_after(response))
            return response

        try:
            async for attempt in tenacity.AsyncRetrying(
                stop=tenacity.stop_after_attempt(self.attempts),
                wait=_wait,
                retry=tenacity.retry_if_exception_type(
                    (_RetryLater, httpx.TransportError if idempotent else httpx.ConnectError)
                ),
                before_sleep=self._log_retry(method, path),
                reraise=True,
            ):
                tries = attempt.retry_state.attempt_number
                with attempt:
                    response = await once()
        except _RetryLater as exc:
            raise self._error(exc.response, method, path) from None
        except httpx.TransportError as exc:
            reason = self.scrub(str(_without_query(str(exc))) or type(exc).__name__)
            raise RestUnreachable(None, method, path, f"{reason} (attempts: {tries})") from None
        if response.is_success or response.status_code in accepted:
            return response
        raise self._error(response, method, path)

    async def request_json(self, method: str, path: str, **kwargs: Any) -> Any:
        """:meth:`request`, then its JSON body; an answer that is not JSON is a RestError saying
        so (a proxy's HTML error page, a truncated body), never a traceback."""
        response = await self.request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            start = self.scrub(response.text.strip())[:120]
            raise RestError(response.status_code, method, path, f"expected JSON, got {start!r}") from None

    def _error(self, response: httpx.Response, method: str, path: str) -> RestError:
        return RestError(response.status_code, method, path, service_message(response, self.scrub))

    def _log_retry(self, method: str, path: str) -> Any:
        def before_sleep(state: tenacity.RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            why = f"status {exc.response.status_code}" if isinstance(exc, _RetryLater) else type(exc).__name__
            wait = state.next_action.sleep if state.next_action else 0.0
            log.warning("%s %s: %s; retrying in %.1f s (attempt %d)", method, path, why, wait, state.attempt_number)

        return before_sleep

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            await client.aclose()
