"""The worked examples of the root model's first messages: real chat turns sent between the
system prompt and the question (``rlm_cli.loop.meta.first_messages``)."""

from __future__ import annotations


def example_messages() -> list[dict[str, str]]:
    """A worked example as real chat turns, sent between the system prompt and the question: the
    model's reply ends right after its code block, and the output arrives as the next (user)
    message. Small models imitate a transcript written inside the system prompt, invented output
    included; as separate turns, the turn-taking is what they learn. The first (an environment
    variable a program reads) finds a fact with grep and states it first, then where it was
    found; the second judges each of many lines with ``llm_map`` and counts the answers in code,
    because a 1.5B model told in words alone when to decompose never did (6 of 6 dev questions
    of ``rlm eval``'s ``semantic`` family answered by grep or a guess, 2026-12-06). Its question
    is yes or no about one kind, with ``choices=["yes", "no"]`` so that the answers can be counted
    as they are. An example whose call listed four kinds as choices (2026-12-06) had its labels
    copied, all or some, into the 1.5B model's own call in 4 of the 5 runs that called
    ``llm_map``; with the yes-or-no example it wrote its own question in every call of about 10
    runs on the dev split, and copied the example's question once in the 4 runs of test seed 5
    that called it. Their subjects are unlike any question ``rlm eval`` generates."""
    return [
        {"role": "user", "content": "Example question (not your task): Which environment variable changes where the "
                                    "tool keeps its cache?"},
        {"role": "assistant", "content": 'I will look for environment variables the code reads.\n```repl\nhits = '
                                         'grep(r"environ")\nprint(len(hits))\nfor h in hits[:5]:\n    print(h["file"], '
                                         'h["line"], h["text"].strip())\n```'},
        {"role": "user", "content": "Output:\n2\ntool/paths.py 8 root = os.environ.get(\"TOOL_CACHE_HOME\", "
                                    "\"~/.cache/tool\")\ntool/cli.py 30 debug = os.environ.get(\"TOOL_DEBUG\") == "
                                    "\"1\"\n\nContinue."},
        {"role": "assistant", "content": 'Line 8 of tool/paths.py reads the cache folder from TOOL_CACHE_HOME.\n'
                                         '```repl\nFINAL("TOOL_CACHE_HOME (read in tool/paths.py, line 8; the default is '
                                         '~/.cache/tool)")\n```'},
        {"role": "user", "content": "Example question (not your task): How many entries of CHANGES.txt fix a crash?"},
        {"role": "assistant", "content": "Whether an entry fixes a crash is a judgment, not a word to match, so the "
                                         "sub-model reads each one.\n```repl\nentries = context[\"CHANGES.txt\"]."
                                         "splitlines()\nfixes = llm_map(entries, \"Does this entry fix a crash?\", "
                                         "choices=[\"yes\", \"no\"])\nprint(len(entries), fixes.count(\"yes\"))\n```"},
        {"role": "user", "content": "Output:\n31 6\n\nContinue."},
        {"role": "assistant", "content": '```repl\nFINAL("6 of the 31 entries of CHANGES.txt fix a crash")\n```'},
    ]
