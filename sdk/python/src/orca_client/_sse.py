"""Server-Sent Events framing, and turning a frame into a typed orca event."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, RootModel, TypeAdapter, ValidationError

from . import models
from ._errors import StreamError

_EVENT = TypeAdapter(models.Event)


class UnknownEvent(BaseModel):
    """An event this version of the SDK has no type for: a kind added to the server since, or a
    known kind whose `data` carries a value it does not know (a new status, say). It keeps its
    place in the stream (`seq`), and `data` as the server sent it."""

    model_config = ConfigDict(extra="allow")

    seq: int
    run_id: str
    kind: str
    ts: datetime
    step_id: str | None = None
    path: str | None = None
    data: dict[str, Any]


_UNKNOWN = TypeAdapter(UnknownEvent)


@dataclass
class Frame:
    """One dispatched SSE message: its `event`, `id` and joined `data` lines."""

    event: str
    data: str
    id: str | None


class FrameParser:
    """Feeds on lines (without their line ending) and returns a Frame at each blank line.

    A frame cut off by the end of the stream is never returned: only a blank line dispatches,
    so a connection dropped mid-event loses that event, which the reconnect asks for again.
    """

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._event = "message"
        self._data: list[str] = []
        self._id: str | None = None

    def feed(self, line: str) -> Frame | None:
        if line == "":
            if not self._data:
                self._reset()
                return None
            frame = Frame(self._event, "\n".join(self._data), self._id)
            self._reset()
            return frame
        if line.startswith(":"):
            return None  # a comment: keep-alive
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            self._id = value
        return None


def parse_event(value: Any) -> Any:
    """A JSON event (a dict, or the text of one) as the generated `Event` type.

    `Event` is a union on `kind`: the member for the event's kind is returned. An event that
    fits no member but is an event (a newer server's) is an `UnknownEvent`, so a stream goes on
    across server upgrades; only what is not an event at all is a `StreamError`.
    """
    try:
        event = _EVENT.validate_json(value) if isinstance(value, str) else _EVENT.validate_python(value)
    except (ValidationError, ValueError) as exc:
        try:
            return _UNKNOWN.validate_json(value) if isinstance(value, str) else _UNKNOWN.validate_python(value)
        except (ValidationError, ValueError):
            raise StreamError(f"unparsable event: {exc}") from exc
    while isinstance(event, RootModel):
        event = event.root
    return event


def frame_event(frame: Frame) -> Any:
    return parse_event(frame.data)
