"""The RLM loop: root-model turns, code run in the REPL worker, and the answer checks.

* ``orchestrator``: one question at one depth: plan a reply, run its blocks, ask the policy about
  any answer, record the turn (``Orchestrator``).
* ``answers``: the answer a reply gives (``FINAL`` in code or text; a last request's answer).
* ``state``: what a run remembers between turns (read runs, repeat and error streaks).
* ``direct``: direct mode (``run_direct``); ``result``: ``RunResult`` and ``policy_of``.
* ``policy``: the presets ``paper``, ``standard`` and ``guided``, and ``auto``'s choice among them.
* ``checks``: every rule that may send an answer back or rewrite it, each a small unit with one
  interface and a per-run limit.
* ``reply``: reading a reply (blocks, claimed output, FINAL lines, prose answers).
* ``prompts``: the text the root model reads (pure functions).
* ``history``: the root model's conversation, fitted to its input window on every request.

Nothing here prints; events go through an ``emit`` callback (``rlm_cli.output.trace``).
"""
