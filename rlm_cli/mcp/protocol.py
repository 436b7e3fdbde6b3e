"""The protocol thread of ``rlm mcp``: the MCP Python SDK's lowlevel ``Server`` on its
``stdio_server`` (anyio), which frames the JSON-RPC messages on stdin and stdout. It answers
``initialize`` and ``tools/list`` at once, checks a ``tools/call``'s arguments, queues it
(``calls.Calls``), relays its progress (``notifications/progress``, with a heartbeat) until its
result comes, and cancels it when the client does or leaves.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rlm_cli import __version__
from rlm_cli.errors import UsageError
from rlm_cli.mcp.calls import Call, Calls, Result
from rlm_cli.mcp.tools import TOOLS, check_arguments
from rlm_cli.output.answer import json_text, json_value

if TYPE_CHECKING:
    from rlm_cli.output.ui import UI

INSTALL_HINT = "pip install '/path/to/rlm[mcp]', or the wheel with [mcp]"
#: Seconds without news after which a call in progress sends a progress message anyway (clients
#: that reset their request timeout on progress then keep waiting through a long model call).
HEARTBEAT_S = 10.0


def require_sdk() -> None:
    """Check that the MCP Python SDK (version 2) can be imported.

    Raises:
        UsageError: it is missing, or of another major version (exit 2).
    """
    try:
        import mcp_types  # noqa: F401  (only version 2 of the SDK has it)
        from mcp.server.lowlevel import Server  # noqa: F401
        from mcp.server.stdio import stdio_server  # noqa: F401
    except ImportError:
        raise UsageError("rlm mcp needs the MCP Python SDK (version 2), which is not installed",
                         hint=INSTALL_HINT) from None


def _tool_list() -> Any:
    import mcp_types as types

    return types.ListToolsResult(tools=[
        types.Tool(name=t["name"], title=t["title"], description=t["description"], input_schema=t["input_schema"],
                   output_schema=t["output_schema"], annotations=types.ToolAnnotations(**t["annotations"]))
        for t in TOOLS])


def _call_result(result: Result) -> Any:
    import mcp_types as types

    if result.error is not None or result.payload is None:
        return types.CallToolResult(content=[types.TextContent(type="text", text=result.error or "error")],
                                    is_error=True)
    payload = json_value(result.payload)  # a lone surrogate in an answer: U+FFFD, not a serialisation error
    return types.CallToolResult(content=[types.TextContent(type="text", text=json_text(payload, line=True).rstrip())],
                                structured_content=payload)


def instructions(paths: list[str]) -> str:
    """The server's ``instructions`` (shown to the client's model)."""
    return (f"rlm answers questions about a local corpus ({', '.join(paths)}), however large, without putting it "
            "in your context. ask runs a Recursive Language Model over it (model calls: seconds to minutes) and "
            "returns the answer with the lines it rests on (path:start-end); grep and search find lines and "
            "chunks at once, without a model; corpus_info says what the corpus holds. Calls run one at a time, "
            "in order; files edited between calls are read again.")


async def _serve_protocol(calls: Calls, paths: list[str]) -> None:
    import asyncio

    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    async def on_list_tools(ctx: Any, params: Any) -> Any:
        return _tool_list()

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        args = dict(params.arguments or {})
        if params.name == OVERSIZED:  # a request the reader refused (BoundedLines)
            return _call_result(Result(error=oversized_error(int(args.get("bytes") or 0))))
        problem = check_arguments(params.name, args)
        if problem is not None:
            return _call_result(Result(error=problem))
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

        def post(item: tuple[str, Any]) -> None:
            try:
                loop.call_soon_threadsafe(inbox.put_nowait, item)
            except RuntimeError:  # the protocol loop is gone (the client left)
                pass

        call = Call(ctx.request_id, params.name, args, post)
        ahead = calls.put(call)
        sent, done, started = 0, False, loop.time()
        last = f"queued behind {ahead} call(s)" if ahead else ""

        async def note(message: str) -> None:
            nonlocal sent
            sent += 1
            try:
                await ctx.session.report_progress(sent, None, message)
            except Exception:  # noqa: BLE001 - a progress note that cannot go is no reason to fail
                pass

        try:
            if ahead:
                await note(last)
            while True:
                try:
                    kind, value = await asyncio.wait_for(inbox.get(), HEARTBEAT_S)
                except TimeoutError:  # quiet for a while (a long model call, a long queue): say so
                    await note(f"{last or 'working'} ({loop.time() - started:.0f} s so far)")
                    continue
                if kind == "result":
                    done = True
                    return _call_result(value)
                last = str(value)
                await note(last)
        finally:
            if not done:
                calls.cancel(call)

    server = Server("rlm", version=__version__, instructions=instructions(paths), on_list_tools=on_list_tools,
                    on_call_tool=on_call_tool)
    with BoundedLines.from_stdin() as stdin:
        async with stdio_server(stdin=stdin) as (read, write):  # type: ignore[arg-type]
            await server.run(read, write, server.create_initialization_options())


#: The longest protocol message read whole, in bytes: a question of ``tools.MAX_QUESTION_CHARS``
#: characters fits, each escaped in JSON. A longer one is read no further than its first
#: :data:`HEAD_BYTES` and answered with an error (:data:`OVERSIZED`), so a 50 MB argument never
#: takes the server's memory (its copies left the server 450 MB larger for good).
MAX_MESSAGE_BYTES = 8 * 1024**2
HEAD_BYTES = 64 * 1024
#: The tool name a refused request is handed on with (its ``arguments``: ``{"bytes": size}``).
OVERSIZED = "rlm-request-too-long"
#: A JSON-RPC request id near the start of a message (before its ``params``).
_ID = re.compile(rb'^\s*\{(?:(?!"params")[^{])*?"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')


def oversized_error(size: int) -> str:
    """The error answering a request of ``size`` bytes over :data:`MAX_MESSAGE_BYTES`."""
    from rlm_cli.mcp.tools import MAX_PATTERN_CHARS, MAX_QUESTION_CHARS

    return (f"error: the request is too long: {size:,} bytes, at most {MAX_MESSAGE_BYTES:,} (a question may have "
            f"{MAX_QUESTION_CHARS:,} characters, a pattern or query {MAX_PATTERN_CHARS:,})")


class BoundedLines:
    """The protocol's input, one message (line) at a time, read from a private copy of stdin (fd 0
    itself then reads ``/dev/null``, as the SDK's own reader arranges), each line at most
    :data:`MAX_MESSAGE_BYTES`: a longer one is skipped to its end without being kept, and stands
    as a ``tools/call`` of :data:`OVERSIZED` with its id (or as a line that is not JSON, when its
    id is not near its start), which the server answers with an error."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    @classmethod
    @contextlib.contextmanager
    def from_stdin(cls) -> Iterator[BoundedLines]:
        """Read the protocol from a private copy of fd 0, pointing fd 0 at ``/dev/null`` meanwhile."""
        private = os.dup(0)
        os.set_inheritable(private, False)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        raw = os.fdopen(private, "rb", buffering=HEAD_BYTES, closefd=False)
        try:
            yield cls(raw)
        finally:
            with contextlib.suppress(OSError):
                os.dup2(private, 0)

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        import anyio

        line = await anyio.to_thread.run_sync(self.next_line, abandon_on_cancel=True)
        if line is None:
            raise StopAsyncIteration
        return line

    def next_line(self) -> str | None:
        """The next message as text (``None`` at the end of input)."""
        raw = self.raw.readline(MAX_MESSAGE_BYTES + 1)
        if not raw:
            return None
        if len(raw) <= MAX_MESSAGE_BYTES or raw.endswith(b"\n"):
            return raw.decode("utf-8", "replace")
        head, size = raw[:HEAD_BYTES], len(raw)
        del raw
        while True:  # the rest of the line, read and dropped
            more = self.raw.readline(HEAD_BYTES)
            size += len(more)
            if not more or more.endswith(b"\n"):
                break
        found = _ID.match(head)
        if found is None:
            return "{not a message: over the size limit}\n"
        return json.dumps({"jsonrpc": "2.0", "id": json.loads(found.group(1)), "method": "tools/call",
                           "params": {"name": OVERSIZED, "arguments": {"bytes": size}}}) + "\n"


def protocol_thread(calls: Calls, paths: list[str], ui: UI) -> None:
    import anyio

    try:
        anyio.run(_serve_protocol, calls, paths)
    except BaseException as exc:  # noqa: BLE001 - the protocol failed: say so, end the server
        ui.error(f"the MCP protocol stopped: {type(exc).__name__}: {exc}")
    finally:
        calls.stop()
