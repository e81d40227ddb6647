"""The main README's walk-through in Python runs as printed, against a real server."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

README = Path(os.environ.get("ORCA_REPO_ROOT", Path(__file__).resolve().parents[3])) / "README.md"


def readme_block(heading: str) -> str:
    """The first ```python block after `heading` in the README."""
    text = README.read_text()
    after = text[text.index(heading) :]
    found = re.search(r"```python\n(.*?)```", after, re.S)
    assert found, f"no python block after {heading!r}"
    return found.group(1)


def test_the_readme_walk_through_runs_as_printed(orca) -> None:
    code = readme_block("### The same in Python")
    assert "http://127.0.0.1:8080" in code
    code = code.replace("http://127.0.0.1:8080", orca.url)
    # The walk-through's shell line: `mkdir -p workspace && echo ... > workspace/hello.txt`.
    (orca.workdir / "workspace").mkdir(exist_ok=True)
    (orca.workdir / "workspace" / "hello.txt").write_text("Hello from the workspace\n")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), {})
    lines = out.getvalue().splitlines()
    assert "The result is 30." in lines, lines
    assert lines[-1] == "cancelled", lines
    assert any(line.endswith(" succeeded") for line in lines), "the listed run"
    joined = [line for line in lines if re.fullmatch(r"\d+ \w+", line)]
    assert joined and joined[0].startswith("4 "), "join(after=3) starts at event 4"


SDK_README = Path(__file__).resolve().parents[1] / "README.md"


def test_every_method_the_sdk_readme_calls_exists_on_both_clients() -> None:
    """A renamed method or a typo in sdk/python/README.md fails here, not in a user's hands."""
    import orca_client

    blocks = re.findall(r"```python\n(.*?)```", SDK_README.read_text(), re.S)
    assert len(blocks) >= 8, "the README's examples"
    calls = set()
    for block in blocks:
        compile(block, str(SDK_README), "exec")  # each example is valid Python
        calls |= set(re.findall(r"\bclient\.((?:\w+\.)*\w+)\(", block))
    assert {"runs.create", "runs.stream", "workflows.versions.list", "health"} <= calls
    for cls in (orca_client.Client, orca_client.AsyncClient):
        client = cls(base_url="http://127.0.0.1:9")
        for call in sorted(calls):
            target: object = client
            for part in call.split("."):
                assert hasattr(target, part), f"{cls.__name__}: client.{call} (the README) does not exist"
                target = getattr(target, part)
            assert callable(target), f"client.{call}"
