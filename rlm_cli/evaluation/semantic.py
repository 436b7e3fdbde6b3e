"""The ``semantic`` family of ``rlm eval`` (the OOLONG idea: Bertsch et al., 2025, arXiv:2511.02817):
questions whose answer depends on the meaning of every item of a generated list.

Each question gets its own file of short customer messages, one a line (``M1234: text``), each
written from one of four hidden categories (:data:`CATEGORIES`: a complaint, a compliment, an
inquiry, a suggestion). Nothing in a line names its category: the messages are built from many
frames per category over shared products, openers and closers, and the words that carry meaning
in one category's frames also appear in the others' (``again``, ``why``, ``could``, ``thanks``,
``?``), so that no single word tells the category (``tests/evaluation/test_semantic.py`` measures
the best one-word rule). A message is noisy with probability ``noise`` (:data:`NOISE`): it also
carries an aside typical of another category, while its main request stays the one of its own.

Questions, in turn: how many messages are of a category (``count``, scored as a number, with
OOLONG's partial credit ``0.75 ** |gold - answer|`` reported beside it), which category is the
most common (``most``, a category named) and which messages belong to the rarest category
(``ids``, the exact set of ids; partial credit: the F1 of the ids named, as OOLONG-Pairs is scored
in the RLM paper). Gold answers come from the generator, never from reading the text.
"""

from __future__ import annotations

import random
from collections import Counter

from rlm_cli.evaluation.phrasing import Phrasing
from rlm_cli.evaluation.task import CorpusEdit, CorpusText, Task, free_path

#: The hidden categories: name -> (plural, what a message of it does: told in the question).
CATEGORIES: dict[str, tuple[str, str]] = {
    "complaint": ("complaints", "the writer is unhappy about something that went wrong"),
    "compliment": ("compliments", "the writer is pleased with something"),
    "inquiry": ("inquiries", "the writer asks for information"),
    "suggestion": ("suggestions", "the writer proposes an improvement"),
}
#: Share of the messages that also carry an aside typical of another category (the task's noise).
NOISE = 0.1
#: Id pattern of the messages (``M`` and four digits).
ID_PATTERN = r"\bM\d{4}\b"

_THINGS = ("kettle", "headphones", "router", "blender", "desk lamp", "vacuum cleaner", "printer",
           "coffee machine", "fitness watch", "air purifier", "toaster", "baby monitor")

#: Frames per category; ``{t}`` is a product. Words that carry meaning recur across categories.
_FRAMES: dict[str, tuple[str, ...]] = {
    "complaint": (
        "The {t} arrived two weeks after the promised date and nobody told me why.",
        "I have called three times about the {t} and each time I was put on hold and then cut off.",
        "My {t} stopped working after one day, and the replacement does the same thing again.",
        "I was charged twice for the {t} and I am still waiting for the money to come back.",
        "The person at the desk was rude to me when I asked about the {t}.",
        "Half of the parts of the {t} were missing when I opened the box, and the box itself was soaked.",
        "Why does the {t} keep switching itself off every few minutes? This is the fourth week of it.",
        "Nothing about the {t} worked the way the page said it would, and I lost a whole afternoon.",
        "I expected much better: the {t} cracked the first time I used it.",
        "Could someone explain why my order of the {t} was cancelled without a word to me? Not good enough.",
        "The {t} is so loud that we cannot hear each other in the kitchen, and the page called it quiet.",
        "Three emails about the {t} and not a single answer from your team.",
        "I would not wish the {t} on anyone: it broke within a week.",
        "The courier did not even ring the bell, and the {t} was left out in the rain.",
    ),
    "compliment": (
        "The {t} arrived a day early and every part was packed with care.",
        "I called about the {t} and the agent sorted it out in five minutes. Thank you.",
        "My {t} has worked perfectly every day since I got it.",
        "The refund for the {t} was back on my card the next morning, which I did not expect.",
        "The person at the desk was patient with me and explained the {t} twice without a sigh.",
        "The box was complete and the {t} looked even better than in the photos.",
        "I was nervous about setting up the {t}, but it turned out far easier than I feared.",
        "Whoever designed the {t} did a lovely job; I have told all my friends.",
        "Ten years as a customer and the {t} still never lets me down.",
        "Why did I wait so long to buy the {t}? It has changed my mornings.",
        "The {t} is so quiet that we forget it is on, just as the page said.",
        "Your team answered my email about the {t} within the hour, and kindly.",
        "I would buy the {t} again without a second thought.",
        "The people at the counter were kind and quick when I collected the {t}.",
    ),
    "inquiry": (
        "Could you tell me when the {t} is expected to arrive? I ordered it on Monday.",
        "I would like to know whether the {t} works with the older model I already own.",
        "Is it possible to pay for the {t} in two parts, and if so, how?",
        "Before I order the {t}, what is the return period if it does not suit me?",
        "I am curious how long the {t} usually takes to charge the first time.",
        "I wonder if the {t} comes in a larger size, since the page does not say.",
        "Does the price of the {t} include delivery, or is that charged separately?",
        "Please let me know which documents I need to bring to collect the {t}.",
        "My neighbour mentioned a discount on the {t}; does it still apply this month?",
        "Can the {t} be used again after a power cut, or does it need to be set up from the start?",
        "I need to find out whether the {t} is covered by the warranty if I bought it second hand.",
        "What is the difference between the {t} in white and the one in grey, apart from the colour?",
        "Would the {t} fit in a cupboard that is forty centimetres deep?",
        "How many people can use the {t} at the same time?",
    ),
    "suggestion": (
        "It would help a lot if the {t} came with a clearer manual.",
        "You could add a timer to the {t}; I would use it every evening.",
        "Maybe offer the {t} in a smaller size for people who live alone.",
        "Please consider letting customers pick an evening slot for delivery of the {t}.",
        "A short video on how to set up the {t} could save many people a phone call.",
        "Why not send a reminder a day before the {t} is delivered? Many of us want that.",
        "With a spare cable in the box of the {t}, fewer people need to order one later.",
        "I think the {t} should remember my last settings instead of asking every time.",
        "Consider opening the store an hour earlier on Saturdays; the queue for the {t} is long.",
        "The {t} would be perfect with a handle on the side, so it can be carried with one hand.",
        "Next time, print the warranty terms of the {t} on the box itself so nobody has to ask.",
        "Could the {t} be sold with a travel case? Trips with it get much easier that way.",
        "Selling the {t} in a pack of two did not occur to you? Many families need both rooms covered.",
    ),
}

#: Asides that may be added to a message of another category (``noise``): typical of their
#: category, but not what the message is about.
_ASIDES: dict[str, tuple[str, ...]] = {
    "complaint": ("Last time the courier was late, but never mind.", "The hold music is awful, by the way."),
    "compliment": ("To be fair, the courier was friendly.", "The shop itself is lovely."),
    "inquiry": ("Also, are you open on Sundays?", "By the way, what are your opening hours?"),
    "suggestion": ("A tracking link would be nice too.", "A loyalty card might be a good idea as well."),
}
_OPENERS = ("Hello,", "Hi team,", "Good morning.", "Dear support,", "Writing from my phone, sorry for typos.",
            "Quick note about my order.", "This is about the order I placed last week.", "Hi,")
_CONTEXT = ("I bought it for my mother's birthday.", "We moved house last month.", "I use it mostly at work.",
            "It was a gift from my sister.", "I ordered it online on a Sunday.", "My partner picked it up in store.")
_CLOSERS = ("Thanks.", "Thank you.", "Regards, J.", "Best wishes.", "Cheers!", "Thanks again!", "Kind regards.",
            "Many thanks in advance.")


def category_list() -> str:
    """The categories as the question states them: ``a complaint (the writer is unhappy ...), ...``."""
    parts = [f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({meaning})" for name, (_, meaning) in CATEGORIES.items()]
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def message(rng: random.Random, category: str, noisy: bool) -> str:
    """One message of ``category``: optional opener and context, a frame with a product, with
    ``noisy`` an aside of another category, and an optional closer."""
    parts = []
    if rng.random() < 0.5:
        parts.append(rng.choice(_OPENERS))
    if rng.random() < 0.3:
        parts.append(rng.choice(_CONTEXT))
    body = rng.choice(_FRAMES[category]).format(t=rng.choice(_THINGS))
    if parts and parts[-1].endswith(",") and not body.startswith("I "):
        body = body[0].lower() + body[1:]  # "Hello, the kettle ..."
    parts.append(body)
    if noisy:
        other = rng.choice([c for c in CATEGORIES if c != category])
        parts.insert(rng.randrange(len(parts) + 1), rng.choice(_ASIDES[other]))
    if rng.random() < 0.5:
        parts.append(rng.choice(_CLOSERS))
    return " ".join(parts)


def category_counts(rng: random.Random, n: int) -> dict[str, int]:
    """How many of ``n`` messages each category gets: one rare category (about 4-8% of them, at
    least 2) and three others with a unique most common one (ahead of the next by at least 2).

    Raises:
        ValueError: ``n`` is under 20 (too few for such a mix).
    """
    if n < 20:
        raise ValueError(f"{n} messages are too few: at least 20")
    names = list(CATEGORIES)
    rng.shuffle(names)
    rare = rng.randint(max(2, n // 25), max(3, n // 12))
    while True:
        weights = [rng.uniform(1.0, 3.0) for _ in range(3)]
        rest = n - rare
        counts = [int(rest * w / sum(weights)) for w in weights]
        counts[0] += rest - sum(counts)
        ranked = sorted(counts, reverse=True)
        if ranked[0] - ranked[1] >= 2 and min(counts) > rare:
            break
    return {names[0]: rare, **dict(zip(names[1:], counts, strict=True))}


def generate_messages(rng: random.Random, n: int, noise: float = NOISE) -> list[tuple[str, str, str]]:
    """``n`` messages as ``(id, category, text)`` in file order (see :func:`category_counts`);
    ids are distinct ``M1000``..``M9999``."""
    counts = category_counts(rng, n)
    cats = [c for c, k in counts.items() for _ in range(k)]
    rng.shuffle(cats)
    ids = rng.sample(range(1000, 10_000), n)
    return [(f"M{i}", c, message(rng, c, rng.random() < noise)) for i, c in zip(ids, cats, strict=True)]


def messages_text(items: list[tuple[str, str, str]]) -> str:
    """The file: one ``ID: text`` line per message."""
    return "".join(f"{i}: {text}\n" for i, _, text in items)


def semantic_tasks(corpus: CorpusText, rng: random.Random, limit: int, records: int,
                   phr: Phrasing | None = None, noise: float = NOISE) -> list[Task]:
    """Questions over generated message files of ``max(20, records // 10)`` lines, one file per
    question, the kinds ``count``, ``most``, ``ids`` in turn (see the module docstring)."""
    phr = phr or Phrasing("dev")
    n = max(20, records // 10)
    cats = category_list()
    tasks = []
    for i in range(limit):
        items = generate_messages(rng, n, noise)
        counts = Counter(c for _, c, _ in items)
        path = free_path(corpus, f"messages-{i + 1}.txt")
        edit = CorpusEdit(f"semantic-{i + 1}", add=((path, messages_text(items)),))
        kind = ("count", "most", "ids")[i % 3]
        if kind == "count":
            cat = rng.choice(sorted(CATEGORIES))
            q = phr.ask("semantic", kind, path=path, cats=cats, plural=CATEGORIES[cat][0])
            task = Task(f"semantic-{i + 1}", "semantic", kind, q, counts[cat], "number", edit=edit)
        elif kind == "most":
            gold = counts.most_common(1)[0][0]
            task = Task(f"semantic-{i + 1}", "semantic", kind, phr.ask("semantic", kind, path=path, cats=cats), gold,
                        "category", {"categories": {c: [c, p] for c, (p, _) in CATEGORIES.items()}}, edit)
        else:
            rare = min(counts, key=lambda c: counts[c])
            ids = sorted(i for i, c, _ in items if c == rare)
            q = phr.ask("semantic", kind, path=path, cats=cats, plural=CATEGORIES[rare][0])
            task = Task(f"semantic-{i + 1}", "semantic", kind, q, ids, "ids", {"id_pattern": ID_PATTERN}, edit)
        tasks.append(task)
    return tasks
