"""Check ids are matched whole (issue 47): an id ending in a newline (``$`` would take it) is a
usage error naming the field, so it never reaches a report's table or a workflow command."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlm_cli.audit.checklist import read_checklist
from rlm_cli.errors import UsageError


@pytest.mark.parametrize("cid", ["a\\n", "a\\r", "a b", "a|b", "-a", "a\\u2028"])
def test_an_id_that_is_not_a_whole_name_is_refused(tmp_path: Path, cid: str) -> None:
    path = tmp_path / "rlm-audit.toml"
    path.write_text(f'[[check]]\nid = "{cid}"\nquestion = "q?"\n')
    with pytest.raises(UsageError, match="field 'id' must be a name"):
        read_checklist(path)


def test_a_good_id_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "rlm-audit.toml"
    path.write_text('[[check]]\nid = "no-eval.v2_x"\nquestion = "q?"\n')
    assert read_checklist(path).checks[0].id == "no-eval.v2_x"
