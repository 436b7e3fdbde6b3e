"""``leads(question)``: a keyword search of a question's own names and words, run before the root
model's first turn (and callable from the REPL).

Why: a model's first turns go to finding *where* to look, and that is where small models fail
most (measured with ``rlm eval`` and Qwen2.5-Coder-1.5B: near-identical greps until the
iteration limit, helpers called the wrong way, a right line never printed). The question itself
names what to look for: identifiers in backticks, file paths, rare words. ``leads`` looks them up
with the same helpers the model has (``grep`` and each file's ``ast`` outline) and prints at most
:data:`MAX_CHARS` characters: where each name is defined (its signature), which functions call
it, and the lines that hold the most of the question's words, rarest words weighted most (an
idf weight, as in BM25: ``log(1 + lines / hits)``). The model still decides what is true; the
leads are a first observation, shown as REPL output, never an answer.

Runs inside the sandboxed worker: standard library only.
"""

from __future__ import annotations

import bisect
import math
import re
from typing import Any

#: Most characters :func:`leads` returns (about 600 tokens).
MAX_CHARS = 2_400
#: A word with more matching lines than this is too common to find lines by (it still scores them).
COMMON_HITS = 3_000
#: Lines shown under "lines with the most question words".
TOP_LINES = 6
#: The rarest terms whose lines are the candidates for those (with 4, a question naming three
#: projects of two rare words each never saw the third project's line).
RARE_TERMS = 8
#: Definitions shown per name.
DEFS_PER_NAME = 4

#: Words that name nothing to look for: English function words (the NLTK English stop-word list,
#: words of three letters or more) and the verbs a question asks with. Content words are never
#: stop words, whatever the question: a common one ("file", "function") costs little, since each
#: term is weighted by its rarity in the corpus.
STOPWORDS = frozenset("""
about above after again against all and any are aren because been before being below between both but can
could couldn did didn does doesn doing don down during each either else every few for from further had hadn
has hasn have haven having her here hers herself him himself his how into isn its itself just many may might
mightn more most much must mustn myself needn nor not now off once only other our ours ourselves out over own
same shall shan she should shouldn some such than that the their theirs them themselves then there these they
this those through too under until very was wasn were weren what when where which while who whom whose why
will with within without won would wouldn yes you your yours yourself yourselves also
please tell show explain describe know mean means
""".split())
#: An identifier, possibly dotted (``Class.method``).
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
#: Quoted text: backticks, double quotes, or single quotes that are not apostrophes ("what's").
_QUOTED = re.compile(r"`([^`\n]{1,120})`|\"([^\"\n]{2,120})\"|(?<![^\W_])'([^'\n]{2,120})'(?![^\W_])")
#: A word: a letter (any script), then at least two letters, digits or underscores.
_WORD = re.compile(r"[^\W\d_]\w{2,}")
#: Characters of a question that :func:`question_terms` reads (a longer one is cut there).
QUESTION_CHARS = 4_000
_PATHLIKE = re.compile(r"[\w.-]*[/\\][\w./\\-]+|[\w.-]+\.[A-Za-z0-9]{1,6}")
_EXTENSIONS = frozenset("py pyi c h cc cpp hpp rs go java kt js ts tsx jsx rb php cs swift m sh toml yaml yml json "
                        "jsonl csv tsv md rst txt cfg ini log xml html css sql proto gradle lock".split())
_DEF_KEYWORDS = r"(?:async[ \t]+)?(?:def|class|function|func|fn|struct|interface|trait|enum|type|module)"


def question_terms(question: str) -> dict[str, list[str]]:
    """The names and words of ``question``: ``{"paths", "names", "phrases", "words"}``.

    * ``paths``: quoted or bare file paths (``a/b.py``, ``setup.cfg``);
    * ``names``: identifiers in backticks or quotes, and code-looking words outside them
      (``snake_case``, ``CamelCase``, ``dotted.names``, ``_private``);
    * ``phrases``: other quoted text, searched as written;
    * ``words``: the remaining words of at least 3 letters that are not :data:`STOPWORDS`,
      lowercased, in order, without repeats.

    Only the first :data:`QUESTION_CHARS` characters are read.
    """
    question = question[:QUESTION_CHARS]
    paths: list[str] = []
    names: list[str] = []
    phrases: list[str] = []
    rest = _QUOTED.sub(" ", question)
    for m in _QUOTED.finditer(question):
        text = next(g for g in m.groups() if g is not None).strip()
        if _is_path(text):
            paths.append(text)
        elif _IDENT.fullmatch(text.rstrip("()")):
            names.append(text.rstrip("()"))
        elif text:
            phrases.append(text)
    words: list[str] = []
    for m in re.finditer(r"[\w./\\-]+", rest):
        tok = m.group(0).strip(".-")
        if not tok:
            continue
        if _is_path(tok):
            paths.append(tok)
        elif _IDENT.fullmatch(tok) and ("_" in tok.strip("_") or "." in tok or tok.startswith("_")
                                        or re.search(r"[a-z][A-Z]", tok)):
            names.append(tok)
        else:
            for w in _WORD.findall(tok):
                low = w.lower()
                if low not in STOPWORDS and low not in words and not low.isdigit():
                    words.append(low)
    return {"paths": list(dict.fromkeys(paths)), "names": list(dict.fromkeys(names)),
            "phrases": list(dict.fromkeys(phrases)), "words": words}


def _is_path(text: str) -> bool:
    """Whether ``text`` reads as a file path: it has a ``/`` or ends in a common file extension
    (``Class.method`` does not)."""
    if not _PATHLIKE.fullmatch(text):
        return False
    return "/" in text or "\\" in text or text.rsplit(".", 1)[-1].lower() in _EXTENSIONS


def _stem(word: str) -> str:
    """A crude plural/verb stem so ``codes`` finds ``code`` and ``parsing`` finds ``parse``."""
    for suffix in ("ies", "es", "s", "ing", "ed"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: -len(suffix)]
    return word


class _Scanner:
    """Finds whole-word occurrences of literal terms in ``context`` fast: a plain ``str.find``
    scan per spelling (about 30 ms for 31 MB; a regex that starts with ``\\b`` or a look-behind
    takes 2 s there, as does ``re.IGNORECASE``), the word boundaries checked per hit.

    A hit is the offset where its line starts; lines are numbered only for what is shown.
    """

    def __init__(self, view: Any, paths: list[str] | None, shown: list[tuple[str, int]] | None = None) -> None:
        self.view = view
        self.ctx: str = view.context
        #: ``(path, line)`` of every line :meth:`describe` wrote (the sources of the leads).
        self.shown: list[tuple[str, int]] = [] if shown is None else shown
        files = view.files if paths is None else [f for f in view.files if f["path"] in paths]
        self.spans = [(int(f["start"]), int(f["end"])) for f in files]
        self.lines = max(1, sum(int(f.get("lines") or 0) for f in files))

    def lines_with(self, term: str, *, any_case: bool, limit: int) -> list[int]:
        """Starts of the lines (in corpus order, no repeats, at most ``limit``) holding ``term``
        as a whole word, or with ``any_case`` as the start of a word (a stem) written as given,
        lowercase, Capitalized or UPPER."""
        if not term:
            return []
        ctx = self.ctx
        find, rfind = ctx.find, ctx.rfind
        spellings = {term, term.lower(), term.capitalize(), term.upper()} if any_case else {term}
        starts: set[int] = set()
        n = len(term)
        for spelling in spellings:
            for a, b in self.spans:
                pos = find(spelling, a, b)
                while pos >= 0 and len(starts) < limit:
                    before = ctx[pos - 1] if pos > a else " "
                    after = ctx[pos + n] if pos + n < b else " "
                    whole = not (before.isalnum() or before == "_") and (
                        any_case or not (after.isalnum() or after == "_"))
                    if whole:
                        starts.add(max(a, rfind("\n", a, pos) + 1))
                    pos = find(spelling, pos + n, b)
                if len(starts) >= limit:
                    break
        return sorted(starts)[:limit]

    def text(self, start: int) -> str:
        """The line that starts at ``start`` (without its newline)."""
        end = self.ctx.find("\n", start)
        return self.ctx[start:end if end >= 0 else len(self.ctx)]

    def where(self, start: int) -> tuple[dict[str, Any], int]:
        """``(file entry, 1-based line number)`` of the line starting at ``start``."""
        view = self.view
        i = max(0, bisect.bisect_right(view._starts, start) - 1)
        f = view.files[i]
        return f, 1 + self.ctx.count("\n", int(f["start"]), start)

    def file_of(self, start: int) -> str:
        return str(self.view.files[max(0, bisect.bisect_right(self.view._starts, start) - 1)]["path"])

    def describe(self, start: int, *, signature: bool = False, width: int = 200) -> str:
        """``path:line (in function): text`` of the line at ``start``."""
        f, line = self.where(start)
        text = self.text(start).strip()
        if signature and text.count("(") > text.count(")"):
            nxt = start
            for _ in range(3):
                nxt = self.ctx.find("\n", nxt) + 1
                if not nxt or nxt >= int(f["end"]):
                    break
                text += " " + self.text(nxt).strip()
                if text.count("(") <= text.count(")"):
                    break
        text = text if len(text) <= width else text[:width - 3] + "..."
        self.shown.append((str(f["path"]), line))
        inside = self.enclosing(f, line)  # of a definition's own line: the class or function holding it
        return f"{f['path']}:{line}" + (f" (in {inside})" if inside else "") + f": {text}"

    def enclosing(self, f: dict[str, Any], line: int) -> str | None:
        try:
            return self.view._enclosing(f, line) if str(f["path"]).endswith((".py", ".pyi", ".pyw")) else None
        except Exception:  # noqa: BLE001 - a lead without its function is still a lead
            return None


def leads(view: Any, question: str, max_chars: int = MAX_CHARS, shown: list[tuple[str, int]] | None = None) -> str:
    """The leads for ``question`` in corpus ``view`` (a ``CorpusView``), as text of at most
    ``max_chars`` characters; ``""`` when the question names nothing to look for. ``shown``, when
    given, receives ``(path, 1-based line)`` of each corpus line the text shows (its sources).

    Sections (each only when it has something): files the question names; for each name, its
    definitions (file:line and the signature, up to :data:`DEFS_PER_NAME`) and the functions
    that call it; the lines with the most question words and names (up to :data:`TOP_LINES`).
    Costs a few literal scans of ``context`` per term (about 0.1 s per term for 31 MB).
    """
    terms = question_terms(question)
    if not any(terms.values()):
        return ""
    scope = _scope(view, terms["paths"])
    lines: list[tuple[str, int]] = []
    sc = _Scanner(view, [f["path"] for f in scope] if scope else None, lines)
    out: list[str] = []
    if scope:
        out.append("files named in the question: "
                   + ", ".join(f"{f['path']} ({f.get('lines', '?')} lines)" for f in scope[:4]))
    elif terms["paths"]:
        out.append(f"no file in the corpus matches {', '.join(terms['paths'][:3])} (see `files`)")
    whole = _Scanner(view, None, lines) if scope else sc
    names = terms["names"][:4]
    # A name with a def or class makes the others minor (parameters, attributes of it).
    major = {n for n in names if _has_def(sc, n)}
    for name in names:
        found = _name_leads(sc, name, minor=bool(major) and name not in major)
        if scope and found and found[-1].endswith(_NOT_FOUND):
            found = [f"`{name}` is not in {', '.join(f['path'] for f in scope[:4])}; in the whole corpus:"]
            found += _name_leads(whole, name)
        out += found
    if not (names and set(names) <= major and not terms["phrases"]):
        # Every name the question gives has a definition: those are the leads; lines that merely
        # mention a name beside the question's other words ("class", "base") only distract.
        out += _line_leads(sc, terms)
    text = "\n".join(out)
    if len(text) > max_chars:
        text = text[: max(0, max_chars - 20)].rsplit("\n", 1)[0] + "\n[... leads cut]"
    if shown is not None:
        shown += [(p, n) for p, n in dict.fromkeys(lines) if f"{p}:{n}" in text]
    return text


def _scope(view: Any, paths: list[str]) -> list[dict[str, Any]]:
    """The corpus files the question's ``paths`` name (exact path or a suffix; at most 4 each).

    A path that matches nothing may start with folders above the corpus: ``logging/__init__.py``
    asked of ``rlm ask Lib/logging``, whose files are ``__init__.py``, ``handlers.py``, ...; then
    its shorter tails are tried, each only as a whole path from the corpus root."""
    found: list[dict[str, Any]] = []
    for p in paths:
        norm = p.replace("\\", "/").lstrip("./")
        hits = [f for f in view.files if f["path"] == norm or f["path"].endswith("/" + norm)]
        parts = norm.split("/")
        for cut in range(1, len(parts)):
            if hits:
                break
            tail = "/".join(parts[cut:])
            hits = [f for f in view.files if f["path"] == tail]
        if len(hits) <= 4:
            found += [f for f in hits if f not in found]
    return found


_DEF_LINE = re.compile(rf"^[ \t]*(?:export[ \t]+)?(?:pub[ \t]+)?{_DEF_KEYWORDS}[ \t]+(\w+)")
#: An assignment that defines a name: ``NAME = ...``, ``NAME: type = ...`` (also ``const``/``let``/``var``).
_ASSIGN_LINE = re.compile(r"^[ \t]*(?:(?:export[ \t]+)?(?:const|let|var|static|final)[ \t]+)?(\w+)[ \t]*"
                          r"(?::[^=\n]{1,80})?=(?!=)")
#: The end of the line :func:`_name_leads` gives for a name it did not find.
_NOT_FOUND = "is not in the corpus as a word (case-sensitive)"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _has_def(sc: _Scanner, name: str) -> bool:
    """Whether ``name``'s last part has a ``def``/``class`` (or the like) line in the scanned files."""
    last = name.rsplit(".", 1)[-1]
    for s in sc.lines_with(last, any_case=False, limit=20_000):
        m = _DEF_LINE.match(sc.text(s))
        if m and m.group(1) == last:
            return True
    return False


def _definitions(sc: _Scanner, name: str, uses: list[int], assignments: bool) -> list[int]:
    """The lines of ``uses`` that define ``name``'s last part: ``def``/``class`` (and the like),
    else, with ``assignments``, top-level or class-level assignments (``NAME = ...``); for
    ``Class.method`` the method of that class first."""
    last = name.rsplit(".", 1)[-1]
    owner = name.rsplit(".", 1)[0].rsplit(".", 1)[-1] if "." in name else None
    defs = [s for s in uses if (m := _DEF_LINE.match(sc.text(s))) and m.group(1) == last]
    if not defs and assignments:  # a constant or a variable: where it is assigned at the top of a file or class
        defs = [s for s in uses if (m := _ASSIGN_LINE.match(sc.text(s))) and m.group(1) == last
                and len(sc.text(s)) - len(sc.text(s).lstrip()) <= 4][:DEFS_PER_NAME * 2]
    if owner and len(defs) > 1:
        own = []
        for s in defs:
            f, line = sc.where(s)
            if str(sc.enclosing(f, line + 1) or "").endswith(f"{owner}.{last}"):
                own.append(s)
        defs = own + [s for s in defs if s not in own]
    return defs


def _name_leads(sc: _Scanner, name: str, *, minor: bool = False) -> list[str]:
    """Where ``name`` (its last dotted part) is defined, and which functions call it, file by
    file. A ``minor`` name (another name of the question has a ``def`` or ``class``: this one is
    likely a parameter or attribute of it) gets no assignment "definitions" and no line count,
    which small models were seen to take for the answer."""
    last = name.rsplit(".", 1)[-1]
    uses = sc.lines_with(last, any_case=False, limit=20_000)
    if not uses:
        return [f"`{last}` {_NOT_FOUND}"]
    defs = _definitions(sc, name, uses, assignments=not minor)
    out: list[str] = []
    if defs:
        more = f" ({len(defs)} definitions; the first {DEFS_PER_NAME})" if len(defs) > DEFS_PER_NAME else ""
        out.append(f"`{name}` is defined at{more}:")
        out += ["  " + sc.describe(s, signature=True, width=240) for s in defs[:DEFS_PER_NAME]]
    call = re.compile(rf"(?<![\w.]){re.escape(last)}[ \t]*\(")
    def_set = set(defs)
    by_file: dict[str, list[int]] = {}
    for s in uses:
        if s not in def_set and call.search(sc.text(s)):
            by_file.setdefault(sc.file_of(s), []).append(s)
    if not by_file:
        if not defs and not minor:
            files = {sc.file_of(s) for s in uses}
            capped = "+" if len(uses) >= 20_000 else ""
            out.append(f"`{last}` is on {_plural(len(uses), 'line')}{capped} in {_plural(len(files), 'file')}, "
                       "never defined or called there")
        return out
    for path, starts in list(by_file.items())[:3]:
        callers: list[str] = []
        module_level = False
        for s in starts:
            f, n = sc.where(s)
            caller = sc.enclosing(f, n)
            if caller is None:
                module_level = True
            elif caller not in callers:
                callers.append(caller)
        shown = ", ".join(callers[:10]) + (", ..." if len(callers) > 10 else "")
        line = (f"`{last}` is called from {_plural(len(callers), 'function')} in {path}: {shown}"
                if callers else f"`{last}` is called in {path}")
        out.append(line + ("; also at module level" if module_level and callers else
                           " at module level" if module_level else ""))
    if len(by_file) > 3:
        out.append(f"`{last}` is called in {len(by_file) - 3} more files")
    return out


def _line_leads(sc: _Scanner, terms: dict[str, list[str]]) -> list[str]:
    """The lines holding the most of the question's words, names and phrases, each term weighted
    by its rarity (``log(1 + lines / hits)``); lines are found through the rarest terms. When the
    question names something (an identifier or a quoted phrase) that the corpus has, the lines are
    those holding it: it is what the question is about, and the words around it ("which file",
    "give the path") would otherwise pick lines that merely share the question's phrasing."""
    if not terms["words"] and not terms["phrases"]:
        return []
    labels = terms["words"][:10] + [n.rsplit(".", 1)[-1] for n in terms["names"][:4]] + terms["phrases"][:3]
    found: list[tuple[str, str, set[int]]] = []  # (label, searched form, line starts)
    for label in dict.fromkeys(labels):
        form = _stem(label) if label in terms["words"] else label
        found.append((label, form, set(sc.lines_with(form, any_case=True, limit=COMMON_HITS + 1))))
    weight = {label: math.log(1 + sc.lines / max(1, len(s))) for label, _, s in found}
    rare = sorted((f for f in found if 0 < len(f[2]) <= COMMON_HITS), key=lambda f: len(f[2]))[:RARE_TERMS]
    # Each count says its unit: a bare "info 51" next to a question about INFO was read as its value.
    head = ("lines with the most question words (how many lines hold each: "
            + ", ".join(f"'{label}' in {len(s):,}{'+' if len(s) > COMMON_HITS else ''} line{'' if len(s) == 1 else 's'}"
                        for label, _, s in found) + ")")
    if not rare:
        if all(not s for _, _, s in found):
            return []  # nothing to show: no line holds any of the words
        return [head + ": every word is common; narrow the search with code"]
    anchors = {n.rsplit(".", 1)[-1] for n in terms["names"][:4]} | set(terms["phrases"][:3])
    anchored = [s for label, _, s in found if label in anchors and 0 < len(s) <= COMMON_HITS]
    candidates = set().union(*anchored) if anchored else set().union(*(s for _, _, s in rare))
    scored = []
    for start in candidates:
        text = sc.text(start).lower()
        present = [label for label, form, s in found if start in s or (len(s) > COMMON_HITS and form.lower() in text)]
        scored.append((-sum(weight[p] for p in present), -len(present), start))
    scored.sort()
    need = 2 if len(found) >= 2 else 1
    top = [s for s in scored[:TOP_LINES] if -s[1] >= need] or scored[:2]
    return [head + ":"] + ["  " + sc.describe(start) for _, _, start in top]


class LeadsHelper:
    """``leads`` in the namespace: the function, which holds no data. Small models read the
    leads turn's printed lines as a list and write ``for line in leads:`` (seen three times in a
    row with a 1.5B model, each a bare "'function' object is not iterable"): iterating or
    indexing it says where the corpus's lines and rows are instead."""

    _WHY = ("leads is a function that prints a keyword search; it holds no lines or rows to loop over. "
            "Loop over grep(pattern) hits, context.splitlines(), or records() (the rows of data files).")

    def __init__(self, fn: Any) -> None:
        self._fn = fn
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._fn(*args, **kwargs)

    def __iter__(self) -> Any:
        raise TypeError(self._WHY)

    def __getitem__(self, key: Any) -> Any:
        raise TypeError(self._WHY)

    def __repr__(self) -> str:
        return "<function leads>"
