"""A recording fake OpenAI-compatible server on 127.0.0.1 (no network), the ground truth of
the conformance tests: it stores every request exactly as received (the bytes and the
parsed body) and what it answered, and answers

- ``POST /v1/chat/completions``, streamed (server-sent events) or not;
- ``POST /v1/responses`` (the Responses API), streamed or not.

What it answers is scripted: a list of ``Answer`` (one a request, in order), or by default
"call each offered tool once, then answer": while the conversation holds no tool result
since its last user message, it asks for the first tool offered with arguments built
from the tool's JSON schema; otherwise it answers ``ANSWER``. Usage figures are fixed, so
tests can check them.
"""

from __future__ import annotations

import json
import socketserver
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROMPT_TOKENS, COMPLETION_TOKENS, CACHED_TOKENS = 100, 20, 10
ANSWER = "The answer is 5."
_SAMPLES = {"integer": 2, "number": 3, "string": "Paris", "boolean": True, "array": [], "object": {}}


@dataclass
class Answer:
    """One scripted answer: a text, tool calls ``(name, arguments text)``, or both."""

    text: str | None = None
    tool_calls: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Recorded:
    """One request as received, and the answer sent (as a message: text, tool calls)."""

    path: str
    raw: bytes
    body: dict[str, Any]
    answer: dict[str, Any] = field(default_factory=dict)

    @property
    def api(self) -> str:
        return "responses" if self.path.endswith("/responses") else "chat.completions"


def _tools(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, parameters schema) of each function tool a request offers, in both APIs."""
    found = []
    for tool in body.get("tools") or ():
        function = tool.get("function", tool)
        if isinstance(function, dict) and function.get("name"):
            found.append((function["name"], function.get("parameters") or {}))
    return found


def sample_arguments(schema: dict[str, Any]) -> str:
    """Arguments satisfying a tool's JSON schema (its required properties, else all)."""
    properties = schema.get("properties") or {}
    names = schema.get("required") or list(properties)
    values: dict[str, Any] = {}
    for name in names:
        kind = (properties.get(name) or {}).get("type", "string")
        value = _SAMPLES.get(kind if isinstance(kind, str) else "string", "x")
        if kind == "integer":  # 2, 3, 4…: an "add" tool gets 2 and 3
            value += sum(1 for v in values.values() if type(v) is int)
        values[name] = value
    return json.dumps(values)


def _answered_since_user(body: dict[str, Any]) -> bool:
    """Whether a tool result came after the conversation's last user message."""
    if "messages" in body:
        roles = [m.get("role") for m in body["messages"]]
    else:
        items = body.get("input")
        items = items if isinstance(items, list) else [{"role": "user"}]
        roles = ["tool" if i.get("type") == "function_call_output" else i.get("role") for i in items]
    for role in reversed(roles):
        if role in ("tool", "tool-response"):
            return True
        if role == "user":
            return False
    return False


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, script: list[Answer | Callable[[dict[str, Any]], Answer]] | None = None):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[Recorded] = []
        self.script = list(script) if script is not None else None
        self.lock = threading.Lock()
        self.counter = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_port}/v1"

    def next_answer(self, body: dict[str, Any]) -> Answer:
        if self.script is not None:
            answer = self.script.pop(0) if self.script else Answer(text=ANSWER)
            # A function of the request: the answer to requests a framework sends at once
            # (parallel tool calls), whose order of arrival is the threads' business.
            return answer(body) if callable(answer) else answer
        tools = _tools(body)
        if tools and not _answered_since_user(body):
            name, schema = tools[0]
            return Answer(tool_calls=[(name, sample_arguments(schema))])
        return Answer(text=ANSWER)


class _Handler(BaseHTTPRequestHandler):
    server: FakeServer

    def log_message(self, *args: object) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802 — the http.server API
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.loads(raw)
        with self.server.lock:
            answer = self.server.next_answer(body)
            self.server.counter += 1
            n = self.server.counter
            record = Recorded(self.path, raw, body)
            self.server.requests.append(record)
        calls = [
            {"id": f"call_{n}_{k}", "type": "function", "function": {"name": name, "arguments": arguments}}
            for k, (name, arguments) in enumerate(answer.tool_calls)
        ]
        record.answer = {"role": "assistant", "content": answer.text, "tool_calls": calls}
        if self.path.rstrip("/").endswith("/responses"):
            self._responses(body, answer, calls, n)
        else:
            self._chat(body, answer, calls, n)

    def _usage_chat(self) -> dict[str, Any]:
        return {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": COMPLETION_TOKENS,
            "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            "prompt_tokens_details": {"cached_tokens": CACHED_TOKENS},
        }

    def _chat(self, body: dict[str, Any], answer: Answer, calls: list[dict[str, Any]], n: int) -> None:
        reason = "tool_calls" if calls else "stop"
        head = {"id": f"chatcmpl-{n}", "created": int(time.time()), "model": body.get("model", "")}
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": answer.text}
            if calls:
                message["tool_calls"] = calls
            self._json(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": reason}],
                    "usage": self._usage_chat(),
                }
            )
            return
        chunks: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        text = answer.text or ""
        chunks += [{"content": text[i : i + 5]} for i in range(0, len(text), 5)]
        for k, call in enumerate(calls):
            arguments = call["function"]["arguments"]
            chunks.append(
                {
                    "tool_calls": [
                        {
                            "index": k,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": ""},
                        }
                    ]
                }
            )
            chunks += [
                {"tool_calls": [{"index": k, "function": {"arguments": arguments[i : i + 4]}}]}
                for i in range(0, len(arguments), 4)
            ]
        events = [
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": d, "finish_reason": None}],
            }
            for d in chunks
        ]
        events.append(
            {
                **head,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": reason}],
            }
        )
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                {**head, "object": "chat.completion.chunk", "choices": [], "usage": self._usage_chat()}
            )
        self._sse([(None, e) for e in events] + [(None, "[DONE]")])

    def _responses(self, body: dict[str, Any], answer: Answer, calls: list[dict[str, Any]], n: int) -> None:
        output: list[dict[str, Any]] = []
        if answer.text is not None:
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
                }
            )
        for call in calls:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{call['id']}",
                    "call_id": call["id"],
                    "name": call["function"]["name"],
                    "arguments": call["function"]["arguments"],
                    "status": "completed",
                }
            )
        response = {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "completed",
            "model": body.get("model", ""),
            "output": output,
            # The real API echoes the request's instructions (instrumentations read them here).
            "instructions": body.get("instructions"),
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": body.get("tools") or [],
            "usage": {
                "input_tokens": PROMPT_TOKENS,
                "input_tokens_details": {"cached_tokens": CACHED_TOKENS},
                "output_tokens": COMPLETION_TOKENS,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS,
            },
        }
        if not body.get("stream"):
            self._json(response)
            return
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": started},
            {"type": "response.in_progress", "response": started},
        ]
        for index, item in enumerate(output):
            if item["type"] == "message":
                text = item["content"][0]["text"]
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "status": "in_progress", "content": []},
                    }
                )
                part = {"type": "output_text", "text": "", "annotations": []}
                events.append(
                    {
                        "type": "response.content_part.added",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": part,
                    }
                )
                for i in range(0, len(text), 5):
                    events.append(
                        {
                            "type": "response.output_text.delta",
                            "item_id": item["id"],
                            "output_index": index,
                            "content_index": 0,
                            "delta": text[i : i + 5],
                            "logprobs": [],
                        }
                    )
                events.append(
                    {
                        "type": "response.output_text.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "text": text,
                        "logprobs": [],
                    }
                )
                events.append(
                    {
                        "type": "response.content_part.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "content_index": 0,
                        "part": item["content"][0],
                    }
                )
            else:
                events.append(
                    {
                        "type": "response.output_item.added",
                        "output_index": index,
                        "item": {**item, "arguments": "", "status": "in_progress"},
                    }
                )
                events.append(
                    {
                        "type": "response.function_call_arguments.delta",
                        "item_id": item["id"],
                        "output_index": index,
                        "delta": item["arguments"],
                    }
                )
                events.append(
                    {
                        "type": "response.function_call_arguments.done",
                        "item_id": item["id"],
                        "output_index": index,
                        "arguments": item["arguments"],
                    }
                )
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        events.append({"type": "response.completed", "response": response})
        for number, event in enumerate(events):
            event["sequence_number"] = number
        self._sse([(e["type"], e) for e in events])

    def _json(self, answer: dict[str, Any]) -> None:
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, Any]]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, event in events:
            data = event if isinstance(event, str) else json.dumps(event)
            head = f"event: {name}\n" if name else ""
            self.wfile.write(f"{head}data: {data}\n\n".encode())
            self.wfile.flush()
        self.close_connection = True


# How often a serving thread looks for ``shutdown()``: socketserver's default, 0.5 s, made
# every test that stopped a server wait 0.4 s on average for nothing (a select of 10 ms
# costs nothing measurable).
POLL_INTERVAL = 0.01


def serve_in_a_thread(server: socketserver.BaseServer) -> threading.Thread:
    """Serve ``server`` from a daemon thread that ``server.shutdown()`` stops at once."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL}, daemon=True
    )
    thread.start()
    return thread


def start(script: list[Answer] | None = None) -> FakeServer:
    server = FakeServer(script)
    serve_in_a_thread(server)
    return server
