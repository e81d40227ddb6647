"""Every operationId of openapi.yaml has an SDK method, on both clients."""

import functools
from pathlib import Path

import yaml

import orca_client
from orca_client.operations import NOT_COVERED, OPERATIONS

OPENAPI = Path(__file__).resolve().parents[3] / "openapi.yaml"


def operation_ids() -> set[str]:
    doc = yaml.safe_load(OPENAPI.read_text())
    ids = set()
    for item in doc["paths"].values():
        for method, op in item.items():
            if method in {"get", "put", "post", "delete", "patch"}:
                ids.add(op["operationId"])
    return ids


def test_every_operation_has_a_method():
    ids = operation_ids()
    assert len(ids) > 50
    missing = sorted(ids - OPERATIONS.keys() - NOT_COVERED.keys())
    assert not missing, f"operations of openapi.yaml with no SDK method (add them to operations.py): {missing}"
    stale = sorted((OPERATIONS.keys() | NOT_COVERED.keys()) - ids)
    assert not stale, f"operations.py names operations openapi.yaml no longer has: {stale}"


def test_every_method_exists_on_both_clients():
    for client in (orca_client.Client("http://127.0.0.1:9"), orca_client.AsyncClient("http://127.0.0.1:9")):
        for op, path in OPERATIONS.items():
            method = functools.reduce(getattr, path.split("."), client)
            assert callable(method), f"{op}: {path} is not a method of {type(client).__name__}"
        for kind in ("workflows", "agents", "tools", "functions"):
            resource = getattr(client, kind)
            for name in ("list", "get", "put", "delete", "diff", "versions.list", "versions.get", "versions.delete", "labels.set", "labels.delete"):
                assert callable(functools.reduce(getattr, name.split("."), resource)), f"{kind}.{name}"


def test_async_faces_have_the_sync_signatures():
    # The AsyncClient's resources are hand-kept async faces: same methods, same parameters.
    import inspect

    sync, aio = orca_client.Client("http://127.0.0.1:9"), orca_client.AsyncClient("http://127.0.0.1:9")
    paths = set(OPERATIONS.values()) | {"runs.stream", "runs.join", "runs.run"}
    for kind in ("workflows", "agents", "tools", "functions"):
        for name in ("list", "get", "put", "delete", "diff", "versions.list", "versions.get", "versions.delete", "labels.set", "labels.delete"):
            paths.add(f"{kind}.{name}")
    for path in sorted(paths):
        s = functools.reduce(getattr, path.split("."), sync)
        a = functools.reduce(getattr, path.split("."), aio)
        s_params = [(p.name, p.kind, p.default) for p in inspect.signature(s).parameters.values()]
        a_params = [(p.name, p.kind, p.default) for p in inspect.signature(a).parameters.values()]
        assert s_params == a_params, f"{path}: {s_params} != {a_params}"
        streams_or_pages = path in {
            "runs.stream", "runs.join", "runs.list", "runs.checkpoints", "sessions.list", "tasks.list", "memory.list"
        }
        assert inspect.iscoroutinefunction(a) != streams_or_pages, path
