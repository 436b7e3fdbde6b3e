"""The protocol thread of ``rlm mcp``: the MCP Python SDK's lowlevel ``Server`` on its
``stdio_server`` (anyio), which frames the JSON-RPC messages on stdin and stdout. It answers
``initialize`` and ``tools/list`` at once, checks a ``tools/call``'s arguments, queues it
(``calls.Calls``), relays its progress (``notifications/progress``, with a heartbeat) until its
result comes, and cancels it when the client does or leaves.
"""

from __future__ import annotations

import json
from typing import Any

from rlm_cli import __version__
from rlm_cli.errors import UsageError
from rlm_cli.mcp.calls import Call, Calls, Result
from rlm_cli.mcp.tools import TOOLS, check_arguments

INSTALL_HINT = "pip install 'rlm-cli[mcp]'"
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
    text = json.dumps(result.payload, ensure_ascii=False, default=str)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=result.payload)


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
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def protocol_thread(calls: Calls, paths: list[str], ui: Any) -> None:
    import anyio

    try:
        anyio.run(_serve_protocol, calls, paths)
    except BaseException as exc:  # noqa: BLE001 - the protocol failed: say so, end the server
        ui.error(f"the MCP protocol stopped: {type(exc).__name__}: {exc}")
    finally:
        calls.stop()
