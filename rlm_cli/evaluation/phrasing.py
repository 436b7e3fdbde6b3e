"""How ``rlm eval`` words its questions, per split (``--split dev|test``).

``dev`` is the wording the families always had (the first template of each kind; the same seed
gives the same questions as before the split existed): tune on it. ``test`` words every kind in
other ways, picked per question, with other seeds (``generate`` seeds its random streams with
the split's name), and plants needles in other sentences: report it, never tune on it.
The loop (``rlm_cli.loop``) shares no wording with either (``tests/loop/test_no_eval_wording.py``).
"""

from __future__ import annotations

import random
from typing import Any

SPLITS = ("dev", "test")

#: ``(family, kind)`` -> ``{"dev": [template], "test": [templates]}``; fields in braces.
TEMPLATES: dict[tuple[str, str], dict[str, list[str]]] = {
    ("needle", "sentence"): {
        "dev": ["The secret code of the {adj} {noun} project is {key}."],
        "test": ["Reminder: the {adj} {noun} team uses {key} as its access token.",
                 "Access token for the {adj} {noun} team = {key}",
                 "({adj} {noun} team, access token {key})"],
    },
    ("needle", "single"): {
        "dev": ["What is the secret code of the {p} project? It is written somewhere in the corpus. "
                "Answer with the code."],
        "test": ["Which access token does the {p} team use?",
                 "Somewhere in these files a note gives the {p} team's access token. What is it?",
                 "I need the access token of the {p} team; what is it?"],
    },
    ("needle", "multi"): {
        "dev": ["What are the secret codes of the {ps} and {last} projects? Each is written somewhere in the "
                "corpus. Answer with each project and its code."],
        "test": ["Give me the access tokens of the {ps} and {last} teams.",
                 "The {ps} and {last} teams each have an access token noted somewhere; list all of them.",
                 "Which access tokens do the {ps} and {last} teams use? One per team."],
    },
    ("code", "defines"): {
        "dev": ["Which file defines the function `{name}`? Give the file's path."],
        "test": ["Where is `{name}` implemented? Reply with the path of its module.",
                 "In which module does the function `{name}` live?",
                 "I'm looking for the source of `{name}()`: which file is it in?"],
    },
    ("code", "default"): {
        "dev": ["In the file `{path}`, what is the default value of the parameter `{param}` of {what}?"],
        "test": ["If a caller leaves out `{param}` when calling `{qual}` ({path}), what value does it get?",
                 "`{qual}` in {path}: what does `{param}` default to?",
                 "What is `{param}` set to by default in the signature of `{qual}` (file {path})?"],
    },
    ("code", "bases"): {
        "dev": ["In the file `{path}`, what are the base classes of the class `{cls}`?"],
        "test": ["Which classes does `{cls}` (in {path}) inherit from?",
                 "What does the class `{cls}` in {path} subclass?",
                 "List the parents of `{cls}` as declared in {path}."],
    },
    ("code", "calls"): {
        "dev": ["In the file `{path}`, how many functions and methods call `{name}`? Answer with the number."],
        "test": ["Count the functions (methods included) in {path} whose body invokes `{name}`.",
                 "`{name}` is used in {path}: by how many different functions or methods?",
                 "How many definitions in {path} contain a call to `{name}`?"],
    },
    ("aggregate", "count"): {
        "dev": ["In `{path}`, how many lines have service={svc} and level={lvl}? Answer with the number."],
        "test": ["How many {lvl} entries did the {svc} service write to `{path}`?",
                 "Count the log lines in {path} where the service is {svc} and the level is {lvl}.",
                 "In {path}, what number of records are {lvl} records from {svc}?"],
    },
    ("aggregate", "sum"): {
        "dev": ["In `{path}`, what is the total latency_ms of all lines with service={svc}? Answer with the number."],
        "test": ["Add up the latency_ms field over every {svc} entry of {path}.",
                 "What is the combined latency, in ms, of the {svc} service's requests logged in {path}?",
                 "Sum latency_ms for service {svc} across {path}."],
    },
    ("aggregate", "most"): {
        "dev": ["In `{path}`, which {what} has the most lines with {where}? Answer with the {what}."],
        "test": ["Among entries of {path} where {where_words}, which {what} shows up most often?",
                 "Which {what} accounts for the largest number of {path} lines where {where_words}?"],
    },
    ("aggregate", "least"): {
        "dev": ["In `{path}`, which {what} has the fewest lines with {where}? Answer with the {what}."],
        "test": ["Among entries of {path} where {where_words}, which {what} shows up least often?",
                 "Which {what} has the smallest share of the {path} lines where {where_words}?"],
    },
    ("pairs", "list"): {
        "dev": ["In `{path}`, which pairs of tickets have the same customer and the same product? List each pair "
                "of ticket ids."],
        "test": ["Find the duplicate tickets in {path}: the ones opened by one customer for one product. "
                 "Name them two by two.",
                 "Which tickets in {path} repeat another ticket's customer and product? Give the id pairs."],
    },
    ("pairs", "count"): {
        "dev": ["In `{path}`, how many pairs of tickets have the same customer and the same product? Answer with "
                "the number."],
        "test": ["How many duplicate pairs (one customer, one product, two tickets) are there in {path}?",
                 "Count the ticket pairs in {path} that repeat a customer together with a product."],
    },
    ("semantic", "count"): {
        "dev": ["Each line of `{path}` is a customer message written as {cats}. How many of the messages are "
                "{plural}? Answer with the number."],
        "test": ["{path} holds one customer message per line; every message is {cats}. Count the {plural}.",
                 "Customers wrote the messages in {path} (one per line), each as {cats}. What number of them are "
                 "{plural}?",
                 "Going by the intent of each message in {path} ({cats}), how many {plural} are there?"],
    },
    ("semantic", "most"): {
        "dev": ["Each line of `{path}` is a customer message written as {cats}. Which kind of message is the most "
                "common? Answer with the kind."],
        "test": ["{path} holds one customer message per line; every message is {cats}. Which of these four kinds "
                 "occurs most?",
                 "Customers wrote the messages in {path} (one per line), each as {cats}. What kind did they send "
                 "most often?"],
    },
    ("semantic", "ids"): {
        "dev": ["Each line of `{path}` is a customer message written as {cats}. Which messages are {plural}? Give "
                "their ids."],
        "test": ["{path} holds one customer message per line; every message is {cats}. List the ids of the "
                 "{plural}.",
                 "Customers wrote the messages in {path} (one per line), each as {cats}. Which ids belong to "
                 "{plural}?"],
    },
}


class Phrasing:
    """The wording of one split: :meth:`ask` gives the question text of a kind with ``fields``.
    Under ``dev`` it is the kind's one dev template (no random draw, so dev questions are the
    ones the families always asked); under ``test`` a template drawn from ``rng``."""

    def __init__(self, split: str, rng: random.Random | None = None) -> None:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
        self.split = split
        self.rng = rng or random.Random(0)

    def ask(self, family: str, kind: str, **fields: Any) -> str:
        """The text of a ``(family, kind)`` question (a sentence to plant for ``("needle", "sentence")``).

        Raises:
            KeyError: an unknown kind, or a field the template needs is missing.
        """
        options = TEMPLATES[(family, kind)][self.split]
        template = options[0] if self.split == "dev" else self.rng.choice(options)
        return template.format(**fields)
