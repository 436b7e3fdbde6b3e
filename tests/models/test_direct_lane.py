"""The model host's direct lane (``rlm_cli.models.direct``) against litellm itself, over real HTTP.

The lane sends a self-hosted model's first requests with the openai SDK while litellm imports;
its contract is that nothing downstream can tell: the same request body on the wire, the same
``Answer`` for the same reply, the same classification of a failure, and every case it does not
answer wholly handed over to litellm. Each case here sends the same scripted reply through both
(``LocalBackend``: litellm in this process) and compares.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from rlm_cli.models.backend import LocalBackend
from rlm_cli.models.direct import DirectLane, HandOver
from rlm_cli.models.failures import (
    RemoteCallError,
    classify_error,
    describe_error,
    failure_words,
    retry_after_s,
    short_error,
    transport_failure,
)
from tests.support.fake_llm import NOT_JSON, FakeLLM, Reply

MESSAGES = [{"role": "system", "content": "You answer."}, {"role": "user", "content": "Which file? é ✓"}]


@pytest.fixture(scope="module")
def backend() -> LocalBackend:
    """litellm, imported once for the module."""
    local = LocalBackend()
    local.load()
    return local


@pytest.fixture(scope="module")
def lane(backend: LocalBackend) -> DirectLane:
    """The lane, its openai SDK loaded (litellm for a stream without usage: the module's)."""
    direct = DirectLane(backend.load)
    direct.load()
    assert direct.ready.is_set()
    return direct


@pytest.fixture
def server() -> Iterator[FakeLLM]:
    fake = FakeLLM()
    yield fake
    fake.close()


def _request(server: FakeLLM, name: str, **extra: Any) -> dict[str, Any]:
    return {"model": f"openai/{name}", "messages": MESSAGES, "timeout": 10.0,
            "sampling": {"max_tokens": 256, "temperature": 0.0}, "api_base": server.url, "api_key": "sk-test",
            **extra}


def _both(server: FakeLLM, lane: DirectLane, backend: LocalBackend, name: str, reply: Any, *,
          stream: bool = False) -> tuple[Any, Any, list[str], list[str]]:
    """The same scripted reply through the lane, then through litellm: (lane answer, litellm
    answer, lane pieces, litellm pieces); the bodies both sent are compared here."""
    server.script(name, reply, reply)
    pieces: tuple[list[str], list[str]] = ([], [])
    got_lane = lane.complete(_request(server, name), stream=stream, on_piece=pieces[0].append, deadline=None)
    got_litellm = backend.complete(_request(server, name), stream=stream, on_piece=pieces[1].append)
    sent = server.requests_for(name) if hasattr(server, "requests_for") else [
        r for r in server.requests if r.get("model") == name]
    assert len(sent) == 2
    assert json.dumps(sent[0], sort_keys=True) == json.dumps(sent[1], sort_keys=True)
    return got_lane, got_litellm, pieces[0], pieces[1]


@pytest.mark.parametrize(("name", "reply", "stream"), [
    ("plain", Reply("FINAL(heapq.py)", prompt_tokens=321, completion_tokens=7), False),
    ("cached", Reply("ok", prompt_tokens=2000, completion_tokens=3, cached_tokens=1536), False),
    ("streamed", Reply("a reply in several pieces " * 8, stream_chunk_chars=16), True),
    ("streamed-cached", Reply("ok then", cached_tokens=1024, prompt_tokens=1500), True),
    ("no-usage-chunk", Reply("counted by litellm " * 5, stream_usage=False), True),
    ("plain-to-stream", Reply("a plain body", no_stream=True), True),
    ("html-to-stream", Reply(raw_body=NOT_JSON), True),
])
def test_the_same_reply_gives_the_same_answer_and_body(server: FakeLLM, lane: DirectLane, backend: LocalBackend,
                                                       name: str, reply: Reply, stream: bool) -> None:
    got_lane, got_litellm, pieces_lane, pieces_litellm = _both(server, lane, backend, name, reply, stream=stream)
    assert got_lane.to_dict() == got_litellm.to_dict()
    assert pieces_lane == pieces_litellm
    if name.endswith("to-stream"):
        assert got_lane.not_streamed
    else:
        assert got_lane.text and got_lane.input_tokens > 0 and got_lane.output_tokens > 0
    assert got_lane.cost_usd is None and not got_lane.priced  # a model litellm does not know: no price


def test_a_400_litellm_answers_itself_is_handed_to_it(server: FakeLLM, lane: DirectLane) -> None:
    body = b'{"error": {"message": "Conversation roles must alternate user/assistant/user/assistant"}}'
    server.script("alternate", Reply(raw_body=body, status=400))
    with pytest.raises(HandOver):
        lane.complete(_request(server, "alternate"), stream=False, on_piece=None, deadline=None)
    assert len([r for r in server.requests if r.get("model") == "alternate"]) == 1  # litellm sends it again


def _carried(exc: BaseException) -> RemoteCallError:
    d = describe_error(exc)
    return RemoteCallError(d["message"], class_names=d["names"], status_code=d["status"], headers=d["headers"],
                           causes=d["causes"])


FAILURES = [
    ("auth", Reply(status=401), False),
    ("gone", Reply(status=404), True),
    ("too-long", Reply(raw_body=b'{"error": {"message": "This model\'s maximum context length is 8192 tokens. '
                                b'However, you requested 9000 tokens", "code": "context_length_exceeded"}}',
                       status=400), False),
    ("rejected", Reply(raw_body=b'{"error": {"message": "bad thing"}}', status=400), True),
    ("not-json", Reply(raw_body=NOT_JSON), False),
    ("no-choices", Reply("x", no_choices=True), False),
    ("no-choices-stream", Reply("x", no_choices=True), True),
    ("no-content", Reply("x", no_content=True), False),
    ("no-content-stream", Reply("x", no_content=True), True),
    ("dropped", Reply("x", drop=True), False),
    ("dropped-stream", Reply("x", drop=True), True),
    ("cut-body", Reply("hello", cut_after=10), False),
    ("busy", Reply(status=429, headers={"retry-after": "3"}), False),
    ("busy-stream", Reply(status=429, headers={"retry-after-ms": "1500"}), True),
    ("down", Reply(status=500), False),
    ("unavailable", Reply(status=503, headers={"retry-after": "1"}), True),
    ("slow", Reply("late", delay_s=3.0), False),
    ("cut", Reply("a stream that breaks " * 20, stream_chunk_chars=8, stream_cut_after=3), True),
    ("refused", None, False),
]


@pytest.mark.parametrize(("name", "reply", "stream"), FAILURES)
def test_failures_it_raises_are_classified_as_litellms(server: FakeLLM, lane: DirectLane, backend: LocalBackend,
                                                       name: str, reply: Reply, stream: bool) -> None:
    request = _request(server, name, timeout=1.0)
    if reply is None:  # a port nobody listens on
        import socket

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            request["api_base"] = f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
    else:
        server.script(name, reply, reply)
    errors = []
    for send in (lambda r, **k: lane.complete(r, **k, deadline=None), backend.complete):
        with pytest.raises(Exception) as caught:  # noqa: PT011 - compared below, whatever the class
            send(request, stream=stream, on_piece=lambda _p: None)
        assert not isinstance(caught.value, HandOver)
        errors.append(_carried(caught.value))
    if reply is not None:
        assert len([r for r in server.requests if r.get("model") == name]) == 2  # once each: never sent again
    lane_error, litellm_error = errors
    assert classify_error(lane_error) == classify_error(litellm_error)
    if "EmptyReplyError" not in lane_error.class_names and transport_failure(lane_error) not in (
            "connect", "no_answer", "dropped"):
        # else: a 200 without a reply, which the client's own check raises on both paths, or a
        # connection refused, dropped or cut (the lane raises the SDK's error, which litellm would
        # call a 500, MidStreamFallbackError for a stream): the same classification and words
        assert lane_error.status_code == litellm_error.status_code
        assert lane_error.class_names == litellm_error.class_names
        assert short_error(lane_error) == short_error(litellm_error)
    assert transport_failure(lane_error) == transport_failure(litellm_error)
    assert failure_words(lane_error, "m", server.url, 1.0) == failure_words(litellm_error, "m", server.url, 1.0)
    assert retry_after_s(lane_error) == retry_after_s(litellm_error)


def test_which_requests_it_takes(server: FakeLLM, lane: DirectLane, backend: LocalBackend) -> None:
    assert lane.knows("openai/my-local-model") and lane.facts("openai/my-local-model") == (None, False)
    assert backend.facts("openai/my-local-model") == (None, False)  # what litellm says of it
    for known in ("openai/gpt-4o-mini", "openai/GPT-4o-Mini", "openai/gpt-5-mini", "openai/ft:gpt-4o-mini:org::id", "gpt-4o-mini",
                  "anthropic/claude-sonnet-4-5", "ollama/qwen2.5-coder", "openai/"):
        assert not lane.knows(known), known
        assert lane.facts(known) is None
    base = _request(server, "m")
    assert lane.takes(base, None)
    assert not lane.takes(base, "router.yaml")  # a Router group: litellm's
    assert not lane.takes({**base, "sampling": {"max_tokens": 8, "top_p": 0.5}}, None)  # a field litellm may map
    assert not lane.takes({**base, "tools": []}, None)  # a field a later rlm adds
    assert not lane.takes({k: v for k, v in base.items() if k != "api_key"}, None)  # no key: litellm's error


def test_a_stream_without_usage_is_estimated_as_litellm_does_without_litellm(server: FakeLLM,
                                                                           backend: LocalBackend) -> None:
    """llama-cpp-python's server sends no usage chunk; the lane estimates the tokens as litellm
    does (cl100k_base, per-message arithmetic), without waiting for litellm's import."""
    asked: list[str] = []
    lane = DirectLane(lambda: asked.append("litellm") or backend.load())
    lane.load()
    long = [{"role": "system", "content": "You answer. " * 300},
            *[{"role": r, "content": f"turn {i}: ```repl\nprint(len(context))\n``` <|endoftext|> é"}
              for i, r in enumerate(["user", "assistant"] * 4)], {"role": "user", "content": "go on"}]
    reply = Reply("a reply of some length, with code ```repl\nx = 1\n``` " * 20, stream_usage=False)
    server.script("estimate", reply, reply)
    request = {**_request(server, "estimate"), "messages": long}
    got = lane.complete(request, stream=True, on_piece=None, deadline=None)
    assert asked == []  # litellm was not needed
    want = backend.complete(request, stream=True, on_piece=None)
    assert (got.input_tokens, got.output_tokens) == (want.input_tokens, want.output_tokens)
    assert got.input_tokens > 1000
