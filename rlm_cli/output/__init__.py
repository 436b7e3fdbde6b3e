"""What a run shows and writes: the terminal view on stderr, the answer and documents on stdout,
the trajectory files, and the viewers of both.

Written by the core (standard library only, never rich, never printing):

* ``trace``: trajectory events (:func:`~rlm_cli.output.trace.event`, the ``Emit`` callback type),
  their JSONL files and reading them back as a list or a tree.
* ``progress``: transient ``stream`` and ``progress`` events (streamed replies, sub-call batches,
  corpus indexing).
* ``sources``: what a run looked at and which ranges its answer cites.
* ``documents``: the ``--json`` documents (an answer, a partial answer, an error) and ``--cite``.
* ``outfile``: ``--output FILE`` checked early and written atomically.
* ``findings``: the typed audit report and finding record (check, path, region, fingerprint,
  baseline state, suppression) that every ``rlm audit`` report reads; ``reports``: one module
  per report format (JUnit, SARIF, workflow commands and job summary, GitLab Code Quality).

Drawn or written by the commands (only these import rich, and nothing in the core imports them):

* ``text`` (no rich): control characters neutralised, costs, progress lines, clipping.
* ``answer`` (no rich): the answer or a document on stdout, whole or an error; the summary line.
* ``style``: plain or styled, live or not (``--color``); text escaped for rich markup.
* ``render``: :class:`~rlm_cli.output.render.Renderer`, the events drawn on stderr.
* ``live``: the live region (streaming reply, batches in flight, indexing) and ``rlm eval``'s bar.
* ``tables``: tables on stdout (stats, caches, hosts, ``rlm trace list``).
* ``trace_view``: ``rlm trace show`` (a tree) and ``rlm trace export --html``.
"""
