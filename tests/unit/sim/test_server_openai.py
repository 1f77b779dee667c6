"""The sim server's vLLM OpenAI surface, through the official `openai` client and raw HTTP: chat
and text completions (streamed one token per chunk at the simulated pace), token ids in and out,
/tokenize, the toy model's continuation property, and abort on disconnect."""

from __future__ import annotations

import http.client
import itertools
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Any

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sim_helpers import pods

from gpumix.sim.engine import Engine
from gpumix.sim.request import Request
from gpumix.sim.server import (
    EOS,
    VOCAB,
    PodServer,
    RealtimePod,
    detokenize,
    next_token,
    tokenize,
)

MODEL = "llama-2-7b"
FAST = 20.0  # simulated seconds per wall second where only the answers matter


def serve(stack: ExitStack, gpu: str = "a100-80gb", speed: float = FAST) -> PodServer:
    (engine,) = pods(gpu)
    return stack.enter_context(PodServer(RealtimePod(engine, MODEL, speed)))


def client(stack: ExitStack, server: PodServer) -> openai.OpenAI:
    return stack.enter_context(
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="sim", max_retries=0, timeout=20)
    )


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


@pytest.fixture
def server(stack: ExitStack) -> PodServer:
    return serve(stack)


@pytest.fixture
def oai(stack: ExitStack, server: PodServer) -> openai.OpenAI:
    return client(stack, server)


def post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, json.loads(err.read())


def metrics(server: PodServer) -> dict[tuple[str, str], float]:
    """(sample name, finished_reason or "") → value."""
    with urllib.request.urlopen(f"{server.url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    return {(s.name, s.labels.get("finished_reason", "")): s.value
            for f in text_string_to_metric_families(text) for s in f.samples}  # fmt: skip


def extra(obj: Any, name: str) -> Any:
    """A vLLM field the openai models do not declare (kept as an extra)."""
    return (obj.model_extra or {}).get(name)


def oai_ids(oai: openai.OpenAI, prompt: list[int], n: int, body: dict[str, Any]) -> list[int]:
    out = oai.completions.create(model=MODEL, prompt=prompt, max_tokens=n, extra_body=body)
    ids: list[int] = extra(out.choices[0], "token_ids")
    return ids


def wait(condition: Callable[[], object], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_chat_completion_as_vllm_answers_it(server: PodServer, oai: openai.OpenAI) -> None:
    messages: Any = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    out = oai.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=7, extra_body={"return_token_ids": True}
    )
    assert out.object == "chat.completion" and out.model == MODEL
    (choice,) = out.choices
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    token_ids = extra(choice, "token_ids")
    assert len(token_ids) == 7 and choice.message.content == detokenize(token_ids)
    _, tokenized = post(f"{server.url}/tokenize", {"model": MODEL, "messages": messages})
    assert extra(out, "prompt_token_ids") == tokenized["tokens"]
    assert out.usage is not None
    assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (tokenized["count"], 7)
    # max_completion_tokens wins over max_tokens, as in vLLM
    again = oai.chat.completions.create(
        model=MODEL, messages=messages, max_tokens=7, max_completion_tokens=3
    )
    assert again.choices[0].message.content == detokenize(token_ids[:3])


def test_chat_stream_opens_with_the_role_and_ends_with_usage(oai: openai.OpenAI) -> None:
    chunks = list(
        oai.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "tell me"}],
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    role, *tokens, usage = chunks
    assert role.choices[0].delta.role == "assistant" and role.choices[0].delta.content == ""
    assert len(tokens) == 5 and all(c.usage is None for c in tokens)
    assert [c.choices[0].finish_reason for c in tokens] == [None] * 4 + ["length"]
    assert all(c.choices[0].delta.content.startswith(" w") for c in tokens)
    assert usage.choices == [] and usage.usage is not None
    prompt = 4  # <|user|> tell me <|assistant|>
    assert usage.usage.completion_tokens == 5 and usage.usage.total_tokens == 5 + prompt


def test_completion_takes_token_ids_and_returns_them(oai: openai.OpenAI) -> None:
    prompt = [1, 450, 4996, 17354, 1701, 29916]
    out = oai.completions.create(
        model=MODEL, prompt=prompt, max_tokens=12, extra_body={"return_token_ids": True}
    )
    (choice,) = out.choices
    token_ids = extra(choice, "token_ids")
    assert extra(choice, "prompt_token_ids") == prompt and len(token_ids) == 12
    assert choice.text == detokenize(token_ids) and out.usage is not None
    assert out.usage.prompt_tokens == len(prompt)
    stream = list(
        oai.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=12,
            stream=True,
            extra_body={"return_token_ids": True},
        )
    )
    # streamed: the prompt's ids once, in the first chunk; one generated id per chunk
    assert extra(stream[0].choices[0], "prompt_token_ids") == prompt
    assert all(extra(c.choices[0], "prompt_token_ids") is None for c in stream[1:])
    assert [t for c in stream for t in extra(c.choices[0], "token_ids")] == token_ids
    assert "".join(c.choices[0].text for c in stream) == choice.text


def test_stream_sends_one_token_per_chunk_at_the_simulated_pace(stack: ExitStack) -> None:
    (engine,) = pods("a100-80gb")
    prompt, output, step_wall = 100, 50, 0.01
    speed = engine.roof.step_s(1, prompt + output / 2) / step_wall  # a decode step: ~10 ms wall
    server = stack.enter_context(PodServer(RealtimePod(engine, MODEL, speed)))
    oai = client(stack, server)
    oai.models.list()  # warm the client up
    arrivals = []
    for chunk in oai.completions.create(
        model=MODEL,
        prompt=[7] * prompt,
        max_tokens=output,
        stream=True,
        extra_body={"ignore_eos": True},
    ):
        arrivals.append(time.monotonic())
        assert len(chunk.choices[0].text.split()) == 1
    assert len(arrivals) == output
    span = arrivals[-1] - arrivals[0]  # the decode steps after the first token
    assert 0.5 * (output - 1) * step_wall < span < 3 * (output - 1) * step_wall + 1.0
    gaps = sorted(b - a for a, b in itertools.pairwise(arrivals))
    assert gaps[len(gaps) // 2] > 0.3 * step_wall  # spread out, not delivered in bursts


def test_tokenize_detokenize_round_trip(server: PodServer) -> None:
    code, out = post(f"{server.url}/tokenize", {"model": MODEL, "prompt": "to be or not to be"})
    assert code == 200 and out["count"] == 6 and out["tokens"] == tokenize("to be or not to be")
    assert out["tokens"][:2] == out["tokens"][4:] and out["token_strs"] is None
    assert out["max_model_len"] == server.pod.engine.max_tokens
    code, text = post(f"{server.url}/detokenize", {"model": MODEL, "tokens": out["tokens"]})
    assert code == 200 and text["prompt"] == "".join(f" w{t}" for t in out["tokens"])
    _, again = post(f"{server.url}/tokenize", {"prompt": text["prompt"], "return_token_strs": True})
    assert again["tokens"] == out["tokens"]
    assert again["token_strs"] == [f"w{t}" for t in out["tokens"]]
    _, chat = post(f"{server.url}/tokenize", {"messages": [{"role": "user", "content": "a b"}]})
    assert chat["count"] == 4  # <|user|> a b <|assistant|>


def test_a_request_continued_elsewhere_produces_the_same_tokens(stack: ExitStack) -> None:
    """Tokens are a function of the token sequence alone: a request restarted on another pod
    from prompt + generated ids, with `max_tokens` reduced, yields exactly the rest."""
    origin, other = client(stack, serve(stack)), client(stack, serve(stack, "a10g"))
    words, n = "the quick brown fox", 24
    prompt, body = tokenize(words), {"return_token_ids": True, "ignore_eos": True}
    full = oai_ids(origin, prompt, n, body)
    assert len(full) == n and len(set(full)) > 1
    for k in (1, 2, 5, 23):
        assert oai_ids(other, prompt + full[:k], n - k, body) == full[k:]
    # the same through text: the generated text re-tokenizes to the generated ids
    eos = {"ignore_eos": True}
    text = origin.completions.create(model=MODEL, prompt=words, max_tokens=n, extra_body=eos)
    rest = other.completions.create(
        model=MODEL, prompt=words + detokenize(full[:5]), max_tokens=n - 5, extra_body=eos
    )
    assert text.choices[0].text == detokenize(full[:5]) + rest.choices[0].text


def test_eos_stops_a_request_unless_ignore_eos(server: PodServer, oai: openai.OpenAI) -> None:
    prompt = next([t] for t in range(1, 10**6) if next_token([t]) == EOS)
    stopped = oai.completions.create(
        model=MODEL, prompt=prompt, max_tokens=8, extra_body={"return_token_ids": True}
    )
    assert stopped.choices[0].finish_reason == "stop" and stopped.choices[0].text == ""
    assert extra(stopped.choices[0], "token_ids") == [EOS]
    kept = oai.completions.create(
        model=MODEL, prompt=prompt, max_tokens=8, extra_body={"ignore_eos": True}
    )
    assert kept.choices[0].finish_reason == "length" and kept.usage is not None
    assert kept.usage.completion_tokens == 8
    assert kept.choices[0].text == detokenize(
        oai_ids(oai, prompt, 8, {"ignore_eos": True, "return_token_ids": True})
    )
    m = metrics(server)
    assert m[("vllm:request_success_total", "stop")] == 1
    assert m[("vllm:request_success_total", "length")] == 2


def test_a_stream_migrated_out_ends_with_finish_reason_migrated(stack: ExitStack) -> None:
    server = serve(stack, speed=5.0)
    oai = client(stack, server)
    stream = oai.completions.create(model=MODEL, prompt=[1] * 100, max_tokens=2000, stream=True)
    first = next(iter(stream))
    (rid,) = [r["id"] for r in server.pod.running()]
    _, moved = post(f"{server.url}/admin/migrate_out", {"id": rid})
    rest = list(stream)
    assert [c.choices[0].finish_reason for c in rest[-2:]] == [None, "migrated"]
    assert rest[-1].choices[0].text == "" and first.choices[0].text
    assert len(rest) == moved["generated_tokens"]  # one chunk per token, then the migrated one


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_disconnect_aborts_the_request(stack: ExitStack, stream: bool) -> None:
    server = serve(stack, speed=1.0)  # 2000 tokens: ~30 s, unless aborted
    conn = http.client.HTTPConnection("127.0.0.1", server.http.server_address[1], timeout=10)
    body = {"model": MODEL, "prompt": [1] * 100, "max_tokens": 2000, "stream": stream}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    if stream:
        resp = conn.getresponse()
        events = 0
        while events < 3:
            events += resp.readline().startswith(b"data: ")
        resp.close()
    else:
        wait(lambda: server.pod.engine.running, "the request to run")
    conn.close()
    engine = server.pod.engine
    wait(lambda: engine.load == 0 and engine.used == 0, "the engine to drop the request")
    with urllib.request.urlopen(f"{server.url}/admin/requests", timeout=10) as listing:
        assert json.loads(listing.read())["requests"] == []
    m = metrics(server)
    assert m[("gpumix_sim:aborted_requests_total", "")] == 1
    assert sum(v for (name, _), v in m.items() if name == "vllm:request_success_total") == 0


def test_bad_requests_get_openai_errors(server: PodServer, oai: openai.OpenAI) -> None:
    assert [m.id for m in oai.models.list()] == [MODEL]
    with urllib.request.urlopen(f"{server.url}/v1/models", timeout=10) as resp:
        assert json.loads(resp.read()) == {
            "object": "list",
            "data": [
                {"id": MODEL, "object": "model", "max_model_len": server.pod.engine.max_tokens}
            ],
        }
    for path in ("/v1/embeddings", "/admin/nothing"):
        code, out = post(f"{server.url}{path}", {})
        assert code == 404 and out["error"]["type"] == "NotFoundError"
    code, out = post(f"{server.url}/v1/completions", b"{not json")
    assert code == 400 and out["error"]["code"] == 400 and "JSON" in out["error"]["message"]
    for body in ({"prompt": [VOCAB]}, {"prompt": ""}, {"prompt": "a", "max_tokens": 0},
                 {"prompt": "a", "max_tokens": 10**6}, {"prompt": "a", "stream_options": {}},
                 {"prompt": "a", "n": 2}):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as err:
            oai.completions.create(model=MODEL, **body)
        assert err.value.status_code == 400 and err.value.body["type"] == "BadRequestError"
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=MODEL, messages=[])
    with pytest.raises(openai.NotFoundError):
        oai.completions.create(model="another-model", prompt="a")


def test_engine_progress_counts_the_steps_of_a_decode_run() -> None:
    """`Engine.progress`, the hook streaming uses: a decode run's tokens count from the end of
    their step, before `finish` applies the run."""
    engine: Engine = pods("a100-80gb")[0]
    r, other = Request(0, 0.0, 100, 40), Request(1, 0.0, 100, 40)
    engine.enqueue(r, 0.0)
    assert engine.progress(r, 0.0) == (0, None)
    engine.finish(engine.start(0.0) or 0.0)  # the prefill: the first token
    start = engine.step_end
    engine.start(start)
    dt = engine.step_time
    assert engine.step_n == 39
    assert engine.progress(r, start + 0.5 * dt) == (1, pytest.approx(start + dt))
    assert engine.progress(r, start + 2.5 * dt) == (3, pytest.approx(start + 3 * dt))
    assert engine.progress(r, engine.step_end + 1e-9) == (40, None)
    assert engine.progress(other, start + 2.5 * dt) == (0, None)  # not on the pod
    engine.enqueue(other, start + 2.5 * dt)
    assert engine.cut(start + 2.5 * dt)  # an arrival ends the run with the step in progress
    assert engine.progress(r, start + 2.9 * dt)[0] == 3
    engine.finish(engine.step_end)
    assert r.generated == 4 and engine.progress(r, engine.step_end) == (4, None)
