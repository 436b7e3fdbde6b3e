"""What the root model is told about the corpus before its first turn: constant-size metadata
(``corpus_meta``, ``text_meta``) and the first messages of a loop (``first_messages``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from rlm_cli.config import Settings
from rlm_cli.corpus import Corpus, FileEntry
from rlm_cli.loop import prompts
from rlm_cli.loop.examples import example_messages
from rlm_cli.loop.history import output_limit
from rlm_cli.models.detect import DEFAULT_WINDOW
from rlm_cli.models.window import input_budget
from rlm_cli.protocol import context_by_path


def corpus_meta(corpus: Corpus) -> dict[str, Any]:
    """The constant-size metadata dict for ``prompts.corpus_metadata`` (never decodes the whole corpus)."""
    top: Counter[str] = Counter()
    types: Counter[str] = Counter()
    for f in corpus.files:
        head, sep, _ = f.path.lstrip("/").partition("/")
        top[head + "/" if sep else "."] += 1
        name = f.path.rsplit("/", 1)[-1]
        types[name[name.rfind("."):] if "." in name[1:] else "(none)"] += 1
    step = max(1, len(corpus.files) // 8)
    meta = {"chars": corpus.chars, "tokens": corpus.total_tokens, "files": len(corpus.files),
            "chunks": len(corpus.chunks), "top_dirs": top.most_common(12), "types": types.most_common(12),
            "sample_paths": [f.path for f in corpus.files[::step][:8]], "prefix": corpus.head(300),
            "by_path": context_by_path(corpus.chars, corpus.char_width)}
    structured = structured_meta(corpus)
    if structured:
        meta["structured"] = structured
    return meta


#: Structured files described one by one in the root model's metadata (the largest first).
STRUCTURED_SHOWN = 6


def structured_meta(corpus: Corpus) -> dict[str, Any] | None:
    """The structured files of ``corpus`` for ``prompts.corpus_metadata``, in constant size:
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
            "shown": [{"path": f.path, **(f.dmeta or {})} for f in largest], "pdf": pdfs}


def text_meta(text: str) -> dict[str, Any]:
    """Metadata for an ``rlm_query`` context passed as a string (no files, no chunks)."""
    return {"chars": len(text), "tokens": max(1, len(text) // 4) if text else 0, "files": 1, "chunks": 0,
            "prefix": text[:300]}


def first_messages(settings: Settings, question: str, meta: dict[str, Any], depth: int = 0,
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
                question, prompts.corpus_metadata(meta) + (f"\n\n{note}" if note else ""))}]
