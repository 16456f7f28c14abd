"""Hand-written OTLP/JSON spans for the tests (the live tests use real instrumentation)."""

from __future__ import annotations

import json
from typing import Any

T0 = 1_790_000_000_000_000_000  # 2026-09-21, in nanoseconds
MS = 1_000_000


def value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": value(x)} for k, x in v.items()]}}
    return {"stringValue": str(v)}


def attrs(mapping: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": value(v)} for k, v in mapping.items()]


def span(
    trace: str,
    span_id: str,
    parent: str = "",
    name: str = "span",
    attributes: dict[str, Any] | None = None,
    *,
    start_ms: int = 0,
    end_ms: int = 10,
    events: list[dict[str, Any]] | None = None,
    status: int = 0,
    message: str = "",
) -> dict[str, Any]:
    data = {
        "traceId": trace,
        "spanId": span_id,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(T0 + start_ms * MS),
        "endTimeUnixNano": str(T0 + end_ms * MS),
        "attributes": attrs(attributes or {}),
        "status": {"code": status, "message": message} if status else {},
    }
    if events:
        data["events"] = [
            {"name": e["name"], "timeUnixNano": str(T0), "attributes": attrs(e.get("attributes", {}))}
            for e in events
        ]
    return data


def request(*spans: dict[str, Any], service: str = "svc", scope: str = "tests") -> dict[str, Any]:
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": attrs({"service.name": service})},
                "scopeSpans": [{"scope": {"name": scope, "version": "1"}, "spans": list(spans)}],
            }
        ]
    }


def genai_agent_trace(trace: str, *, session: str = "conv-1", secret: str = "") -> list[dict[str, Any]]:
    """An agent span (GenAI 1.37), two chat spans and a tool span between them."""
    agent = "a0" * 8
    inputs = [{"role": "user", "parts": [{"type": "text", "content": "What is 2+3?"}]}]
    tool_call = {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 2, "b": 3}}
    return [
        span(
            trace,
            "c1" * 8,
            agent,
            "chat gpt-4o-mini",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.conversation.id": session,
                "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "You add numbers."}]),
                "gen_ai.input.messages": json.dumps(inputs),
                "gen_ai.output.messages": json.dumps(
                    [{"role": "assistant", "parts": [{"type": "text", "content": "Let me add."}, tool_call]}]
                ),
                "gen_ai.usage.input_tokens": 1000,
                "gen_ai.usage.output_tokens": 200,
                "gen_ai.response.finish_reasons": ["tool_calls"],
            },
            start_ms=1,
            end_ms=4,
        ),
        span(
            trace,
            "d1" * 8,
            agent,
            "execute_tool add",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "add",
                "gen_ai.tool.call.id": "c1",
                "gen_ai.tool.call.arguments": json.dumps({"a": 2, "b": 3}),
                "gen_ai.tool.call.result": f"5 {secret}".strip(),
            },
            start_ms=5,
            end_ms=6,
        ),
        span(
            trace,
            "c2" * 8,
            agent,
            "chat gpt-4o-mini",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.input.messages": json.dumps(
                    [
                        *inputs,
                        {"role": "assistant", "parts": [tool_call]},
                        {
                            "role": "tool",
                            "parts": [{"type": "tool_call_response", "id": "c1", "response": 5}],
                        },
                    ]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "2+3 is 5."}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
                "gen_ai.usage.input_tokens": 1300,
                "gen_ai.usage.output_tokens": 20,
            },
            start_ms=7,
            end_ms=9,
        ),
        span(
            trace,
            agent,
            "",
            "invoke_agent calc",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": "calc",
                "gen_ai.conversation.id": session,
            },
            start_ms=0,
            end_ms=10,
        ),
    ]
