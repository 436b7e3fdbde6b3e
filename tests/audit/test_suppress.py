"""Inline suppressions (``rlm_cli.audit.suppress``): the marker in every comment syntax, on the
finding's line or alone on the line above, the reason, and what does not count."""

from __future__ import annotations

import pytest

from rlm_cli.audit.suppress import bare_marker, suppression_for

CHECK = "no-eval"


@pytest.mark.parametrize(("lines", "line", "expected"), [
    # on the finding's line, in many languages' comment syntax
    (["x = eval(s)  # rlm-audit: ignore[no-eval] input is a constant"], 1, ("input is a constant", 1)),
    (["eval(s); // rlm-audit: ignore[no-eval] fixture"], 1, ("fixture", 1)),
    (["SELECT 1 -- rlm-audit: ignore[no-eval] reviewed"], 1, ("reviewed", 1)),
    (["eval(s) /* rlm-audit: ignore[no-eval] legacy */"], 1, ("legacy", 1)),
    (["<b>eval</b> <!-- rlm-audit: ignore[no-eval] docs only -->"], 1, ("docs only", 1)),
    (["(eval s) ; rlm-audit: ignore[no-eval] lisp"], 1, ("lisp", 1)),
    (["eval(s) % rlm-audit: ignore[no-eval] matlab"], 1, ("matlab", 1)),
    (["{{ eval }} {# rlm-audit: ignore[no-eval] jinja #}"], 1, ("jinja", 1)),
    # several ids, spaces, no reason, a separator before the reason
    (["eval(s)  # rlm-audit: ignore[other, no-eval]"], 1, ("", 1)),
    (["eval(s)  # RLM-AUDIT:   IGNORE[no-eval]: - why not"], 1, ("why not", 1)),
    # alone on the line above (any indentation, any comment opener)
    (["def f(s):", "    # rlm-audit: ignore[no-eval] sandboxed", "    return eval(s)"], 3, ("sandboxed", 2)),
    (["/*", " * rlm-audit: ignore[no-eval] block", " */ eval(s)"], 3, ("block", 2)),
    (["# rlm-audit: ignore[no-eval] two up", "", "eval(s)"], 3, None),  # two lines up: no
    (["// rlm-audit: ignore[no-eval] above", "eval(s)"], 2, ("above", 1)),
    # a trailing comment of the statement above does not reach the next line
    (["x = 1  # rlm-audit: ignore[no-eval] for x", "eval(s)"], 2, None),
    # another check's id, a prefix of the id, a bare marker, an unrelated word
    (["eval(s)  # rlm-audit: ignore[no-eva] typo"], 1, None),
    (["eval(s)  # rlm-audit: ignore[no-eval-2]"], 1, None),
    (["eval(s)  # rlm-audit: ignore everything"], 1, None),
    (["eval(s)  # rlm-audit: ignored[no-eval]"], 1, None),
    # the line below never counts; out of range lines have none
    (["eval(s)", "# rlm-audit: ignore[no-eval] below"], 1, None),
    (["# rlm-audit: ignore[no-eval]"], 5, None),
    ([], 1, None),
])
def test_suppression_for(lines: list[str], line: int, expected: tuple[str, int] | None) -> None:
    got = suppression_for(lines, line, CHECK)
    assert (None if got is None else got.reason) == (None if expected is None else expected[0])
    assert got is None or got.kind == "inSource"


def test_bare_markers() -> None:
    assert bare_marker(["eval(s)  # rlm-audit: ignore"], 1) == 1
    assert bare_marker(["# rlm-audit: ignore", "eval(s)"], 2) == 1
    assert bare_marker(["eval(s)  # rlm-audit: ignore[no-eval]"], 1) is None
    assert bare_marker(["eval(s)"], 1) is None


def test_apply_sets_suppressions_and_reports_bare_markers() -> None:
    from rlm_cli.audit.suppress import apply
    from rlm_cli.output.findings import Finding, Region

    files = {"a.py": ["x = eval(s)  # rlm-audit: ignore[no-eval] fixture", "y = eval(t)  # rlm-audit: ignore"]}
    found = [Finding(CHECK, "a.py", Region(n, n), f"fp{n}", "m", "error") for n in (1, 2)]
    found.append(Finding(CHECK, "gone.py", Region(1, 1), "fp3", "m", "error"))  # unreadable: as it was
    out, bare = apply(found, files.get)
    assert [None if f.suppression is None else f.suppression.reason for f in out] == ["fixture", None, None]
    assert [f.failing for f in out] == [False, True, True] and bare == ["a.py:2"]
