"""JSON forms of what a unit returns (a model response, its stream events, a tool's
output) and the digests that make a unit's input document: what must be equal for a replay
to match, without what changes on every replay."""

from __future__ import annotations

import hashlib
import importlib
import json
from typing import Any

from agents.items import ModelResponse
from agents.usage import Usage
from openai.types.responses import ResponseOutputItem, ResponseStreamEvent
from pydantic import BaseModel, TypeAdapter
from pydantic_core import to_jsonable_python

__all__ = [
    "canonical",
    "decode_event",
    "decode_output",
    "decode_response",
    "digest",
    "encode_event",
    "encode_output",
    "encode_response",
    "jsonable",
]

_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseOutputItem)
_EVENT: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
_USAGE: TypeAdapter[Usage] = TypeAdapter(Usage)
_OUTPUT_MODULE = "agents."
"""A tool output rebuilt from its class name only when the class is the SDK's own."""


def jsonable(value: object) -> Any:
    """A JSON form equal for a live value and its recorded copy."""
    return to_jsonable_python(value, fallback=repr, bytes_mode="base64")


def canonical(value: object) -> str:
    """Compact JSON with sorted keys: equal values give equal text, hence equal digests."""
    return json.dumps(jsonable(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def digest(value: object) -> str:
    """SHA-256 of the canonical JSON of ``value`` without its null fields (a field left
    unset and one set to None say the same to the model)."""
    text = canonical(_without_nulls(jsonable(value)))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_nulls(one) for key, one in value.items() if one is not None}
    if isinstance(value, list):
        return [_without_nulls(one) for one in value]
    return value


def encode_response(response: ModelResponse) -> dict[str, Any]:
    return {
        "output": [_dump(item) for item in response.output],
        "usage": _USAGE.dump_python(response.usage, mode="json"),
        "response_id": response.response_id,
        "request_id": response.request_id,
        "raw_usage": response.raw_usage,
    }


def decode_response(data: dict[str, Any]) -> ModelResponse:
    return ModelResponse(
        output=[_ITEM.validate_python(item) for item in data["output"]],
        usage=_USAGE.validate_python(data["usage"]),
        response_id=data.get("response_id"),
        request_id=data.get("request_id"),
        raw_usage=data.get("raw_usage"),
    )


def encode_event(event: BaseModel) -> dict[str, Any]:
    return _dump(event)


def _dump(model: BaseModel) -> dict[str, Any]:
    """The fields the model was given (by their wire names): read back, it dumps the same."""
    return model.model_dump(mode="json", exclude_unset=True, by_alias=True)


def decode_event(data: dict[str, Any]) -> Any:
    return _EVENT.validate_python(data)


def encode_output(value: object) -> dict[str, Any]:
    """A tool's output: JSON data as itself, one of the SDK's output models by class, else
    its text (what the SDK would send the model)."""
    if isinstance(value, BaseModel) and type(value).__module__.startswith(_OUTPUT_MODULE):
        kind = f"{type(value).__module__}:{type(value).__qualname__}"
        return {"model": kind, "data": value.model_dump(mode="json")}
    if isinstance(value, list) and any(isinstance(one, BaseModel) for one in value):
        return {"list": [encode_output(one) for one in value]}
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return {"text": str(value)}
    return {"json": value}


def decode_output(data: dict[str, Any]) -> Any:
    if "model" in data:
        module, _, name = str(data["model"]).partition(":")
        if module.startswith(_OUTPUT_MODULE):
            kind = getattr(importlib.import_module(module), name, None)
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                return kind.model_validate(data["data"])
        return data["data"]
    if "list" in data:
        return [decode_output(one) for one in data["list"]]
    if "text" in data:
        return data["text"]
    return data.get("json")
