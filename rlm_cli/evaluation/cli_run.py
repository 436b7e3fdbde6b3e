"""The ``rlm eval`` command's core: load the corpus once, generate, run, summarize.

Kept out of ``rlm_cli.commands.evaluate`` so the command function stays short; it renders nothing itself beyond
what it passes to the ``ui`` object (``render.Renderer``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlm_cli.config import Settings
from rlm_cli.errors import UsageError
from rlm_cli.evaluation.harness import MODES, QuestionResult, corpus_text, run_eval, summarize
from rlm_cli.evaluation.phrasing import SPLITS
from rlm_cli.evaluation.report import document, markdown, summary_table
from rlm_cli.evaluation.tasks import FAMILIES, generate
from rlm_cli.events import EventDict, is_type

if TYPE_CHECKING:
    from rlm_cli.output.ui import UI


def evaluate(settings: Settings, paths: list[str], *, families: list[str], modes: list[str], limit: int, seed: int,
             jobs: int, records: int, ui: UI, command: str = "", split: str = "dev") -> tuple[dict[str, Any], str]:
    """Run the evaluation; returns the ``--json`` document and the Markdown report.

    Raises:
        UsageError: unknown family or mode, stdin as corpus, bad paths, an empty corpus, or no
            question could be generated.
        NoModelError: no model configured or detected.
        ProviderError: a fatal provider error (authentication, unknown model).
    """
    from rlm_cli.corpus import load_corpus
    from rlm_cli.models.detect import ensure_model

    bad = [f for f in families if f not in FAMILIES]
    if bad:
        raise UsageError(f"unknown family {bad[0]!r}", hint=f"choose from {', '.join(FAMILIES)}")
    if split not in SPLITS:
        raise UsageError(f"unknown split {split!r}", hint=f"choose from {', '.join(SPLITS)}")
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise UsageError(f"unknown mode {bad[0]!r}", hint=f"choose from {', '.join(MODES)}")
    if "-" in paths:
        raise UsageError("rlm eval needs files or folders, not '-' (stdin)")
    settings = ensure_model(settings, ui.info)
    corpus = load_corpus(paths, settings.corpus, on_warning=ui.warning)
    try:
        ui.info(f"corpus {corpus.summary()}")
        generated = generate(families, corpus_text(corpus), limit=limit, seed=seed, records=records, split=split)
        for fam, tasks in generated.items():
            if not tasks:
                ui.warning(f"family {fam}: no question could be generated from this corpus"
                           + (" (it has no parsable Python files)" if fam == "code" else ""))
        tasks = [t for fam in families for t in generated[fam]]
        if not tasks:
            raise UsageError("no question could be generated from this corpus", hint="try other --families")
        total = len(tasks) * len(modes)
        seen: set[str] = set()
        seen_lock = threading.Lock()

        def emit(ev: EventDict) -> None:  # each distinct warning once, not once per question
            if is_type(ev, "notice") and ev.get("level") == "warning" and not ev.get("verbose_only"):
                with seen_lock:
                    if ev["message"] in seen:
                        return
                    seen.add(ev["message"])
                ui.warning(str(ev["message"]))

        with ui.eval_progress(total) as progress:
            results = run_eval(settings, paths, corpus, tasks, modes=modes, jobs=jobs,
                               on_result=lambda r: progress(_line(r)), emit=emit)
    finally:
        if corpus.temporary:
            shutil.rmtree(corpus.bundle_dir, ignore_errors=True)
    groups = summarize(results)
    meta = {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "model": settings.model,
            "sub_model": settings.effective_sub_model, "corpus": {"files": len(corpus.files),
                                                                  "tokens": corpus.total_tokens,
                                                                  "bytes": corpus.total_bytes},
            "paths": [os.path.abspath(p) for p in paths], "split": split, "seed": seed, "families": families,
            "modes": modes, "limit": limit, "records": records, "policy": settings.policy, "sandbox": settings.sandbox,
            "command": command}
    return document(meta, groups, results), markdown(meta, groups, results)


def _line(r: QuestionResult) -> str:
    mark = {True: "correct", False: "WRONG", None: "not run"}[r.correct]
    extra = f" ({r.error})" if r.status == "does_not_fit" else f", {r.iterations} it, {r.elapsed_s:.1f} s"
    return f"{r.task.id} [{r.mode}] {mark}: {r.status}{extra}"


def summary_text(doc: dict[str, Any]) -> str:
    """What ``rlm eval`` prints on stdout without ``--json``: the Markdown summary table and the
    trajectory ids of the wrong answers."""
    from rlm_cli.evaluation.harness import GroupSummary

    groups = [GroupSummary(**{k: v for k, v in g.items() if k != "accuracy"}) for g in doc["summary"]]
    wrong = [r for r in doc["results"] if r["correct"] is False]
    text = summary_table(groups)
    support = doc.get("support") or []
    if support:  # per support verdict: the answers rlm stands behind against the rest
        text += "\n\nSupport: " + ", ".join(f"{s['verdict']} {s['correct']}/{s['answers']} right" for s in support)
    if wrong:
        text += "\n\nWrong (see `rlm trace show ID`):\n" + "\n".join(
            f"- {r['id']} [{r['mode']}] {r['status']}: {r['run_id'] or '(no trajectory)'}" for r in wrong)
    return text


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename, so
    the file is either the old one or the whole new one.

    Raises:
        UsageError: the folder does not exist or cannot be written.
    """
    folder = path.parent if str(path.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
