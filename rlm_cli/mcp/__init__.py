"""``rlm mcp PATH...``: rlm as a tool for coding agents and editors, over the Model Context Protocol.

One warm :class:`session.Session` serves every call, on standard input and output: the corpus is
loaded once, the model host and the REPL worker start once, so a second ``ask`` starts at its
first model call. The tools (their input and output schemas are ``tools.TOOLS``):

* ``ask(question, max_cost?, max_iterations?)``: a full RLM run (or a direct one, per ``--mode``),
  answered with its ``answer``, ``status``, ``sources`` (``path:start-end``), usage and trajectory id;
* ``search(query, k?, path_glob?)`` and ``grep(pattern, path_glob?, max_results?, ignore_case?)``:
  the REPL helpers of the same names, run in the session's worker (no model call);
* ``corpus_info()``: files, bytes, tokens, chunks, file types and kinds, what was skipped.

Threads. The REPL worker dies with the thread that started it, and Ctrl-C is how every part of a
run stops, so the *main* thread owns the session: it opens it, then serves the calls one at a
time, in the order they arrive, from a queue (``calls.Calls``). The protocol (the SDK's
``stdio_server`` and lowlevel ``Server``, on anyio) runs in a second thread: it answers
``initialize`` and ``tools/list`` at once, puts each ``tools/call`` on the queue, and relays the
run's progress (``notifications/progress``: iterations and sub-call batches) until the result
comes. A client's ``notifications/cancelled`` for the call being served becomes a SIGINT to the
main thread (``signal.pthread_kill``), which the run meets as ``rlm chat`` meets Ctrl-C: a model
call is abandoned, a running code block is interrupted (the worker is restarted when it does not
stop within ``session.INTERRUPT_GRACE_S``), sub-RLMs stop at their next model call, and the
trajectory ends with status ``interrupted``; a cancelled call still queued is dropped. A real
Ctrl-C (SIGINT from elsewhere) or SIGTERM ends the server, cleaned up as ``rlm ask`` is.

Each ``ask`` is independent: it starts with an empty REPL namespace and is not told of earlier
questions. Budgets (``--max-cost``, ``--max-tokens``, ``--max-sub-calls``, ``--timeout``) and
``--max-iterations`` hold for each ``ask`` on its own; a call's ``max_cost`` and
``max_iterations`` can lower the server's limits, never raise them.

Before each call the corpus is checked (``corpus.watch``: the paths walked again, files stat'ed)
and loaded again when files changed, with the cache rules of ``rlm ask`` (only new or changed
files are read); the worker then restarts on the new bundle. A tool error (``isError``) reads as
the CLI's one-line error, ``error: MESSAGE (HINT)``; a run stopped by its iteration limit or a
budget is not an error: its result has ``partial: true`` and the best partial answer.

The server reads only the given paths; model-written code runs in the sandboxed worker as with
``rlm ask``. stdout carries only the protocol: while serving, the SDK points file descriptor 1
at stderr, where rlm's own lines go.

Modules, each importing only those above it:

* ``tools``: the tool definitions, their input and output schemas, and the arguments check.
* ``calls``: the queue of calls between the protocol thread and the main thread.
* ``protocol``: the protocol thread (the SDK's stdio server: ``initialize``, ``tools/list``,
  ``tools/call``, progress and cancellation).
* ``service``: the warm session and the tools run over it, on the main thread.
* ``server``: :func:`~rlm_cli.mcp.server.serve`, the two threads started and ended.
"""
