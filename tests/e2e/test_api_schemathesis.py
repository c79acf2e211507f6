"""schemathesis against the OpenAPI document the running api serves: every operation gets a
bounded number of generated requests, valid ones and invalid ones, and no answer may be a
5xx or stray from the document (status codes, content types, headers, response schemas);
invalid requests must be refused with a 4xx.

Driven through hypothesis directly rather than schemathesis' pytest plugin, whose lazy
fixture loading does not work with this pytest version."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency (pyproject [dev])")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from memwright.auth import mint  # noqa: E402
from memwright.settings import AuthSettings  # noqa: E402

from tests.conftest import JWT_SECRET  # noqa: E402
from tests.e2e.conftest import Pipeline  # noqa: E402

MAX_EXAMPLES = 25  # per operation and mode: 11 operations x 2 modes x 25 = at most 550 requests


def _token() -> dict[str, str]:
    # a token per request: the per-token rate limit must not turn this run into a run of 429s
    token = mint(AuthSettings(jwt_secret=JWT_SECRET), f"service:schemathesis-{uuid.uuid4().hex[:8]}", ["admin"])
    return {"Authorization": f"Bearer {token}"}


def _exercise(operation: Any, mode: Any) -> int:
    calls = 0

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def run(case: Any) -> None:
        nonlocal calls
        calls += 1
        case.call_and_validate(headers=_token(), timeout=10)

    run()
    return calls


def test_generated_requests_never_get_a_5xx_or_an_undocumented_answer(pipeline: Pipeline) -> None:
    schema = schemathesis.openapi.from_url(f"{pipeline.api}/v1/openapi.json", headers=pipeline.auth(), timeout=10)
    operations = [result.ok() for result in schema.get_all_operations()]
    # every operation of the document (schemathesis leaves out the document's own URL)
    assert len(operations) == 10, [op.label for op in operations]
    failures, calls = [], 0
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        for operation in operations:
            try:
                calls += _exercise(operation, mode)
            except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, then report them all
                failures.append(f"{mode.value} {operation.label}:\n{exc}")
    assert not failures, "\n\n".join(failures)
    assert calls >= 10 * 2 * 5, f"only {calls} requests were generated"
