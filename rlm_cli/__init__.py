"""rlm: answer questions about huge local corpora with Recursive Language Models.

Nothing heavy is imported here: ``rlm --help`` must stay fast, and the sandbox worker
imports this package inside a stripped-down interpreter.
"""

__version__ = "0.1.0"
