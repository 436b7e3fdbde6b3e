"""The JSON shapes of ``rlm_cli.shapes`` against what builds them."""

from __future__ import annotations

import json
from pathlib import Path

import rlm_cli
from rlm_cli.models.limiter import AdaptiveLimiter
from rlm_cli.models.usage import CallRecord, Usage
from rlm_cli.output.answer import json_text
from rlm_cli.shapes import UsageDoc, UsageGroup, no_usage


def test_no_usage_is_the_summary_of_a_usage_with_no_call() -> None:
    assert json_text(no_usage()) == json_text(Usage().summary())


def test_a_usage_summary_has_the_keys_the_schema_requires_and_none_its_shape_lacks() -> None:
    usage = Usage(limiter=AdaptiveLimiter(4))
    usage.add(CallRecord("m", "root", 0, 10, 2, None, 0.5))
    usage.count("retries")
    doc = json.loads(json_text(usage.summary()))
    schema = json.loads((Path(rlm_cli.__file__).parent / "schemas" / "ask-result.v1.json").read_text(encoding="utf-8"))
    assert set(schema["$defs"]["usage"]["required"]) <= set(doc) <= set(UsageDoc.__annotations__)
    assert set(schema["$defs"]["group"]["required"]) <= set(doc["root"]) <= set(UsageGroup.__annotations__)
    assert doc["root"]["calls"] == 1 and doc["cost_usd"] is None and doc["retries"] == 1 and "concurrency" in doc
