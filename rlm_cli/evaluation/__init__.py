"""``rlm eval``: generated questions with exact answers, run like ``rlm ask`` and scored.

``tasks`` generates questions from a loaded corpus, ``scoring`` judges answers, ``harness``
runs them through ``runner.ask``, ``report`` writes the JSON document and Markdown report, and
``cli_run`` ties them together for the command.
"""
