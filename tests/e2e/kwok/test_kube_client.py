"""KubeClient against the real API server: verbs, errors, auth, watch, metrics."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s_client

from msop.kube import (
    CONFIGMAPS,
    NAMESPACES,
    PODS,
    ApiError,
    ApiTimeout,
    ApiUnavailable,
    KubeClient,
    is_already_exists,
    is_conflict,
    is_forbidden,
    is_invalid,
    is_not_found,
    jsonpatch,
)
from msop.kube.objects import parse_time
from msop.metrics import REGISTRY


@pytest.fixture
async def client(cluster: Any) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_config(cluster.kubeconfig, user_agent="msop-e2e-client") as c:
        yield c


def cm(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": data,
    }


def parked_pod(name: str, namespace: str) -> dict[str, Any]:
    # No scheduler serves "none", so nothing but the test writes this pod's status.
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"a": "1"}},
        "spec": {
            "schedulerName": "none",
            "containers": [{"name": "c", "image": "busybox"}],
        },
    }


async def test_crud_and_error_reasons(client: KubeClient, namespace: str) -> None:
    created = await client.create(CONFIGMAPS, cm("x", namespace, a="1"))
    assert created["metadata"]["uid"] and created["data"] == {"a": "1"}
    with pytest.raises(ApiError) as exc:
        await client.create(CONFIGMAPS, cm("x", namespace))
    assert is_already_exists(exc.value) and exc.value.status == 409

    got = await client.get(CONFIGMAPS, "x", namespace)
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    got["data"]["a"] = "2"
    replaced = await client.replace(CONFIGMAPS, got)
    assert replaced["data"] == {"a": "2"}
    with pytest.raises(ApiError) as exc:
        await client.replace(CONFIGMAPS, got)  # stale resourceVersion
    assert is_conflict(exc.value)

    bad = cm("Not_Valid", namespace)
    with pytest.raises(ApiError) as exc:
        await client.create(CONFIGMAPS, bad)
    assert is_invalid(exc.value) and exc.value.body is not None

    with pytest.raises(ApiError) as exc:
        await client.delete(CONFIGMAPS, "x", namespace, uid_precondition="not-the-uid")
    assert is_conflict(exc.value)
    assert await client.delete(CONFIGMAPS, "x", namespace) is None
    with pytest.raises(ApiError) as exc:
        await client.get(CONFIGMAPS, "x", namespace)
    assert is_not_found(exc.value) and exc.value.reason == "NotFound"


@pytest.mark.parametrize("text", ["MS_WORKER_NUM 2 -> 3", "quoted <nil> & co", "café"])
async def test_json_patch_test_matches_strings_the_api_server_escapes(
    client: KubeClient, namespace: str, text: str
) -> None:
    """The API server compares a ``test`` value by its encoded bytes: only the encoding of
    msop.kube.jsonpatch matches what it stores for such strings."""
    await client.create(CONFIGMAPS, cm("esc", namespace, msg=text))

    def ops(value: str) -> list[dict[str, Any]]:
        return [
            {"op": "test", "path": "/data/msg", "value": value},
            {"op": "add", "path": "/data/seen", "value": "yes"},
        ]

    with pytest.raises(ApiError) as refused:  # Python's default encoding: never equal
        await client.patch(CONFIGMAPS, "esc", json.dumps(ops(text)), namespace, patch_type="json")
    assert refused.value.status == 422
    out = await client.patch(CONFIGMAPS, "esc", jsonpatch.dumps(ops(text)), namespace,
                             patch_type="json")  # fmt: skip
    assert out["data"] == {"msg": text, "seen": "yes"}
    with pytest.raises(ApiError):  # and a changed value still fails the test
        await client.patch(CONFIGMAPS, "esc", jsonpatch.dumps(ops(text + "!")), namespace,
                           patch_type="json")  # fmt: skip


async def test_patch_types(client: KubeClient, namespace: str) -> None:
    await client.create(CONFIGMAPS, cm("p", namespace, a="1"))
    out = await client.patch(CONFIGMAPS, "p", {"data": {"b": "2"}}, namespace)
    assert out["data"] == {"a": "1", "b": "2"}
    ops = [{"op": "remove", "path": "/data/a"}]
    out = await client.patch(CONFIGMAPS, "p", ops, namespace, patch_type="json")
    assert out["data"] == {"b": "2"}
    applied = cm("p", namespace, c="3")
    out = await client.patch(
        CONFIGMAPS, "p", applied, namespace, patch_type="apply", field_manager="e2e", force=True
    )
    assert out["data"]["c"] == "3"
    await client.create(PODS, parked_pod("sp", namespace))
    out = await client.patch(
        PODS, "sp", {"metadata": {"labels": {"b": "2"}}}, namespace, patch_type="strategic"
    )
    assert out["metadata"]["labels"] == {"a": "1", "b": "2"}


async def test_status_subresource(client: KubeClient, namespace: str) -> None:
    pod = await client.create(PODS, parked_pod("st", namespace))
    pod["status"]["message"] = "hello"
    pod["spec"]["containers"][0]["image"] = "ignored-by-status-put"
    out = await client.replace_status(PODS, pod)
    assert out["status"]["message"] == "hello"
    assert out["spec"]["containers"][0]["image"] == "busybox"
    with pytest.raises(ApiError) as exc:
        await client.replace_status(PODS, pod)  # stale resourceVersion
    assert is_conflict(exc.value)
    out = await client.patch(
        PODS, "st", {"status": {"message": "patched"}}, namespace, subresource="status"
    )
    assert out["status"]["message"] == "patched"


async def test_delete_returns_object_pending_on_finalizer(
    client: KubeClient, namespace: str
) -> None:
    body = cm("f", namespace)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    created = await client.create(CONFIGMAPS, body)
    pending = await client.delete(
        CONFIGMAPS,
        "f",
        namespace,
        propagation_policy="Background",
        uid_precondition=created["metadata"]["uid"],
    )
    assert pending is not None and pending["metadata"]["deletionTimestamp"]
    await client.patch(CONFIGMAPS, "f", {"metadata": {"finalizers": None}}, namespace)
    with pytest.raises(ApiError) as exc:
        await client.get(CONFIGMAPS, "f", namespace)
    assert is_not_found(exc.value)


async def test_list_all_paginates(client: KubeClient, namespace: str) -> None:
    for i in range(7):
        await client.create(CONFIGMAPS, cm(f"l{i}", namespace))
    page = await client.list(CONFIGMAPS, namespace, limit=2)
    assert len(page["items"]) == 2 and page["metadata"]["continue"]
    everything = await client.list_all(CONFIGMAPS, namespace, limit=2)
    names = {o["metadata"]["name"] for o in everything["items"]}
    assert {f"l{i}" for i in range(7)} <= names
    assert everything["metadata"]["resourceVersion"] and "continue" not in everything["metadata"]
    selected = await client.list(CONFIGMAPS, namespace, field_selector="metadata.name=l3")
    assert [o["metadata"]["name"] for o in selected["items"]] == ["l3"]
    cluster_scoped = await client.list(NAMESPACES, field_selector=f"metadata.name={namespace}")
    assert len(cluster_scoped["items"]) == 1


async def test_watch_streams_events_and_detects_silence(client: KubeClient, namespace: str) -> None:
    listed = await client.list(CONFIGMAPS, namespace)
    rv = listed["metadata"]["resourceVersion"]
    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        stream = client.watch(CONFIGMAPS, namespace, resource_version=rv, read_timeout=1.0)
        async with contextlib.aclosing(stream):
            async for event in stream:
                if event["type"] != "BOOKMARK":
                    seen.append((event["type"], event["object"]["metadata"]["name"]))

    task = asyncio.create_task(consume())
    await client.create(CONFIGMAPS, cm("w", namespace))
    await client.patch(CONFIGMAPS, "w", {"data": {"x": "1"}}, namespace)
    await client.delete(CONFIGMAPS, "w", namespace)
    with pytest.raises(ApiTimeout):
        # Nothing else happens, so the 1 s read timeout fires: the server's own timeout
        # would end the stream without an error. 60 s only guards against a hang.
        await asyncio.wait_for(task, 60)
    assert seen == [("ADDED", "w"), ("MODIFIED", "w"), ("DELETED", "w")]


async def test_watch_ends_at_server_timeout(
    cluster: Any, client: KubeClient, namespace: str
) -> None:
    """The stream ends without an error when the server ends it at ``timeoutSeconds``,
    not before: the API server's audit log says it held the watch for that long."""
    listed = await client.list(CONFIGMAPS, namespace)
    stream = client.watch(
        CONFIGMAPS,
        namespace,
        resource_version=listed["metadata"]["resourceVersion"],
        timeout_seconds=1,
    )

    async def drain() -> list[dict[str, Any]]:
        return [e async for e in stream]

    events = await asyncio.wait_for(drain(), 60)  # a hang guard: the server ends it
    assert all(e["type"] == "BOOKMARK" for e in events)

    def completed() -> list[dict[str, Any]]:
        return [
            e
            for e in audit_entries(cluster, "msop-e2e-client")
            if e.get("verb") == "watch"
            and e.get("stage") == "ResponseComplete"
            and (e.get("objectRef") or {}).get("namespace") == namespace
            and "timeoutSeconds=1" in e.get("requestURI", "")
        ]

    (entry,) = await until("the watch's ResponseComplete in the audit log", completed)
    assert entry["responseStatus"]["code"] == 200, entry
    # Judged from the API server's own times (MicroTime, microseconds): the watch lasted
    # the server's 1 s timeout. 1 ms allows for truncating the two times to microseconds.
    received = parse_time(entry["requestReceivedTimestamp"])
    ended = parse_time(entry["stageTimestamp"])
    assert received and ended, entry
    held = (ended - received).total_seconds()
    assert held >= 1 - 0.001, f"the server ended the watch {held:.3f}s after it began"


async def test_connection_failure_is_unavailable_and_counted() -> None:
    configuration = k8s_client.Configuration()
    configuration.host = "https://127.0.0.1:1"
    async with KubeClient.from_configuration(configuration) as c:
        before = (
            REGISTRY.get_sample_value(
                "rest_client_requests_total", {"code": "<error>", "method": "GET", "host": c.host}
            )
            or 0.0
        )
        with pytest.raises(ApiUnavailable):
            await c.get(CONFIGMAPS, "x", "default")
        with pytest.raises(ApiUnavailable):
            await anext(c.watch(CONFIGMAPS, resource_version="0"))
        after = REGISTRY.get_sample_value(
            "rest_client_requests_total", {"code": "<error>", "method": "GET", "host": c.host}
        )
        assert after == before + 2


async def test_bearer_token_configuration(cluster: Any, namespace: str) -> None:
    cluster.kubectl("create", "serviceaccount", "reader", "-n", namespace)
    cluster.kubectl(
        "create", "role", "cm-reader", "--verb=get,list", "--resource=configmaps", "-n", namespace
    )
    cluster.kubectl(
        "create",
        "rolebinding",
        "cm-reader",
        "--role=cm-reader",
        f"--serviceaccount={namespace}:reader",
        "-n",
        namespace,
    )
    token = cluster.kubectl("create", "token", "reader", "-n", namespace).stdout.strip()
    raw = json.loads(cluster.kubectl("config", "view", "--raw", "--minify", "-o", "json").stdout)
    server = raw["clusters"][0]["cluster"]
    configuration = k8s_client.Configuration()
    configuration.host = server["server"]
    with tempfile.NamedTemporaryFile("wb", suffix=".crt", delete=False) as ca:
        if "certificate-authority-data" in server:
            ca.write(base64.b64decode(server["certificate-authority-data"]))
            configuration.ssl_ca_cert = ca.name
        elif "certificate-authority" in server:
            configuration.ssl_ca_cert = server["certificate-authority"]
        else:
            configuration.verify_ssl = False
    configuration.api_key = {"BearerToken": f"Bearer {token}"}
    cluster.kubectl("create", "configmap", "readable", "-n", namespace)
    async with KubeClient.from_configuration(configuration, user_agent="msop-e2e-token") as c:
        listed = await c.list(CONFIGMAPS, namespace)
        assert any(o["metadata"]["name"] == "readable" for o in listed["items"])
        with pytest.raises(ApiError) as exc:
            await c.create(CONFIGMAPS, cm("nope", namespace))
        assert is_forbidden(exc.value)


async def test_user_agent_reaches_the_audit_log(cluster: Any, client: KubeClient) -> None:
    await client.get(NAMESPACES, "default")
    await until(
        "an audit entry with userAgent msop-e2e-client",
        lambda: audit_entries(cluster, "msop-e2e-client"),
    )


def audit_entries(cluster: Any, user_agent: str) -> list[dict[str, Any]]:
    """The API server's audit log entries for requests with this user agent."""
    if not cluster.audit_log.exists():
        return []
    out = []
    for line in cluster.audit_log.read_text(errors="replace").splitlines():
        if f'"userAgent":"{user_agent}"' not in line:
            continue
        with contextlib.suppress(ValueError):  # a line being written right now
            out.append(json.loads(line))
    return out


async def until(what: str, check: Callable[[], Any], within: float = 60) -> Any:
    """Poll ``check()`` until it returns something truthy. ``within`` is a hang guard,
    not a bound on how long it takes."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if found := check():
            return found
        await asyncio.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


class ConnectProxy:
    """A minimal HTTP CONNECT proxy: records each tunnel's target and its
    Proxy-Authorization header, then pipes bytes both ways."""

    def __init__(self) -> None:
        self.tunnels: list[tuple[str, str | None]] = []
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            method, target, _ = head[0].split(" ", 2)
            fields = (line.partition(":") for line in head[1:] if line)
            headers = {k.strip().lower(): v.strip() for k, _, v in fields}
            self.tunnels.append((target, headers.get("proxy-authorization")))
            if method != "CONNECT":
                writer.write(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n")
                return
            host, _, port = target.rpartition(":")
            up_reader, up_writer = await asyncio.open_connection(host.strip("[]"), int(port))
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while chunk := await src.read(65536):
            dst.write(chunk)
            await dst.drain()
    except OSError:
        pass
    finally:
        dst.close()


async def test_https_proxy_from_the_environment_carries_requests_and_watches(
    cluster: Any, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTPS_PROXY (with credentials) is honoured for requests and watches; NO_PROXY
    naming the API server's address sends them direct."""
    proxy = ConnectProxy()
    await proxy.start()
    for name in ("https_proxy", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://ops:s%40fe@127.0.0.1:{proxy.port}")
    try:
        async with await KubeClient.from_config(cluster.kubeconfig) as c:
            api = c.host
            listed = await c.list(CONFIGMAPS, namespace)
            await c.create(CONFIGMAPS, cm("via-proxy", namespace, a="1"), namespace)
            rv = listed["metadata"]["resourceVersion"]
            async with contextlib.aclosing(
                c.watch(CONFIGMAPS, namespace, resource_version=rv)
            ) as events:
                event = await asyncio.wait_for(anext(events), 60)  # a hang guard
            assert event["type"] == "ADDED" and event["object"]["metadata"]["name"] == "via-proxy"
        assert proxy.tunnels, "nothing went through the proxy"
        credentials = "Basic " + base64.b64encode(b"ops:s@fe").decode()
        assert set(proxy.tunnels) == {(api, credentials)}, proxy.tunnels

        monkeypatch.setenv("NO_PROXY", api.rsplit(":", 1)[0])
        before = len(proxy.tunnels)
        async with await KubeClient.from_config(cluster.kubeconfig) as c:
            await c.get(CONFIGMAPS, "via-proxy", namespace)
        assert len(proxy.tunnels) == before, "NO_PROXY named the API server, yet it was proxied"
    finally:
        await proxy.stop()
