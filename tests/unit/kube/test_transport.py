"""Transport: proxy resolution (once, like client-go) and what goes on the wire."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from msop.kube.transport import Transport, env_proxy, split_proxy_credentials

API = "https://10.96.0.1:443"


@pytest.mark.parametrize(
    ("env", "url", "want"),
    [
        ({}, API, None),
        ({"HTTPS_PROXY": "http://p:3128"}, API, "http://p:3128"),
        ({"https_proxy": "http://low:1", "HTTPS_PROXY": "http://up:2"}, API, "http://low:1"),
        ({"HTTP_PROXY": "http://p:3128"}, API, None),  # https needs https_proxy
        ({"HTTP_PROXY": "http://p:3128"}, "http://api.local:8080", "http://p:3128"),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": "*"}, API, None),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": "10.0.0.0/8"}, API, None),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": "192.168.0.0/16"}, API, "http://p"),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": "10.96.0.1"}, API, None),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": "10.96.0.1:443"}, API, None),
        ({"HTTPS_PROXY": "http://p", "no_proxy": ".svc"}, "https://kubernetes.default.svc", None),
        ({"HTTPS_PROXY": "http://p", "no_proxy": "svc"}, "https://kubernetes.default.svc", None),
        ({"HTTPS_PROXY": "http://p", "no_proxy": "fault.svc"}, "https://kubernetes.default.svc",
         "http://p"),
        ({"HTTPS_PROXY": "http://p", "NO_PROXY": " , bad/cidr ,"}, API, "http://p"),
    ],
)  # fmt: skip
def test_env_proxy(env: dict[str, str], url: str, want: str | None) -> None:
    assert env_proxy(url, env) == want


def test_proxy_credentials_are_split_off() -> None:
    assert split_proxy_credentials(None) == (None, None)
    assert split_proxy_credentials("http://p:3128") == ("http://p:3128", None)
    url, auth = split_proxy_credentials("http://al%40ice:s%3Acret@p.corp:3128/")
    assert url == "http://p.corp:3128/"
    assert auth == "Basic " + base64.b64encode(b"al@ice:s:cret").decode()
    url, auth = split_proxy_credentials("http://bob@[fd00::1]:8080")
    assert url == "http://[fd00::1]:8080" and auth == "Basic " + base64.b64encode(b"bob:").decode()


def _configuration(host: str, proxy: str | None = None) -> Configuration:
    c = Configuration()
    c.host = host
    c.proxy = proxy
    return c


async def test_proxy_is_resolved_once_kubeconfig_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:3128")
    monkeypatch.delenv("https_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    from_env = Transport(_configuration(API))
    from_kubeconfig = Transport(_configuration(API, proxy="http://kubeconfig-proxy:1"))
    credentials = _configuration(API, proxy="http://u:p@p:1")
    credentials.proxy_headers = {"X-Keep": "1"}
    with_credentials = Transport(credentials)
    monkeypatch.setenv("NO_PROXY", "10.96.0.1")
    exempt = Transport(_configuration(API))
    try:
        assert from_env.proxy == "http://env-proxy:3128" and from_env.proxy_headers is None
        assert with_credentials.proxy == "http://p:1"
        assert with_credentials.proxy_headers == {
            "X-Keep": "1",
            "Proxy-Authorization": "Basic " + base64.b64encode(b"u:p").decode(),
        }
        assert from_kubeconfig.proxy == "http://kubeconfig-proxy:1"
        assert exempt.proxy is None
        # The session never looks at the environment per request.
        assert from_env.session.trust_env is False
    finally:
        for t in (from_env, from_kubeconfig, with_credentials, exempt):
            await t.close()


async def test_what_goes_on_the_wire(unused_tcp_port: int) -> None:
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "type": request.headers.get("Content-Type"),
                "agent": request.headers.get("User-Agent"),
                "body": await request.read(),
            }
        )
        return web.json_response({"ok": True}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", unused_tcp_port)
    await site.start()
    transport = Transport(_configuration(f"http://127.0.0.1:{unused_tcp_port}/"))
    timeout = aiohttp.ClientTimeout(total=5)
    try:
        body = {"metadata": {"name": "a b"}, "spec": [1, 2]}
        headers = {"Content-Type": "application/json", "User-Agent": "msop/test"}
        resp = await transport.request(
            "POST", "/api/v1/pods", query={"labelSelector": "a=b,c in (d)"},
            headers=headers, body=body, client_timeout=timeout,
        )  # fmt: skip
        assert resp.status == 201 and await resp.json() == {"ok": True}
        resp.release()
        resp = await transport.request(
            "PATCH", "/x", query=None, headers={"Content-Type": "text/plain"},
            body=b"raw bytes", client_timeout=timeout,
        )  # fmt: skip
        resp.release()
        resp = await transport.request(
            "GET", "/y", query={}, headers={}, body=None, client_timeout=timeout
        )
        resp.release()
    finally:
        await transport.close()
        await runner.cleanup()
    post, patch, get = seen
    assert post["method"] == "POST" and post["agent"] == "msop/test"
    assert post["path"] == "/api/v1/pods" and post["query"] == {"labelSelector": "a=b,c in (d)"}
    assert post["body"] == b'{"metadata":{"name":"a b"},"spec":[1,2]}'
    assert json.loads(post["body"]) == body
    assert patch["body"] == b"raw bytes" and patch["type"] == "text/plain"
    assert (get["method"], get["path"], get["query"], get["body"]) == ("GET", "/y", {}, b"")
