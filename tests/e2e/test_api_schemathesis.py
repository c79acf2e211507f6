"""schemathesis against the OpenAPI document the running api serves: every operation gets a
bounded number of generated requests, valid ones and invalid ones, and no answer may be a
5xx or stray from the document (status codes, content types, headers, response schemas);
invalid requests must be refused with a 4xx. Then what the document cannot describe: hostile bodies
(integers over Python's 4,300 digits, nesting past the recursion limit, arbitrary JSON and bytes)
to the api's write routes and to ingest, and clients hanging up mid-body; afterwards neither
service has counted a single 5xx in its request metrics.

Driven through hypothesis directly rather than schemathesis' pytest plugin, whose lazy
fixture loading does not work with this pytest version."""

from __future__ import annotations

import json
import re
import socket
import time
import uuid
from typing import Any

import pytest
import requests

schemathesis = pytest.importorskip("schemathesis", reason="schemathesis is a dev dependency (pyproject [dev])")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
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
        headers = _token()
        response = case.call(headers=headers, timeout=10)
        # invariant 11: a user-written memory holding a secret or an instruction is refused with a 400,
        # which no JSON schema can describe; every other check still applies to that answer
        refused = response.status_code == 400 and "this memory is refused" in response.text
        excluded = [schemathesis.checks.positive_data_acceptance] if refused else None
        case.validate_response(response, headers=headers, excluded_checks=excluded)

    run()
    return calls


def test_generated_requests_never_get_a_5xx_or_an_undocumented_answer(pipeline: Pipeline) -> None:
    schema = schemathesis.openapi.from_url(f"{pipeline.api}/v1/openapi.json", headers=pipeline.auth(), timeout=10)
    operations = [result.ok() for result in schema.get_all_operations()]
    # every operation of the document (schemathesis leaves out the document's own URL)
    assert len(operations) == 11, [op.label for op in operations]
    failures, calls = [], 0
    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        for operation in operations:
            try:
                calls += _exercise(operation, mode)
            except (Exception, BaseExceptionGroup) as exc:  # collect every operation's failure, then report them all
                failures.append(f"{mode.value} {operation.label}:\n{exc}")
    assert not failures, "\n\n".join(failures)
    assert calls >= 11 * 2 * 5, f"only {calls} requests were generated"


# ---- what the document cannot describe ---------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=10,
)
HOSTILE = st.one_of(
    JSON.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=100),
    st.integers(4_301, 6_000).map(lambda n: b'{"text": ' + b"7" * n + b"}"),
    st.integers(4_301, 6_000).map(lambda n: b'{"text": "x", "kind": ' + b"7" * n + b"}"),
    st.integers(4_301, 6_000).map(lambda n: b'{"schema_version": 1, "user_id": "u", "text": ' + b"7" * n + b"}"),
    st.integers(1_000, 8_000).map(lambda n: b"[" * n + b"]" * n),  # within the api's 16 KiB
    st.integers(1_000, 5_000).map(lambda n: b'{"text": ' * n + b"1" + b"}" * n),
)


def _five_hundreds(ops_url: str, metric: str) -> dict[str, float]:
    page = requests.get(f"{ops_url}/metrics", timeout=10).text
    found = {}
    for line in page.splitlines():
        if line.startswith(metric + "{") and re.search(r'code="5\d\d"', line):
            labels, value = line.rsplit(" ", 1)
            if float(value) > 0:
                found[labels] = float(value)
    return found


def _hang_up(port: int, path: str, token: str) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n"
            "Content-Type: application/json\r\nContent-Length: 5000\r\n\r\n"
        )
        sock.sendall(head.encode() + b'{"text": "half a bo')
        time.sleep(0.05)


def test_hostile_bodies_and_clients_hanging_up_never_get_or_count_a_5xx(pipeline: Pipeline) -> None:
    token = mint(AuthSettings(jwt_secret=JWT_SECRET), "service:fuzz", ["signals:write", "memories:write"])
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    targets = [  # {user}: a fresh user each request, so no 429 stands in front of the body
        ("POST", f"{pipeline.api}/v1/users/{{user}}/memories"),
        ("PATCH", f"{pipeline.api}/v1/users/{{user}}/memories/{uuid.uuid4()}"),
        ("POST", f"{pipeline.ingest}/v1/signals"),
    ]
    answers: dict[int, int] = {}

    @given(body=HOSTILE, target=st.sampled_from(targets))
    @example(body=b"[" * 8_000 + b"]" * 8_000, target=targets[0])
    @example(body=b"[" * 50_000 + b"]" * 50_000, target=targets[2])
    @settings(max_examples=150, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    def run(body: bytes, target: tuple[str, str]) -> None:
        method, url = target
        url = url.format(user=f"fuzz-{uuid.uuid4().hex[:12]}")
        r = requests.request(method, url, data=body, headers=headers, timeout=10)
        answers[r.status_code] = answers.get(r.status_code, 0) + 1
        assert r.status_code < 500, (method, url, r.status_code, r.text[:300], body[:100])
        assert r.status_code == 202 or r.json()["error"], r.text[:300]

    run()
    for name, path in (("api", "/v1/users/hang-up-{i}/memories"), ("ingest", "/v1/signals")):
        for i in range(3):
            _hang_up(pipeline.procs.http_port(name), path.format(i=i), token)
    time.sleep(0.5)
    assert set(answers) <= {202, 400, 404, 413, 429}, answers
    assert _five_hundreds(pipeline.procs.ops_url("api"), "memwright_api_requests_total") == {}
    assert _five_hundreds(pipeline.procs.ops_url("ingest"), "memwright_ingest_requests_total") == {}
    page = requests.get(pipeline.procs.ops_url("ingest") + "/metrics", timeout=10).text
    assert re.search(r'memwright_ingest_requests_total\{code="499"\} [1-9]', page), "the hang-ups were not counted"
    page = requests.get(pipeline.procs.ops_url("api") + "/metrics", timeout=10).text
    assert re.search(r'^memwright_api_requests_total\{code="499",.*\} [1-9]', page, re.M), "nor by the api"
