"""Configuration: API key and base URL from arguments or the environment, custom headers, a
user-supplied HTTP client, timeouts; 401 and 403 as typed errors."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

import orca_client

from conftest import resolve

KEYS = {
    "ORCA_AUTH__API_KEYS": '[{ key = "sk-acme-0123456789", tenant = "acme" }]',
    "ORCA_AUTH__OPERATOR_KEYS": '["op-key-0123456789abc"]',
}


def make(flavour: str, *args, **kw):
    return orca_client.Client(*args, **kw) if flavour == "sync" else orca_client.AsyncClient(*args, **kw)


async def test_api_key_from_argument_or_environment(orca_factory, flavour, monkeypatch):
    orca = orca_factory(**KEYS)
    monkeypatch.delenv("ORCA_API_KEY", raising=False)
    monkeypatch.delenv("ORCA_URL", raising=False)

    anonymous = make(flavour, orca.url)
    with pytest.raises(orca_client.AuthenticationError) as err:
        await resolve(anonymous.usage.get())
    assert err.value.status == 401 and err.value.code == "unauthorized"
    await resolve(anonymous.close())

    keyed = make(flavour, orca.url, api_key="sk-acme-0123456789")
    assert (await resolve(keyed.usage.get())).tenant == "acme"
    await resolve(keyed.close())

    monkeypatch.setenv("ORCA_URL", orca.url)
    monkeypatch.setenv("ORCA_API_KEY", "sk-acme-0123456789")
    from_env = make(flavour)
    assert from_env.base_url == orca.url
    assert (await resolve(from_env.usage.get())).tenant == "acme"
    await resolve(from_env.close())

    operator = make(flavour, orca.url, api_key="op-key-0123456789abc")
    with pytest.raises(orca_client.PermissionDeniedError) as err:
        await resolve(operator.usage.get())
    assert err.value.status == 403
    await resolve(operator.close())


def test_default_base_url(monkeypatch):
    monkeypatch.delenv("ORCA_URL", raising=False)
    assert orca_client.Client().base_url == "http://127.0.0.1:8080"


def test_headers_and_own_http_client(orca):
    seen: list[httpx.Request] = []
    http = httpx.Client(event_hooks={"request": [seen.append]})
    with orca_client.Client(orca.url, api_key="k", headers={"X-Team": "docs"}, http_client=http) as client:
        client.models.list()
    assert seen[0].headers["x-team"] == "docs"
    assert seen[0].headers["authorization"] == "Bearer k"
    assert seen[0].headers["user-agent"].startswith("orca-client-python/")
    assert not http.is_closed, "a client passed in is the caller's to close"
    http.close()


async def test_timeout_raises_after_its_retries(flavour):
    # A listening socket that never answers: each try times out, then the error is raised.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    url = f"http://127.0.0.1:{silent.getsockname()[1]}"
    tries: list[float] = []

    def record(request):
        tries.append(time.monotonic())

    async def arecord(request):
        record(request)

    http = httpx.Client(event_hooks={"request": [record]}) if flavour == "sync" else httpx.AsyncClient(event_hooks={"request": [arecord]})
    client = make(flavour, url, timeout=0.3, max_retries=1, http_client=http)
    start = time.monotonic()
    with pytest.raises(orca_client.APITimeoutError):
        await resolve(client.usage.get())
    assert len(tries) == 2
    assert 0.6 <= time.monotonic() - start < 5
    await resolve(http.close() if flavour == "sync" else http.aclose())
    silent.close()
