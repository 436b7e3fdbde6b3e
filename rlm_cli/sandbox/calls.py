"""The worker's side of the model calls: one request per connection to the parent's model relay
(:func:`relay`), and how the arguments of ``llm_query`` become a prompt. Runs inside the
sandbox: the standard library and ``rlm_cli.protocol`` only."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable
from typing import Any

from rlm_cli import protocol


def to_text(value: Any) -> str:
    """Answer text for a FINAL value: str as is; lists/dicts as JSON; anything else ``str()``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, indent=2, default=str)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def relay(socket_path: str, token: str) -> Callable[[dict[str, Any]], str]:
    """The function that sends one request (a dict) to the parent's model relay and returns the
    answer text, or ``'Error: ...'`` (never raises).

    The token lives only in this closure, not in an attribute of the worker or of the helpers.
    That keeps it out of casual reach; it is no secret from model code, which can read its own
    memory, so the relay does not rely on it alone: it serves a token only to this worker's
    processes (see ``rlm_cli.models.relay``).
    """
    def request(message: dict[str, Any]) -> str:
        body = {k: v for k, v in message.items() if k != "type"}
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.connect(socket_path)
                # The hello first: the relay reads the request only once it knows the caller.
                protocol.send_message(sock, {"token": token, "type": message.get("type")})
                protocol.send_message(sock, body)
                reply = protocol.recv_message(sock)
        except (OSError, protocol.ProtocolError) as exc:
            return f"Error: the model relay could not be reached ({exc})"
        if reply.get("ok"):
            return str(reply.get("text", ""))
        return f"Error: {reply.get('error', 'unknown error')}"

    return request


#: A model name as given to llm_query (``openai/gpt-5.4-mini``): no spaces, one slash or more.
MODEL_NAME = re.compile(r"[\w.\-]+/[\w.:\-/]+")


def as_list(value: Any) -> list[Any]:
    """``value`` as a list: a list or tuple as it is, a ``str`` as one item, any other iterable listed."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        return [value]
    return list(value)


def payload_text(payload: Any) -> str:
    """The text of a sub-call prompt (a string, or the contents of a message list)."""
    if isinstance(payload, str):
        return payload
    return "\n".join(str(m.get("content", "")) for m in payload if isinstance(m, dict))


def prompt_payload(prompt: Any) -> Any:
    """What a sub-call sends for ``prompt``: a string or a chat message list as it is, anything
    else as text (:func:`to_text`)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt):
        return prompt  # a chat message list
    return to_text(prompt)
