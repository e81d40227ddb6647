"""Run bodies the tests share."""

APPROVE_SCHEMA = {"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"}}}


def approval_run(orchestration: str = "fixed") -> dict:
    """A run that waits on one user_input step, then ends with the answer as its output."""
    return {
        "input": "publish the notes",
        "orchestration": orchestration,
        "plan": {
            "steps": [{"id": "approve", "kind": "user_input", "input": {"prompt": "Publish?", "schema": APPROVE_SCHEMA}}],
            "output": "{{ steps.approve.output }}",
        },
    }


def echo_run(words: int = 40) -> dict:
    """A simple run the offline model answers by echoing its input word by word."""
    return {"input": " ".join(f"word{i}" for i in range(words)), "orchestration": "simple"}
