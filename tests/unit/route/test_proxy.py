"""`gpumix route` as a user runs it: the console script in front of `gpumix sim serve` engines
(both subprocesses on 127.0.0.1), called with the official `openai` client and raw HTTP.

The routing file sends short prompts (< 64 tokens) to pool ``small`` and longer ones to pool
``large``; the toy tokenizer counts one token per word, so a prompt's pool is known."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from router_procs import GPUMIX, MODEL, ROUTING, Engines, Router, words


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    e = Engines("a10g=1,a100-80gb=1", speed=20.0)
    yield e
    e.kill()


@pytest.fixture(scope="module")
def router(engines: Engines, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    small, large = engines.urls
    r = Router(tmp_path_factory.mktemp("route"), [("small", small), ("large", large)])
    yield r
    r.stop()


def stream_raw(url: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], list[str]]:
    """Status, headers and the `data:` payloads of a streamed answer, read to its end."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    text = resp.read().decode()
    conn.close()
    events = [line[6:] for line in text.split("\n") if line.startswith("data: ")]
    return resp.status, {k.lower(): v for k, v in resp.getheaders()}, events


def test_requests_go_to_the_pool_the_plan_gives_their_input_bucket(router: Router) -> None:
    for prompt, pool in ((words(10), "small"), (words(200), "large"), (words(30), "small")):
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 5, "stream": True}
        status, headers, events = stream_raw(router.url, "/v1/completions", body)
        assert status == 200
        assert headers["x-gpumix-pool"] == pool
        assert events[-1] == "[DONE]"
        assert len(events) == 6  # one token per event, as vLLM streams, then [DONE]


def test_the_openai_client_streams_and_completes_through_the_router(router: Router) -> None:
    with router.client() as oai:
        chunks = list(
            oai.completions.create(model=MODEL, prompt=words(8), max_tokens=12, stream=True)
        )
        assert len(chunks) == 12 and all(len(c.choices[0].text) > 0 for c in chunks)
        done = oai.completions.create(model=MODEL, prompt=words(8), max_tokens=7)
        assert done.usage is not None and done.usage.completion_tokens == 7
        chat = oai.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": words(300)}], max_tokens=4
        )
        assert chat.choices[0].message.content
        streamed = list(
            oai.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": words(5)}], max_tokens=6,
                stream=True, stream_options={"include_usage": True},
            )
        )  # fmt: skip
        assert streamed[-1].usage is not None and streamed[-1].usage.completion_tokens == 6
        assert [m.id for m in oai.models.list()] == [MODEL]
        ids = oai.completions.create(model=MODEL, prompt=list(range(100, 180)), max_tokens=3)
        assert ids.usage is not None and ids.usage.prompt_tokens == 80


def test_the_router_counts_the_joint_input_output_histogram(router: Router) -> None:
    key = ("gpumix_router_completed_requests_total", (("input_from", "64"), ("output_from", "64")))
    before = router.metrics().get(key, 0.0)
    with router.client() as oai:
        for _ in range(3):
            list(oai.completions.create(model=MODEL, prompt=words(100), max_tokens=70, stream=True))
    after = router.metrics()
    assert after[key] - before == 3  # streams read to their end are counted, by true lengths
    decisions = after[("gpumix_router_decision_seconds_count", ())]
    assert decisions >= 3


def test_bad_requests_get_openai_style_errors(router: Router) -> None:
    req = urllib.request.Request(
        f"{router.url}/v1/completions", b"not json", {"Content-Type": "application/json"}
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=5)
    assert err.value.code == 400
    assert "not JSON" in json.loads(err.value.read())["error"]["message"]
    with router.client() as oai, pytest.raises(openai.BadRequestError):
        oai.completions.create(model=MODEL, prompt=words(5), max_tokens=0)  # the engine's 400


def test_a_pod_that_is_down_is_retried_on_another_before_the_first_byte(
    engines: Engines, tmp_path: Path
) -> None:
    # A port held bound but not listening refuses connections for the whole test (a port only
    # probed free could be handed to the router itself, which would then answer for the dead pod).
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{held.getsockname()[1]}"
    small, large = engines.urls
    r = Router(tmp_path, [("small", dead), ("small", small), ("large", large)])
    try:
        with r.client() as oai:
            for _ in range(4):
                out = oai.completions.create(model=MODEL, prompt=words(5), max_tokens=3)
                assert out.usage is not None and out.usage.completion_tokens == 3
        retried = sum(
            v for (name, _), v in r.metrics().items() if name == "gpumix_router_retries_total"
        )
        assert retried >= 1
    finally:
        r.stop()
        held.close()


def test_an_engine_killed_mid_stream_ends_the_stream_with_an_error(tmp_path: Path) -> None:
    doomed = Engines("a10g=1", speed=1.0)
    r = Router(tmp_path, [("small", doomed.urls[0]), ("large", doomed.urls[0])])
    try:
        conn, resp = r.open_stream(5, 2000)
        doomed.kill()
        started = time.monotonic()
        rest = resp.read().decode()  # returns: the router ends the stream
        assert time.monotonic() - started < 10
        events = [line[6:] for line in rest.split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert "stopped before the answer ended" in json.loads(events[-2])["error"]["message"]
        conn.close()
    finally:
        r.stop()
        if doomed.proc.poll() is None:
            doomed.kill()


def test_a_hung_engine_is_left_for_another_before_the_first_byte_and_ends_a_stream_after(
    engines: Engines, tmp_path: Path
) -> None:
    hung = Engines("a10g=1", speed=1.0)
    small = engines.urls[0]
    r = Router(tmp_path, [("small", hung.urls[0]), ("large", hung.urls[0]), ("small", small)],
               "--engine-timeout", "1")  # fmt: skip
    try:
        # Mid-stream: the stream ends with an error event about a second after the engine hangs.
        conn, resp = r.open_stream(5, 2000)
        hung.freeze()
        started = time.monotonic()
        rest = resp.read().decode()
        assert time.monotonic() - started < 10
        events = [line[6:] for line in rest.split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        assert "stopped before the answer ended" in json.loads(events[-2])["error"]["message"]
        conn.close()
        # Before the first byte: small requests that land on the hung pod are tried on the other.
        with r.client() as oai:
            for _ in range(4):
                out = oai.completions.create(model=MODEL, prompt=words(5), max_tokens=3)
                assert out.usage is not None and out.usage.completion_tokens == 3
        retries = {
            labels: v for (name, labels), v in r.metrics().items()
            if name == "gpumix_router_retries_total"
        }  # fmt: skip
        assert retries and all("Timeout" in dict(k)["reason"] for k in retries), retries
    finally:
        r.stop()
        hung.kill()


def test_a_client_that_disconnects_aborts_the_request_on_the_engine(tmp_path: Path) -> None:
    engine = Engines("a10g=1", speed=1.0)
    r = Router(tmp_path, [("small", engine.urls[0]), ("large", engine.urls[0])])
    try:
        conn, _ = r.open_stream(5, 2000)
        conn.sock.shutdown(socket.SHUT_RDWR)
        conn.close()
        deadline = time.monotonic() + 10
        while aborted(engine.urls[0]) < 1:
            assert time.monotonic() < deadline, "the engine never saw the disconnect"
            time.sleep(0.1)
    finally:
        r.stop()
        engine.kill()


def aborted(url: str) -> float:
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "gpumix_sim:aborted_requests_total"
    )


def test_a_pool_at_its_inflight_limit_sheds_with_429(engines: Engines, tmp_path: Path) -> None:
    small, large = engines.urls
    r = Router(tmp_path, [("small", small), ("large", large)], "--max-inflight-per-pod", "1")
    try:
        holder, _ = r.open_stream(5, 400)
        with r.client() as oai:
            with pytest.raises(openai.RateLimitError):
                oai.completions.create(model=MODEL, prompt=words(5), max_tokens=2)
            out = oai.completions.create(model=MODEL, prompt=words(100), max_tokens=2)  # large
            assert out.usage is not None
        holder.close()
        shed = r.metrics()[("gpumix_router_shed_requests_total", (("pool", "small"),))]
        assert shed == 1
    finally:
        r.stop()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--routing-file", "routing.json"], "needs at least one --engine"),
        (["--engine", "small=http://x:1"], "either --service or --routing-file"),
        (["--routing-file", "routing.json", "--engine", "no=http://x:1"], "not in the routing"),
        (["--routing-file", "missing.json", "--engine", "small=http://x:1"], "No such file"),
        (["--routing-file", "routing.json", "--engine", "small"], "is not POOL=http://HOST:PORT"),
        (["--engine", "small=http://x:1", "--max-inflight-per-pod", "0"], "at least 1"),
        (["--engine", "small=http://x:1", "--engine-timeout", "0"], "--engine-timeout"),
        (["--routing-file", "routing.json", "--engine", "small=http://x:1", "--migratable",
          "--admin-port", "0"], "--migratable needs the admin API"),
    ],
)  # fmt: skip
def test_bad_router_flags_say_what_to_fix(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "routing.json").write_text(json.dumps(ROUTING))
    out = subprocess.run(
        [*GPUMIX, "route", *args],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_concurrent_streams_all_finish(router: Router) -> None:
    results: list[int] = []

    def one(k: int) -> None:
        body = {"model": MODEL, "prompt": words(5 + k), "max_tokens": 20, "stream": True}
        status, _, events = stream_raw(router.url, "/v1/completions", body)
        results.append(len(events) if status == 200 else -status)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(results) == [21] * 40
