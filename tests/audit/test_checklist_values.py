"""A checklist comes with the code audited (a pull request's): a TOML value no answer can be (a
date or time, ``nan``, ``inf``), or a glob pathspec cannot compile, is a usage error naming the
check and field, read before anything loads (before: the check ran, then "internal error:
TypeError: Object of type datetime is not JSON serializable" in every report; an internal error
``GitIgnorePatternError`` once the check with ``exclude = "!"`` began)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_cli.audit.checklist import read_checklist
from rlm_cli.errors import UsageError


@pytest.mark.parametrize(("fields", "said"), [
    ('type = "json"\nexpect = 1979-05-27T07:32:00Z', "field 'expect' holds a TOML date or time"),
    ('type = "json"\nexpect = {a = [07:32:00]}', "field 'expect' holds a TOML date or time"),
    ('type = "list"\nequals = [1979-05-27]', "field 'equals' holds a TOML date or time"),
    ('type = "number"\nexpect = nan', "field 'expect' holds nan or inf"),
    ('type = "json"\nexpect = [1, -inf]', "field 'expect' holds nan or inf"),
    ('type = "number"\nmin = -inf', "field 'min' must be a finite number"),
    ('type = "number"\nmax = nan', "field 'max' must be a finite number"),
    ('max_cost = nan', "field 'max_cost' must be a number of USD"),
    ('max_cost = inf', "field 'max_cost' must be a number of USD"),
    ('include = ["src/", "[z-a]"]', "field 'include' holds a pattern that is not a gitignore glob"),
    ('exclude = "!"', "field 'exclude' holds a pattern that is not a gitignore glob"),
])
def test_a_value_no_answer_can_be_is_refused(tmp_path: Path, fields: str, said: str) -> None:
    path = tmp_path / "rlm-audit.toml"
    path.write_text(f'[[check]]\nid = "a"\nquestion = "q?"\n{fields}\n')
    with pytest.raises(UsageError, match=f"check 'a': {said}"):
        read_checklist(path)


def test_finite_values_and_strings_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "rlm-audit.toml"
    path.write_text('[[check]]\nid = "a"\nquestion = "q?"\ntype = "json"\nexpect = {at = "1979-05-27", n = [1.5]}\n'
                    '[[check]]\nid = "b"\nquestion = "q?"\ntype = "number"\nmin = -1.5\nmax = 2\nmax_cost = 0.5\n')
    a, b = read_checklist(path).checks
    assert a.expect == {"at": "1979-05-27", "n": [1.5]} and (b.min, b.max, b.max_cost) == (-1.5, 2, 0.5)
