"""One simulated pod: a vLLM-style engine on k GPUs of one type.

The engine runs iterations ("steps") back to back while it has work, like vLLM's scheduler loop:

- **Continuous batching.** Requests join and leave the running batch between steps.
- **Paged KV cache.** Blocks of `block_size` tokens; the capacity is what GPU memory leaves after
  the weights (`Roofline.kv_capacity_tokens`). A running request holds ⌈(prompt + generated)/16⌉
  blocks; admission reserves the blocks of its prompt plus its first token and keeps a 1%
  watermark free (vLLM's default) while others run.
- **Scheduling.** Without chunked prefill (vLLM v0's default) a step either prefills newly
  admitted prompts (decodes pause) or decodes one token for every running request. With chunked
  prefill (vLLM v1) every step decodes all running requests and fills the remaining token budget
  with prompt chunks.
- **Preemption by recompute.** When a decode step needs a block and none is free, the most
  recently admitted request loses its KV cache and goes back to the front of the queue; it is
  prefilled again (prompt + tokens generated so far) before it continues.
- **Step times** come from the performance model, `gpumix.profiles.roofline.Roofline.step_s`.

Speed: a run of decode steps with an unchanged batch is simulated as one event ("decode run") of
up to `max_decode_run` steps, each lasting the step time at the run's mean context (exact for the
memory-bound linear model). An arrival cuts the run at the end of the step in progress, so new
requests are scheduled exactly when vLLM would see them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from gpumix.profiles.roofline import Roofline
from gpumix.profiles.vllm import ASSUMED, VllmSettings, token_budget
from gpumix.sim.request import Request, blocks_for

Listener = Callable[[Request], None]


class EngineConfig(BaseModel):
    """vLLM scheduler settings the simulator honours; defaults are what the plan assumes of the
    pods it deploys (`gpumix.profiles.vllm.ASSUMED`), the rest vLLM's own."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    block_size: int = Field(default=ASSUMED.block_size, ge=1)
    max_num_seqs: int = Field(default=ASSUMED.max_num_seqs, ge=1)
    max_num_batched_tokens: int | None = Field(
        default=ASSUMED.max_num_batched_tokens,
        ge=1,
        description="Tokens per step; default `token_budget` of the chunking and max_model_len.",
    )
    chunked_prefill: bool = ASSUMED.enable_chunked_prefill
    max_model_len: int | None = Field(
        default=ASSUMED.max_model_len, ge=1, description="Longest request; default the model's."
    )
    watermark: float = Field(default=0.01, ge=0, lt=1, description="KV share kept free on admit.")
    max_decode_run: int = Field(default=256, ge=1, description="Steps simulated as one event.")

    @classmethod
    def of(cls, settings: VllmSettings) -> EngineConfig:
        """The engine a pod deployed with ``settings`` runs."""
        return cls(
            block_size=settings.block_size,
            max_num_seqs=settings.max_num_seqs,
            max_num_batched_tokens=settings.max_num_batched_tokens,
            chunked_prefill=settings.enable_chunked_prefill,
            max_model_len=settings.max_model_len,
        )


_IDLE, _PREFILL, _DECODE, _MIXED = 0, 1, 2, 3


class Engine:
    """A pod. The driver calls `enqueue` on arrivals, `start` when idle, `finish` at `step_end`."""

    def __init__(
        self,
        name: str,
        roofline: Roofline,
        config: EngineConfig | None = None,
        *,
        price_per_hour: float = 0.0,
        index: int = 0,
    ) -> None:
        self.name = name
        self.index = index
        self.roof = roofline
        self.cfg = cfg = config or EngineConfig()
        self.gpu_type = roofline.gpu.name
        self.price_per_hour = price_per_hour
        self.bs = cfg.block_size
        self.kv_blocks = max(0, roofline.kv_capacity_tokens // cfg.block_size)
        model_len = cfg.max_model_len or roofline.model.max_context
        self.max_tokens = min(model_len, self.kv_blocks * cfg.block_size)
        """Longest prompt + output this pod can hold (vLLM's max_model_len, capped by KV)."""
        self.max_batched = cfg.max_num_batched_tokens or token_budget(
            cfg.chunked_prefill, model_len
        )
        self.watermark_blocks = int(cfg.watermark * self.kv_blocks)
        self.waiting: deque[Request] = deque()
        self.prefilling: list[Request] = []
        self.running: list[Request] = []
        self.used = 0
        """KV blocks held or reserved (never above `kv_blocks`)."""
        self.peak_used = 0
        # the step in flight
        self.mode = _IDLE
        self.step_start = 0.0
        self.step_time = 0.0
        self.step_n = 0
        self.step_end = 0.0
        self.version = 0
        self._cut = False
        """Whether `cut` shortened the decode run in flight (its blocks were reserved longer)."""
        self._batch: list[Request] = []
        self._chunks: list[int] = []
        # statistics
        self.busy_time = 0.0
        self.kv_integral = 0.0
        """∫ KV usage dt up to `step_start` (usage is constant during a step)."""
        self.prefill_time = 0.0
        """Seconds spent in steps that prefill (whole prompts or chunks)."""
        self.steps = 0
        self.preemptions = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.finished = 0
        self.dropped = 0
        self.on_finish: list[Listener] = []
        self.on_first_token: list[Listener] = []

    # -- queries ------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.mode != _IDLE

    @property
    def kv_usage(self) -> float:
        return self.used / self.kv_blocks if self.kv_blocks else 1.0

    @property
    def load(self) -> int:
        """Requests on the pod: waiting, prefilling and running."""
        return len(self.waiting) + len(self.prefilling) + len(self.running)

    def kv_integral_at(self, now: float) -> float:
        if self.mode == _IDLE:
            return self.kv_integral
        return self.kv_integral + self.kv_usage * max(0.0, now - self.step_start)

    def progress(self, r: Request, now: float) -> tuple[int, float | None]:
        """Tokens `r` has generated by `now`, and when its next one is due if it decodes in the
        step(s) in flight (else None). `finish` applies a decode run at its end, but the run's
        k-th step ends at `step_start + k·step_time`; a real-time driver streams each token then.
        A `cut` only shortens a run from the step in progress on, so no counted token is lost."""
        if self.mode not in (_DECODE, _MIXED) or r not in self.running:
            return r.generated, None
        steps = min(self.step_n, int((now - self.step_start) / self.step_time))
        due = self.step_start + (steps + 1) * self.step_time if steps < self.step_n else None
        return r.generated + steps, due

    def requests(self) -> list[Request]:
        """Requests that hold KV now (running, prefilling), for the admin endpoint."""
        inflight = self._batch if self.mode == _PREFILL else []
        return [*self.running, *self.prefilling, *inflight]

    # -- arrivals -----------------------------------------------------------------------------
    def enqueue(self, r: Request, now: float) -> bool:
        """Queue a request; False (and the request marked dropped) if it can never fit here."""
        r.pod = self.index
        if r.prompt + r.output > self.max_tokens:
            r.drop_reason = (
                f"prompt + output = {r.prompt + r.output} tokens exceeds what {self.name} holds "
                f"({self.max_tokens} tokens)"
            )
            self.dropped += 1
            return False
        r.queue_at_arrival = len(self.waiting)
        r.running_at_arrival = len(self.running) + len(self.prefilling)
        r.kv_load = -self.kv_integral_at(now)
        r.prefill_load = -self.prefill_time - (
            now - self.step_start if self.mode in (_PREFILL, _MIXED) else 0.0
        )
        self.waiting.append(r)
        return True

    def cut(self, now: float) -> bool:
        """Shorten a decode run to end with the step in progress at `now`; True if it changed."""
        if self.mode != _DECODE or self.step_n <= 1:
            return False
        k = int((now - self.step_start) / self.step_time) + 1
        if k >= self.step_n:
            return False
        self.step_n = k
        self._cut = True
        self.step_end = self.step_start + k * self.step_time
        self.version += 1
        return True

    # -- migrations (between steps only) ------------------------------------------------------
    def remove(self, r: Request) -> bool:
        """Take a request off the pod (migration out); its KV blocks are freed. Only while idle
        (between steps). False if the request is not here."""
        assert self.mode == _IDLE, "migrate only between steps"
        for queue in (self.running, self.prefilling):
            if r in queue:
                queue.remove(r)
                self.used -= r.blocks
                r.blocks = r.done_prefill = 0
                return True
        if r in self.waiting:
            self.waiting.remove(r)
            return True
        return False

    def insert(self, r: Request, now: float, *, with_kv: bool) -> bool:
        """Accept a migrated request that has generated `r.generated` tokens elsewhere. With its
        KV cache (transferred) it joins the running batch if the blocks fit; otherwise it queues
        for a recompute prefill of prompt + generated tokens. False if it can never fit here."""
        assert self.mode == _IDLE, "migrate only between steps"
        if not self.enqueue(r, now):
            return False
        need = blocks_for(r.prompt + r.generated, self.bs)
        if with_kv and r.generated > 0 and need <= self.kv_blocks - self.used:
            self.waiting.pop()
            r.blocks = need
            self.used += need
            self.running.append(r)
        return True

    # -- steps --------------------------------------------------------------------------------
    def start(self, now: float) -> float | None:
        """Plan the next step at `now`; returns when it ends, or None if there is nothing to do."""
        assert self.mode == _IDLE
        self.step_start = now
        if self.cfg.chunked_prefill:
            planned = self._plan_chunked()
        else:
            planned = self._plan_prefill() or self._plan_decode()
        if not planned:
            return None
        self.step_start = now
        self.step_end = now + self.step_n * self.step_time
        self.peak_used = max(self.peak_used, self.used)
        return self.step_end

    def _admit(self, limit_tokens: int) -> tuple[list[Request], list[int]]:
        """Take requests from the queue head whose KV fits; returns them with their chunk sizes."""
        batch: list[Request] = []
        chunks: list[int] = []
        seqs = len(self.running) + len(self.prefilling)
        reserve = self.watermark_blocks if seqs else 0
        free = self.kv_blocks - self.used - reserve
        tokens = 0
        waiting = self.waiting
        while waiting and seqs + len(batch) < self.cfg.max_num_seqs and tokens < limit_tokens:
            r = waiting[0]
            todo = r.prompt + r.generated
            chunk = min(todo, limit_tokens - tokens)
            if chunk < todo and not self.cfg.chunked_prefill:
                if batch:
                    break
                chunk = todo  # a prompt longer than the budget still goes alone (max_model_len)
            need = blocks_for(chunk + (1 if chunk == todo else 0), self.bs)
            if need > free:
                break
            waiting.popleft()
            free -= need
            self.used += need
            r.blocks = need
            r.todo = todo
            r.done_prefill = 0
            if r.admitted is None:
                r.admitted = self.step_start
            batch.append(r)
            chunks.append(chunk)
            tokens += chunk
        return batch, chunks

    def _plan_prefill(self) -> bool:
        if not self.waiting:
            return False
        batch, chunks = self._admit(self.max_batched)
        if not batch:
            return False
        tokens = sum(chunks)
        self._batch, self._chunks = batch, chunks
        self.mode, self.step_n = _PREFILL, 1
        self.step_time = self.roof.step_s(0, 0.0, tokens, sum(c * c for c in chunks))
        return True

    def _preempt_for(self, needed: Callable[[], int]) -> None:
        """Preempt (recompute) the most recently admitted running requests until `needed()` blocks
        fit."""
        while self.running and needed() > self.kv_blocks - self.used:
            victim = self.running.pop()
            self.used -= victim.blocks
            victim.blocks = 0
            victim.preemptions += 1
            self.preemptions += 1
            self.waiting.appendleft(victim)

    def _plan_decode(self) -> bool:
        running = self.running
        if not running:
            return False
        bs = self.bs
        # Lists, not generators, and blocks_for inlined: this runs once per decode run and
        # request, the simulator's innermost loop.
        n = min(self.cfg.max_decode_run, *[r.output - r.generated for r in running])
        held = sum([r.blocks for r in running])
        grown = [-(-(r.prompt + r.generated + n) // bs) for r in running]
        free = self.kv_blocks - self.used
        if sum(grown) - held > free:
            n = min(n, bs * (free // len(running)))
            if n == 0:
                n = 1
                self._preempt_for(
                    lambda: sum(
                        1 for r in running if blocks_for(r.prompt + r.generated + 1, bs) > r.blocks
                    )
                )
                if not running:
                    return self._plan_prefill()
            grown = [-(-(r.prompt + r.generated + n) // bs) for r in running]
        context = sum([r.prompt + r.generated for r in running])
        self.used += sum(grown) - sum([r.blocks for r in running])
        for r, nb in zip(running, grown, strict=True):
            r.blocks = nb
        batch = len(running)
        self.mode, self.step_n = _DECODE, n
        self.step_time = self.roof.step_s(batch, context + batch * (n - 1) / 2)
        return True

    def _plan_chunked(self) -> bool:
        running, bs = self.running, self.bs
        if not self.prefilling and not self.waiting:
            return self._plan_decode()
        # every running request decodes one token: make room first
        self._preempt_for(
            lambda: sum(1 for r in running if blocks_for(r.prompt + r.generated + 1, bs) > r.blocks)
        )
        context = 0
        for r in running:
            tokens = r.prompt + r.generated
            context += tokens
            nb = blocks_for(tokens + 1, bs)
            self.used += nb - r.blocks
            r.blocks = nb
        budget = self.max_batched - len(running)
        batch: list[Request] = []
        chunks: list[int] = []
        for r in self.prefilling:
            if budget <= 0:
                break
            left = r.todo - r.done_prefill
            room = (r.blocks + self.kv_blocks - self.used) * bs - r.done_prefill
            chunk = min(left, budget)
            if chunk == left and chunk + 1 > room:
                chunk -= 1  # the completing chunk also needs the first token's slot
            chunk = min(chunk, room)
            if chunk <= 0:
                continue
            total = r.done_prefill + chunk + (1 if chunk == left else 0)
            need = blocks_for(total, bs) - r.blocks
            self.used += need
            r.blocks += need
            batch.append(r)
            chunks.append(chunk)
            budget -= chunk
        if budget > 0 and self.waiting:
            new, new_chunks = self._admit(budget)
            self.prefilling.extend(new)
            batch.extend(new)
            chunks.extend(new_chunks)
        if not batch:
            if not running:
                if not self.prefilling:
                    return False
                # partial prefills hold the cache and none can grow: recompute the newest later
                victim = self.prefilling.pop()
                self.used -= victim.blocks
                victim.blocks = victim.done_prefill = 0
                victim.preemptions += 1
                self.preemptions += 1
                self.waiting.appendleft(victim)
                return self._plan_chunked()
            self.mode, self.step_n = _DECODE, 1
            self.step_time = self.roof.step_s(len(running), context)
            return True
        self._batch, self._chunks = batch, chunks
        attention = sum(c * (r.done_prefill + c) for r, c in zip(batch, chunks, strict=True))
        self.mode, self.step_n = _MIXED, 1
        self.step_time = self.roof.step_s(len(running), context, sum(chunks), attention)
        return True

    def finish(self, now: float) -> list[Request]:
        """Apply the step that ends at `now`; returns the requests that completed."""
        assert self.mode != _IDLE
        dt = self.step_end - self.step_start
        self.kv_integral += self.kv_usage * dt
        self.busy_time += dt
        self.steps += self.step_n
        done: list[Request] = []
        mode, self.mode = self.mode, _IDLE
        if mode in (_PREFILL, _MIXED):
            self.prefill_time += dt
        if mode in (_DECODE, _MIXED):
            n = self.step_n
            keep: list[Request] = []
            for r in self.running:
                r.generated += n
                (done if r.generated >= r.output else keep).append(r)
            if self._cut:  # the run reserved blocks for steps it no longer takes
                self._cut = False
                bs = self.bs
                for r in keep:
                    nb = -(-(r.prompt + r.generated) // bs)
                    if nb < r.blocks:
                        self.used -= r.blocks - nb
                        r.blocks = nb
            self.generation_tokens += n * len(self.running)
            self.running = keep
        if mode in (_PREFILL, _MIXED):
            for r, chunk in zip(self._batch, self._chunks, strict=True):
                r.done_prefill += chunk
                if r.done_prefill < r.todo:
                    continue  # chunked prefill continues next step
                if r.generated == 0:
                    self.prompt_tokens += r.prompt
                r.todo = r.done_prefill = 0
                r.generated += 1
                self.generation_tokens += 1
                if r.first_token is None:
                    r.first_token = now
                    for listener in self.on_first_token:
                        listener(r)
                if mode == _MIXED:
                    self.prefilling.remove(r)
                if r.generated >= r.output:
                    done.append(r)
                else:
                    self.running.append(r)
            self._batch, self._chunks = [], []
        for r in done:
            self.used -= r.blocks
            r.blocks = 0
            r.finish = now
            r.kv_load += self.kv_integral
            r.prefill_load += self.prefill_time
            self.finished += 1
            for listener in self.on_finish:
                listener(r)
        return done
