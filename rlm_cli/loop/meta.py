"""What the root model is told about the corpus before its first turn: constant-size metadata
(``corpus_meta``, ``text_meta``: a :class:`CorpusMeta`), its text (``corpus_metadata``) and the
first messages of a loop (``first_messages``)."""

from __future__ import annotations

from collections import Counter
from typing import Any, NotRequired, TypedDict, cast

from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, FileEntry
from rlm_cli.loop import prompts
from rlm_cli.loop.examples import example_messages
from rlm_cli.loop.history import output_limit
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.window import input_budget
from rlm_cli.output.text import plural
from rlm_cli.protocol import context_by_path


class FileSummary(TypedDict, total=False):
    """One structured file of :class:`StructuredMeta`: its ``path`` and the summary the corpus
    keeps of it (``FileEntry.dmeta``, made by :func:`rlm_cli.corpus.structured.summarize`):
    ``kind``; for tables ``rows``, ``keys`` (the first 16), ``nkeys``, ``sample`` (``[key, value
    as JSON]`` pairs), ``errors`` (bad lines), ``first_error`` (``[line, message]``), ``ragged``,
    ``sheets``/``nsheets``, ``misnamed``, ``delimiter``; for JSON ``shape``; ``error`` and
    ``line`` for an invalid file."""

    path: str
    kind: str
    rows: int
    keys: list[str]
    nkeys: int
    sample: list[list[str]]
    errors: int
    first_error: list[int | str]
    ragged: int
    sheets: list[str]
    nsheets: int
    misnamed: bool
    delimiter: str
    shape: str
    error: str
    line: int


class StructuredMeta(TypedDict):
    """The structured files of a corpus (:func:`structured_meta`): how many (``files``), their
    records (``rows``), ``by_kind`` (``[(kind, files, rows)]``, at most 8 kinds), ``shown`` (at most
    :data:`STRUCTURED_SHOWN` files) and ``pdf`` (how many PDF files)."""

    files: int
    rows: int
    by_kind: list[tuple[str, int, int]]
    shown: list[FileSummary]
    pdf: int


class CorpusMeta(TypedDict):
    """The constant-size description of a corpus the root model reads (:func:`corpus_metadata`):
    its size (``chars``, ``tokens``, ``files``, ``chunks``) and the first characters of
    ``context`` (``prefix``: at most 300); for a corpus of files (:func:`corpus_meta`, not
    :func:`text_meta`) also ``top_dirs`` and ``types`` (``[(folder or extension, files)]``, the 12
    most common), ``sample_paths`` (at most 8), ``by_path`` (whether ``context["path"]`` works)
    and, when it has structured files or PDFs, ``structured``."""

    chars: int
    tokens: int
    files: int
    chunks: int
    prefix: str
    top_dirs: NotRequired[list[tuple[str, int]]]
    types: NotRequired[list[tuple[str, int]]]
    sample_paths: NotRequired[list[str]]
    by_path: NotRequired[bool]
    structured: NotRequired[StructuredMeta]


def corpus_meta(corpus: Corpus) -> CorpusMeta:
    """The constant-size metadata of ``corpus`` for :func:`corpus_metadata` (never decodes the whole corpus)."""
    top: Counter[str] = Counter()
    types: Counter[str] = Counter()
    for f in corpus.files:
        head, sep, _ = f.path.lstrip("/").partition("/")
        top[head + "/" if sep else "."] += 1
        name = f.path.rsplit("/", 1)[-1]
        types[name[name.rfind("."):] if "." in name[1:] else "(none)"] += 1
    step = max(1, len(corpus.files) // 8)
    meta: CorpusMeta = {"chars": corpus.chars, "tokens": corpus.total_tokens, "files": len(corpus.files),
                        "chunks": len(corpus.chunks), "top_dirs": top.most_common(12), "types": types.most_common(12),
                        "sample_paths": [f.path for f in corpus.files[::step][:8]], "prefix": corpus.head(300),
                        "by_path": context_by_path(corpus.chars, corpus.char_width)}
    structured = structured_meta(corpus)
    if structured:
        meta["structured"] = structured
    return meta


#: Structured files described one by one in the root model's metadata (the largest first).
STRUCTURED_SHOWN = 6


def structured_meta(corpus: Corpus) -> StructuredMeta | None:
    """The structured files of ``corpus`` for :func:`corpus_metadata`, in constant size:
    ``files``, ``rows`` (records), ``by_kind`` (``[(kind, files, rows)]``, at most 8 kinds),
    ``shown`` (the summaries of :data:`STRUCTURED_SHOWN` files, each with its ``path``: the
    largest of each kind, then the largest others) and ``pdf`` (PDF files, whose pages start with a marker line). ``None`` when the
    corpus has neither structured files nor PDFs."""
    data = [f for f in corpus.files if f.dmeta]
    pdfs = sum(1 for f in corpus.files if f.kind.split(",")[0] == "pdf")
    if not data and not pdfs:
        return None
    kinds: dict[str, list[int]] = {}
    for f in data:
        assert f.dmeta is not None
        row = kinds.setdefault(str(f.dmeta.get("kind")), [0, 0])
        row[0] += 1
        row[1] += int(f.dmeta.get("rows", 0) or 0)
    by_size = sorted(data, key=lambda f: (-f.size, f.path))
    firsts: dict[str, FileEntry] = {}
    for f in by_size:  # the largest file of each kind, then the largest others
        firsts.setdefault(str((f.dmeta or {}).get("kind")), f)
    chosen = list(firsts.values())[:STRUCTURED_SHOWN]
    largest = chosen + [f for f in by_size if f not in chosen][:STRUCTURED_SHOWN - len(chosen)]
    return {"files": len(data), "rows": sum(r for _, r in kinds.values()),
            "by_kind": [(k, n, r) for k, (n, r) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:8]],
            "shown": [_summary(f.path, f.dmeta or {}) for f in largest], "pdf": pdfs}


def _summary(path: str, dmeta: dict[str, Any]) -> FileSummary:
    """``dmeta`` (a :class:`FileSummary` but its path, as the corpus keeps it: a ``dict`` read
    from the index or the decoder's answer) with ``path`` first. The corpus types it no further,
    so it is taken as one here, unchecked: the only place."""
    return cast(FileSummary, {"path": path, **dmeta})


def text_meta(text: str) -> CorpusMeta:
    """Metadata for an ``rlm_query`` context passed as a string (no files, no chunks)."""
    return {"chars": len(text), "tokens": max(1, len(text) // 4) if text else 0, "files": 1, "chunks": 0,
            "prefix": text[:300]}


def first_messages(settings: Settings, question: str, meta: CorpusMeta, depth: int = 0,
                   note: str = "") -> list[dict[str, str]]:
    """What the root model of a loop at ``depth`` reads first: the system prompt, the worked
    example's turns (:func:`rlm_cli.loop.examples.example_messages`) and the first user message (metadata and
    question); the windows come from ``settings`` (or :data:`DEFAULT_WINDOW`). ``note`` (a
    session's earlier questions and kept variables, ``prompts.session_note``) goes between the
    corpus description and the question."""
    root_window = settings.root_model_window or DEFAULT_WINDOW
    out_limit = output_limit(input_budget(root_window), settings.max_output_chars)
    system = prompts.system_prompt(sub_window_tokens=settings.sub_model_window or DEFAULT_WINDOW,
                                   max_output_chars=out_limit, root_window_tokens=root_window,
                                   recursion=depth + 1 < settings.max_depth, by_path=meta.get("by_path", True))
    return [{"role": "system", "content": system}, *example_messages(),
            {"role": "user", "content": prompts.first_user_prompt(
                question, corpus_metadata(meta) + (f"\n\n{note}" if note else ""))}]


def corpus_metadata(meta: CorpusMeta) -> str:
    """Constant-size description of the corpus (never its content beyond a short prefix).

    ``meta`` keys: ``chars``, ``tokens``, ``files`` (count), ``chunks``, ``top_dirs`` (list of
    ``(dir, files)``), ``types`` (list of ``(ext, files)``), ``sample_paths``, ``prefix``, and
    ``structured`` when there are structured files (see :func:`structured_metadata`).
    At most 12 folders, 12 types, 8 paths of at most 120 characters and 300 characters of
    prefix are shown, so the text is about the same size for a 1 MB and a 1 GB corpus.
    """
    top = ", ".join(f"{str(d)[:60]} ({n:,})" for d, n in meta.get("top_dirs", [])[:12]) or "(none)"
    types = ", ".join(f"{str(e)[:20]} ({n:,})" for e, n in meta.get("types", [])[:12]) or "(none)"
    samples = "\n".join(f"  {str(p)[:120]}" for p in meta.get("sample_paths", [])[:8]) or "  (none)"
    prefix = str(meta.get("prefix", ""))[:300].replace("```", "'''")
    structured = structured_metadata(meta["structured"]) if meta.get("structured") else ""
    return (f"The corpus: {meta['chars']:,} characters, about {meta['tokens']:,} tokens, "
            f"{plural(meta['files'], 'file')} in {plural(meta['chunks'], 'chunk')}.\n"
            f"Top-level folders: {top}\nFile types: {types}\nSome paths:\n{samples}\n{structured}"
            f"The first characters of `context`:\n{prefix}")


def structured_metadata(s: StructuredMeta) -> str:
    """The structured-file part of :func:`corpus_metadata`, in constant size whatever the number
    of files: totals by kind (at most 8), then at most 6 files of at most 300 characters each
    (kind, rows, bad lines, keys with a sample value, or a JSON file's shape), and a note on
    PDF page markers. Ends with a newline; empty when there is nothing to say.

    ``s`` keys: ``files``, ``rows``, ``by_kind`` (``[(kind, files, rows)]``), ``shown`` (file
    summaries with ``path``; see ``rlm_cli.corpus.structured.summarize``), ``pdf`` (count).
    """
    out = []
    if s.get("files"):
        kinds = ", ".join(f"{n:,} {str(k)[:12]}" + (f" ({r:,} rows)" if r else "")
                          for k, n, r in s.get("by_kind", [])[:8])
        out.append(f"Structured files: {s['files']:,} ({kinds}), parsed in `data[path]`; `records()` holds "
                   f"their {s.get('rows', 0):,} rows. The largest of each kind:")
        shown = s.get("shown", [])[:6]
        for m in shown:
            out.append("  " + _describe_structured(m)[:300])
        more = s["files"] - len(shown)
        if more > 0:
            out.append(f"  ... and {more:,} more (`data` lists them all)")
    if s.get("pdf"):
        out.append(f"PDF files: {s['pdf']:,}; in `context` each page starts with a line `--- page N ---`.")
    return "".join(line + "\n" for line in out)


def _describe_structured(m: FileSummary) -> str:
    """One line about one structured file: path, kind, size, problems, keys with a sample."""
    path = str(m.get("path", "?"))
    path = path if len(path) <= 80 else "..." + path[-77:]
    kind = str(m.get("kind", "?"))
    if m.get("error"):
        return f"{path}: {kind}, invalid ({str(m['error'])[:100]}, line {m.get('line', 1)})"
    parts = [kind]
    if m.get("shape"):
        parts.append(str(m["shape"])[:60])
    elif "rows" in m:
        parts.append(f"{int(m['rows']):,} row{'' if int(m['rows']) == 1 else 's'}")
    if m.get("sheets"):
        parts.append(f"sheets {', '.join(str(x)[:20] for x in m['sheets'][:4])}")
    if m.get("errors"):
        line, msg = (m.get("first_error") or [0, ""])[:2]
        parts.append(f"{int(m['errors']):,} bad line{'s' * (int(m['errors']) > 1)} (first: line {line}, {str(msg)[:60]})")
    if m.get("ragged"):
        parts.append(f"{int(m['ragged']):,} ragged rows")
    if m.get("delimiter"):
        parts.append(f"delimiter {m['delimiter']!r}")
    sample = ", ".join(f"{str(k)[:30]}={str(v)[:40]}" for k, v in (m.get("sample") or [])[:6])
    nkeys = int(m.get("nkeys", 0) or 0)
    rest = [str(k)[:30] for k in (m.get("keys") or [])[len(m.get("sample") or []):][:6]]
    keys = sample + (", " + ", ".join(rest) if rest else "") + (f" ({nkeys:,} keys)" if nkeys > 6 else "")
    return f"{path}: {'; '.join(parts)}" + (f"; keys: {keys}" if keys else "")
