"""The inspector's guards: loopback-only addresses, Host checks, GET-only, strict headers.

The inspector has no authentication, so it must only ever be reachable from this machine:
it binds a loopback address, refuses requests whose Host header names anything else (a
DNS-rebinding page would send its own host name) and refuses every mutating method.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from .._errors import InvalidInput

__all__ = [
    "ADDRESS_ENV",
    "DEFAULT_ADDRESS",
    "SECURITY_HEADERS",
    "SecurityMiddleware",
    "UIAddress",
    "address_from_env",
    "parse_address",
]

ADDRESS_ENV = "ZINCIR_UI_ADDRESS"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8787
DEFAULT_ADDRESS = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
ALLOWED_METHODS = ("GET", "HEAD")

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", "default-src 'self'"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cross-origin-opener-policy", "same-origin"),
    ("cross-origin-resource-policy", "same-origin"),
)

Scope = MutableMapping[str, Any]
ASGIMessage = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[ASGIMessage]]
Send = Callable[[ASGIMessage], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class UIAddress:
    """A validated loopback address: ``host`` is what to bind, ``port`` the TCP port."""

    host: str
    port: int

    @property
    def url(self) -> str:
        """The address as a browser URL."""
        return f"http://{self.netloc}/"

    @property
    def netloc(self) -> str:
        """``host:port`` with IPv6 hosts in brackets, as in a Host header."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def allowed_hosts(self) -> frozenset[str]:
        """Host header values a legitimate local browser sends to this address."""
        names = {self.netloc}
        if self.host in ("127.0.0.1", "::1"):
            names.add(f"localhost:{self.port}")
        if self.port == 80:  # browsers omit the default port
            names |= {name.rsplit(":", 1)[0] for name in list(names)}
        return frozenset(name.lower() for name in names)


def _refuse(text: str, why: str) -> InvalidInput:
    return InvalidInput(
        f"{ADDRESS_ENV}={text!r} {why}; the inspector only listens on a loopback address "
        "(127.0.0.0/8, ::1 or localhost), e.g. 127.0.0.1:8787, 127.0.0.2:9000, [::1]:8787, "
        "localhost:8800 or :9000"
    )


def _loopback_host(host: str, text: str) -> str:
    if host.lower() == "localhost":
        return DEFAULT_HOST  # bind IPv4 loopback; "localhost" may resolve to either family
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise _refuse(text, "is not an IP address or localhost") from None
    if isinstance(ip, ipaddress.IPv6Address) and (ip.scope_id or ip.ipv4_mapped):
        raise _refuse(text, "is not a plain loopback address")
    if not ip.is_loopback:
        raise _refuse(text, "is not a loopback address")
    return ip.compressed


def parse_address(text: str | None) -> UIAddress:
    """Parse ``host:port``, ``[v6]:port``, ``host`` or ``:port``; refuse non-loopback hosts."""
    raw = (text or "").strip()
    if not raw:
        return UIAddress(DEFAULT_HOST, DEFAULT_PORT)
    host, port_text = raw, ""
    if raw.startswith("["):
        close = raw.find("]")
        if close < 0:
            raise _refuse(raw, "has an unclosed '['")
        host, rest = raw[1:close], raw[close + 1 :]
        if rest and not rest.startswith(":"):
            raise _refuse(raw, "has text after ']' that is not ':PORT'")
        port_text = rest[1:]
        if rest and not port_text:
            raise _refuse(raw, "has an empty port")
    elif raw.count(":") == 1:
        host, port_text = raw.split(":")
        if not port_text:
            raise _refuse(raw, "has an empty port")
    # two or more colons without brackets: a bare IPv6 address, no port
    port = DEFAULT_PORT
    if port_text:
        if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
            raise _refuse(raw, f"has port {port_text!r}, not a number from 1 to 65535")
        port = int(port_text)
    return UIAddress(_loopback_host(host or DEFAULT_HOST, raw), port)


def address_from_env() -> UIAddress:
    """The address from ``$ZINCIR_UI_ADDRESS``, else 127.0.0.1:8787."""
    return parse_address(os.environ.get(ADDRESS_ENV))


def _plain_response(status: int, text: str, extra: list[tuple[bytes, bytes]]) -> list[ASGIMessage]:
    body = text.encode("utf-8")
    headers = [
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode("ascii")),
        (b"cache-control", b"no-store"),
        *extra,
    ]
    return [
        {"type": "http.response.start", "status": status, "headers": headers},
        {"type": "http.response.body", "body": body},
    ]


class SecurityMiddleware:
    """ASGI guard: 403 for a foreign Host, 405 for any method but GET/HEAD, headers on all."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: frozenset[str]) -> None:
        self.app = app
        self.allowed_hosts = allowed_hosts
        self._headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in SECURITY_HEADERS]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return  # websockets and anything else: not served
        host = b""
        for name, value in scope.get("headers", ()):
            if name == b"host":
                host = value
                break
        if host.decode("latin-1").lower() not in self.allowed_hosts:
            reply = _plain_response(
                403,
                "Forbidden: this inspector only answers requests addressed to "
                f"{' or '.join(sorted(self.allowed_hosts))}.\n",
                self._headers,
            )
        elif scope["method"] not in ALLOWED_METHODS:
            reply = _plain_response(
                405,
                "Method Not Allowed: the inspector is read-only (GET and HEAD only).\n",
                [(b"allow", b"GET, HEAD"), *self._headers],
            )
        else:
            await self.app(scope, receive, self._with_headers(send))
            return
        for message in reply:
            await send(message)

    def _with_headers(self, send: Send) -> Send:
        async def wrapped(message: ASGIMessage) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", ())}
                extra = [pair for pair in self._headers if pair[0] not in present]
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        return wrapped
