"""The ``rlm`` command line: the Typer app (``app``), one module per command group, the shared
options (``options``), the state of one run (``invocation``) and the exit-code mapping (``exits``).

Commands parse flags, build settings, call the application layer (``rlm_cli.app``) and render;
they hold no business logic and import nothing heavy (litellm) at import time.
"""
