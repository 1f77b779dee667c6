"""Moving a stream between pods through the router (issue #16), as the KV loop does it: the admin
API of the `gpumix route` console script in front of `gpumix sim serve` engines.

The simulated model's next token is a function of the token sequence alone (SERVER.md), like
greedy decoding on a real model, so a continued answer must carry exactly the tokens of an
unmoved one; the client must see one stream: one id, every token once, one finish, usage of the
whole answer."""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from router_procs import MODEL, Engines, Router

TABLE = {"inputEdges": [1, 4096], "outputEdges": [1, 4096],
         "pools": {"p": {"replicas": 2, "share": [[1.0]]}}}  # fmt: skip
PROMPT = list(range(100, 160))
OUTPUT = 150


@pytest.fixture(scope="module")
def engines() -> Iterator[Engines]:
    e = Engines("a10g=2", speed=4.0)  # ~25 tokens/s a stream: the move lands mid-answer
    yield e
    e.kill()


@pytest.fixture(scope="module")
def router(engines: Engines, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Router]:
    a, b = engines.urls
    r = Router(tmp_path_factory.mktemp("route"), [("p", a), ("p", b)], "--migratable",
               table=TABLE)  # fmt: skip
    yield r
    r.stop()


def admin(router: Router, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    return call(router.admin + path, body)


def call(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """GET ``url``, or POST ``body`` to it: the status and the JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=90) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


class Stream:
    """One streamed answer read event by event."""

    def __init__(self, router: Router, path: str, body: dict[str, Any]) -> None:
        host, port = router.url.removeprefix("http://").split(":")
        self.conn = http.client.HTTPConnection(host, int(port), timeout=60)
        self.conn.request("POST", path, json.dumps({"model": MODEL, "stream": True, **body}),
                          {"Content-Type": "application/json"})  # fmt: skip
        self.resp = self.conn.getresponse()
        assert self.resp.status == 200, self.resp.read()
        self.events: list[Any] = []

    def read(self, n: int | None = None) -> None:
        """The next ``n`` JSON events; all of them when None, and then the connection closes."""
        while n is None or n > 0:
            line = self.resp.readline()
            if not line:
                break
            text = line.decode().strip()
            if not text.startswith("data: "):
                continue
            if text == "data: [DONE]":
                self.events.append("[DONE]")
                break
            self.events.append(json.loads(text.removeprefix("data: ")))
            n = None if n is None else n - 1
        if n is None:
            self.conn.close()


def text_of(events: list[Any], chat: bool) -> str:
    out = ""
    for e in events:
        for c in e["choices"] if isinstance(e, dict) else ():
            out += (c.get("delta") or {}).get("content") or "" if chat else c["text"]
    return out


def one_stream(events: list[Any]) -> None:
    """What every client may rely on: one id, one finish at the end, then usage, then [DONE]."""
    assert events[-1] == "[DONE]"
    body = events[:-1]
    assert len({e["id"] for e in body}) == 1
    finishes = [c["finish_reason"] for e in body for c in e["choices"] if c["finish_reason"]]
    assert finishes == ["length"]


def the_request_on(router: Router) -> tuple[str, str]:
    """(id, pod) of the one request in flight."""
    status, listing = admin(router, "/admin/inflight")
    assert status == 200
    found = [(r["id"], pod) for pod, e in listing["pods"].items() for r in e["requests"]]
    assert len(found) == 1, listing
    return found[0]


def other(pod: str) -> str:
    return "p-1" if pod == "p-0" else "p-0"


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
def test_a_moved_stream_carries_exactly_the_tokens_of_an_unmoved_one(
    router: Router, chat: bool
) -> None:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    ask: dict[str, Any] = {"max_tokens": OUTPUT, "ignore_eos": True,
                           "stream_options": {"include_usage": True}}  # fmt: skip
    if chat:
        ask["messages"] = [{"role": "user", "content": " ".join(f"w{t}" for t in PROMPT)}]
    else:
        ask["prompt"] = PROMPT
    reference = Stream(router, path, ask)
    reference.read()

    moved = Stream(router, path, ask)
    moved.read(20)
    rid, source = the_request_on(router)
    status, result = admin(router, "/admin/migrate", {"id": rid, "to": other(source)})
    assert status == 200, result
    assert result["outcome"] == "migrated" and result["from"] == source
    assert result["blackout_s"] > 0 and result["prefill_s"] > 0
    assert the_request_on(router) == (rid, other(source))  # the ledger follows the request
    moved.read()

    assert text_of(moved.events, chat) == text_of(reference.events, chat)
    assert len(text_of(moved.events, chat).split()) == OUTPUT
    one_stream(moved.events)
    usage = moved.events[-2]["usage"]
    assert usage == reference.events[-2]["usage"]
    assert usage["completion_tokens"] == OUTPUT
    # The continuation's own fields stay inside the router.
    assert all("token_ids" not in c for e in moved.events[:-1] for c in e["choices"])
    assert all("prompt_token_ids" not in e for e in moved.events[:-1])
    expected = "chat.completion.chunk" if chat else "text_completion"
    assert {e["object"] for e in moved.events[:-1]} == {expected}


def test_a_chat_without_a_cap_moves_with_the_rest_of_its_pods_context(
    router: Router, engines: Engines
) -> None:
    """vLLM caps a chat that gives no ``max_tokens`` at the rest of the context (max_model_len
    − prompt): the router learns max_model_len from the pod and continues with what is left."""
    url = engines.urls[0]  # both pods alike
    [card] = call(url + "/v1/models")[1]["data"]
    context = card["max_model_len"]
    content = " ".join(f"w{100 + k}" for k in range(context - OUTPUT - 2))  # + role, assistant
    messages = [{"role": "user", "content": content}]
    assert call(url + "/tokenize", {"messages": messages})[1]["count"] == context - OUTPUT
    ask = {"messages": messages, "ignore_eos": True, "stream_options": {"include_usage": True}}
    reference = Stream(router, "/v1/chat/completions", ask)
    reference.read()

    moved = Stream(router, "/v1/chat/completions", ask)
    moved.read(20)
    rid, source = the_request_on(router)
    status, result = admin(router, "/admin/migrate", {"id": rid, "to": other(source)})
    assert (status, result["outcome"]) == (200, "migrated"), result
    moved.read()

    assert text_of(moved.events, True) == text_of(reference.events, True)
    one_stream(moved.events)
    usage = {"prompt_tokens": context - OUTPUT, "completion_tokens": OUTPUT,
             "total_tokens": context}  # fmt: skip
    assert moved.events[-2]["usage"] == reference.events[-2]["usage"] == usage


def test_token_ids_the_client_asked_for_span_both_legs(router: Router) -> None:
    ask = {"prompt": PROMPT, "max_tokens": OUTPUT, "ignore_eos": True, "return_token_ids": True}
    reference = Stream(router, "/v1/completions", ask)
    reference.read()
    moved = Stream(router, "/v1/completions", ask)
    moved.read(30)
    rid, source = the_request_on(router)
    assert admin(router, "/admin/migrate", {"id": rid, "to": other(source)})[0] == 200
    moved.read()

    def ids(events: list[Any]) -> list[int]:
        return [t for e in events[:-1] for c in e["choices"] for t in c["token_ids"]]

    assert ids(moved.events) == ids(reference.events)
    assert len(ids(moved.events)) == OUTPUT
    prompts = [c["prompt_token_ids"] for e in moved.events[:-1] for c in e["choices"]
               if "prompt_token_ids" in c]  # fmt: skip
    assert prompts == [PROMPT]  # once, the client's own


def test_moves_that_cannot_continue_exactly_are_refused_and_counted(router: Router) -> None:
    seeded = Stream(router, "/v1/completions",
                    {"prompt": PROMPT, "max_tokens": OUTPUT, "ignore_eos": True, "seed": 7,
                     "temperature": 0.8})  # fmt: skip
    seeded.read(3)
    rid, source = the_request_on(router)
    status, listing = admin(router, "/admin/inflight")
    [entry] = [r for r in listing["pods"][source]["requests"] if r["id"] == rid]
    assert entry["movable"] is False and entry["refusal"] == "seed"
    status, result = admin(router, "/admin/migrate", {"id": rid, "to": other(source)})
    assert (status, result["outcome"], result["reason"]) == (409, "refused", "seed")
    seeded.read()
    one_stream(seeded.events)
    assert router.metrics()[("gpumix_router_migration_refusals_total", (("reason", "seed"),))] >= 1


@pytest.mark.parametrize(
    ("body", "code", "what"),
    [
        ({"id": "r0"}, 400, "the body"),
        ({"id": "r0", "to": "p-9"}, 400, "not a ready pod"),
        ({"id": "nope", "to": "p-0"}, 404, "not in flight"),
    ],
)
def test_bad_move_requests_say_what_is_wrong(
    router: Router, body: dict[str, Any], code: int, what: str
) -> None:
    status, answer = admin(router, "/admin/migrate", body)
    assert status == code
    assert what in answer["error"]["message"]


def test_without_migratable_the_ledger_is_listed_and_every_move_refused(
    engines: Engines, tmp_path: Path
) -> None:
    """A router whose service does not migrate through it relays streams as they come (no
    token IDs asked for): the KV loop still reads its ledger, which says why nothing moves."""
    a, b = engines.urls
    r = Router(tmp_path, [("p", a), ("p", b)], table=TABLE)
    try:
        s = Stream(r, "/v1/completions", {"prompt": PROMPT, "max_tokens": 40, "ignore_eos": True})
        s.read(3)
        rid, source = the_request_on(r)
        status, listing = admin(r, "/admin/inflight")
        [entry] = listing["pods"][source]["requests"]
        assert (entry["movable"], entry["refusal"]) == (False, "migration-off")
        status, result = admin(r, "/admin/migrate", {"id": rid, "to": other(source)})
        assert (status, result["outcome"], result["reason"]) == (409, "refused", "migration-off")
        s.read()
        one_stream(s.events)
        assert all("token_ids" not in c for e in s.events[:-1] for c in e["choices"])
    finally:
        r.stop()


def test_a_target_that_fails_leaves_the_stream_on_its_source(
    engines: Engines, tmp_path: Path
) -> None:
    a, _ = engines.urls
    with socket.socket() as dead:  # bound, not listening: connections are refused
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        r = Router(tmp_path, [("p", a), ("p", f"http://127.0.0.1:{port}")], "--migratable",
                   table=TABLE)  # fmt: skip
        try:
            ask = {"prompt": PROMPT, "max_tokens": OUTPUT, "ignore_eos": True}
            reference = Stream(r, "/v1/completions", ask)
            reference.read()
            s = Stream(r, "/v1/completions", ask)
            s.read(20)
            rid, source = the_request_on(r)
            assert source == "p-0"  # the dead pod is skipped (retried) before the first byte
            status, result = admin(r, "/admin/migrate", {"id": rid, "to": "p-1"})
            assert (status, result["outcome"]) == (502, "failed")
            s.read()
            assert text_of(s.events, False) == text_of(reference.events, False)
            one_stream(s.events)
            failed = ("gpumix_router_migrations_total", (("outcome", "failed"),))
            assert r.metrics()[failed] == 1
        finally:
            r.stop()
