"""The planner pass closes the attainment loop: predict, derate the pools that miss, solve again.

Real joint solves and simulations of the shipped sample (test_cluster_pass.py's snapshot: the
pools of manifests/samples/gpupools.yaml on the local test cluster's nodes).
"""

from collections.abc import Callable
from typing import Any

import pytest

from gpumix.api import GPUPool, GPUProfile, LLMService
from gpumix.attainment import (
    PREDICTION_REQUESTS,
    PoolAttainment,
    PredictedAttainment,
    aim,
    derate_step,
)
from gpumix.digestcache import DigestCache
from gpumix.plan import SolverError
from gpumix.plan.joint import JointAllocation, JointInstance
from gpumix.profiles import gpu_type
from gpumix.profiles.models import model_shape
from gpumix.profiles.roofline import Roofline
from gpumix.reconcile import cluster
from gpumix.reconcile.cluster import ClusterDecision, plan_cluster
from gpumix.reconcile.service import Running, ServiceDecision
from gpumix.sim.scenario import PlanChoice, TrafficSpec, simulate_service

from .test_cluster_pass import cond, nodes, pools, profiles, service, snap

KEY = ("default", "chat")
A10G_ONLY = {"pools": ["a10g"]}
"""2 req/s on A10Gs alone: a10g×3 loaded to MaxTput is predicted at 98.4%, a10g×4 at 99.6%."""


def planned(
    *bodies: dict[str, Any], rounds: int = cluster.DERATING_ROUNDS, **kw: Any
) -> ClusterDecision:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(cluster, "DERATING_ROUNDS", rounds)
        return plan_cluster(snap(services=list(bodies), **kw))


def chat(body: dict[str, Any], **kw: Any) -> ServiceDecision:
    return planned(body, **kw).services[KEY]


def with_status(body: dict[str, Any], sd: ServiceDecision) -> dict[str, Any]:
    dumped = sd.status.model_dump(by_alias=True, mode="json", exclude_none=True)
    return {**body, "status": dumped}


@pytest.fixture
def solves(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The joint instances each pass hands the (cached) solver, in order."""
    seen: list[str] = []
    solve = cluster._solve

    def spy(instance: JointInstance, time_limit_s: float) -> JointAllocation | None:
        seen.append(instance.model_dump_json())
        return solve(instance, time_limit_s)

    monkeypatch.setattr(cluster, "_solve", spy)
    return seen


def test_the_sample_is_derated_up_to_its_target_at_a_higher_cost() -> None:
    first = chat(service("chat", 5.5, "t0"), rounds=0)
    looped = chat(service("chat", 5.5, "t0"))
    before, after = first.status, looped.status
    assert before.predicted_attainment is not None and before.predicted_attainment < 0.99
    assert before.derating is None
    assert after.predicted_attainment is not None and after.predicted_attainment >= 0.99
    assert after.cost_per_hour is not None and before.cost_per_hour is not None
    assert after.cost_per_hour > before.cost_per_hour
    derating = after.derating
    assert derating is not None and derating.observed_generation == 1
    assert 1 <= derating.rounds <= cluster.DERATING_ROUNDS
    assert derating.options and all(0 < o.factor < 1 for o in derating.options)
    state, reason, message = cond(after, "SLOAtRisk")
    assert (state, reason) == ("False", "OnTarget")
    assert f"(MaxTput derated in {derating.rounds} round" in message
    assert [e.reason for e in looped.events] == ["PlanChanged"]  # no SLOAtRisk warning


def test_the_next_pass_starts_from_the_kept_derating_and_solves_once(solves: list[str]) -> None:
    body = service("chat", 2, "t0", **A10G_ONLY)
    first = chat(body)
    assert len(solves) == 2  # a10g×3 misses, a10g×4 meets the target
    assert first.target == {"a10g": 4}
    assert first.status.derating is not None and first.status.derating.rounds == 1
    (factor,) = first.status.derating.factors().values()
    assert 0.75 <= factor < 1  # at least as far as a10g×3's load no longer fits 3 replicas

    solves.clear()
    again = chat(with_status(body, first))
    assert len(solves) == 1  # started from the kept factors, on target: no round
    (pinned,) = JointInstance.model_validate_json(solves[0]).services
    # Kept at its rate, rolling out (nothing runs yet): pinned to its replicas.
    assert {o.name: o.fixed for o in pinned.options if o.fixed} == {"a10g": 4}
    assert again.target == first.target
    # Searched, its plan holds: kept at its rate, also while it rolls out (nothing runs yet).
    assert first.status.derating.kept_at_rate == 2
    assert again.status.derating == first.status.derating
    assert again.status.predicted_attainment == first.status.predicted_attainment
    assert again.events == []
    assert chat(with_status(body, first), rounds=0).target == {"a10g": 4}  # the kept factors


def test_a_search_out_of_time_keeps_the_plan_so_far_and_is_not_run_again(
    solves: list[str],
) -> None:
    """2 req/s on A10Gs: a10g×3 misses (98.4%), and its search would find a10g×4. With no time
    for a round the search ends on a10g×3, named below its target; the next pass of the same
    generation starts from what status kept and solves once, with no round."""
    body = service("chat", 2, "t0", **A10G_ONLY)
    short = chat(body, search_time_limit_s=1e-9)
    assert len(solves) == 1
    assert short.target == {"a10g": 3}
    derating = short.status.derating
    assert derating is not None and derating.rounds == 0 and not derating.options
    assert cond(short.status, "SLOAtRisk")[:2] == ("True", "BelowTarget")
    solves.clear()
    again = chat(with_status(body, short))
    assert len(solves) == 1 and again.target == {"a10g": 3}
    assert chat(body).target == {"a10g": 4}  # with the default time, it searches


def test_a_new_spec_generation_starts_over() -> None:
    body = service("chat", 2, "t0", **A10G_ONLY)
    first = chat(body)
    assert first.status.derating is not None
    changed = with_status(body, first)
    changed["metadata"] = {**changed["metadata"], "generation": 2}
    changed["spec"] = {**changed["spec"], "weight": 2}  # more than the rate changed
    plain = chat(changed, rounds=0)
    assert plain.target == {"a10g": 3} and plain.status.derating is None
    assert cond(plain.status, "SLOAtRisk")[:2] == ("True", "BelowTarget")
    redone = chat(changed)
    assert redone.target == {"a10g": 4}
    assert redone.status.derating is not None
    assert redone.status.derating.observed_generation == 2
    assert redone.status.derating.rounds == 1  # counted afresh, not 2


def test_a_generation_that_changed_only_the_rate_searches_from_the_factors_kept(
    solves: list[str],
) -> None:
    """The sample, 5.5 → 6 req/s: the factors found at 5.5 req/s already bring its plan to
    target, so the new generation's search ends in its first solve; searched from 1 (a status
    without a basis, as an older operator wrote it) it takes a round more to the same plan."""
    body = service("chat", 5.5, "t0")
    first = chat(body)
    assert first.status.derating is not None and first.status.derating.basis
    changed = with_status(body, first)
    changed["metadata"] = {**changed["metadata"], "generation": 2}
    workload = {**changed["spec"]["workload"], "requestRate": 6}
    changed["spec"] = {**changed["spec"], "workload": workload}
    solves.clear()
    warm = chat(changed)
    assert len(solves) == 1
    derating = warm.status.derating
    assert derating is not None and derating.observed_generation == 2 and derating.rounds == 0
    assert derating.factors() == first.status.derating.factors()
    assert derating.basis == first.status.derating.basis
    state, reason, message = cond(warm.status, "SLOAtRisk")
    assert (state, reason) == ("False", "OnTarget")
    assert message.endswith("(MaxTput derated: a100-80gb ×0.9, a10g ×0.729, l4 ×0.75)")

    del changed["status"]["derating"]["basis"]
    solves.clear()
    cold = chat(changed)
    assert len(solves) == 2 and cold.target == warm.target
    assert cold.status.derating is not None and cold.status.derating.rounds == 1


def test_an_unreachable_target_gets_the_highest_attainment_capacity_allows() -> None:
    """1 req/s on the 4 L4s alone: l4×3 at 90.9%, l4×4 at 98.5%; a fifth L4 does not exist,
    and the round that would need it (traffic unserved) is not applied."""
    body = service("chat", 1, "t0", pools=["l4"])
    first = chat(body, rounds=0)
    looped = chat(body)
    assert first.target == {"l4": 3} and looped.target == {"l4": 4}
    before, after = first.status.predicted_attainment, looped.status.predicted_attainment
    assert before is not None and after is not None and before < after < 0.99
    assert looped.status.unserved_fraction is None
    state, reason, message = cond(looped.status, "SLOAtRisk")
    assert (state, reason) == ("True", "BelowTarget")
    assert message.startswith(f"predicted attainment {after:.2%} is below the target 99%: l4: ")
    assert message.endswith("(MaxTput derated in 1 round: l4 ×0.872)")
    assert "SLOAtRisk" in [e.reason for e in looped.events]


def test_derating_never_takes_another_services_capacity() -> None:
    """The 4 A10Gs run chat×3 (98.4%) and a Batch service's one replica; derated, chat would
    need all 4 (interactive first) and the Batch service would get none."""
    other = ("default", "other")
    batch = service("other", 0.5, "t1", priority="Batch", **A10G_ONLY)
    d = planned(service("chat", 2, "t0", **A10G_ONLY), batch)
    assert (d.services[KEY].target, d.services[other].target) == ({"a10g": 3}, {"a10g": 1})
    assert d.services[other].status.unserved_fraction is None
    derating = d.services[KEY].status.derating  # searched: no factor kept
    assert derating is not None and derating.rounds == 0 and not derating.options
    assert cond(d.services[KEY].status, "SLOAtRisk")[:2] == ("True", "BelowTarget")


@pytest.mark.parametrize(("alone", "solved"), [(0.05, 1), (0.048, 2)])
def test_misses_no_capacity_recovers_are_not_derated_for(
    monkeypatch: pytest.MonkeyPatch, solves: list[str], alone: float, solved: int
) -> None:
    """95% met: when the other 5% miss even alone, derating would only add replicas (as
    would growing the plan, which has its own test)."""
    monkeypatch.setattr(cluster, "predict_served", lambda *_: predicted(0.95, {}, alone))
    monkeypatch.setattr(cluster, "GROW_ROUNDS", 0)
    decision = chat(service("chat", 2, "t0", **A10G_ONLY), rounds=1)
    assert len(solves) == solved
    state, reason, message = cond(decision.status, "SLOAtRisk")
    assert (state, reason) == ("True", "BelowTarget")
    alone_part = f"; {alone:.1%} of all requests miss it even alone on their replica, more than "
    assert alone_part in message
    assert "more replicas do not recover them: relax spec.slo.tpotMs, lower" in message


def grows_to_four(*args: Any) -> PredictedAttainment:
    """A prediction on target from four A10Gs on, 95% (none of it missing alone) below."""
    replicas = args[3].counts.get("a10g", 0)
    met = 0.995 if replicas >= 4 else 0.95
    return predicted(met, {"a10g": met})


def test_a_search_that_ends_short_grows_the_plan_by_a_replica_of_its_worst_pool(
    monkeypatch: pytest.MonkeyPatch, solves: list[str]
) -> None:
    """Derating ended (here: it does nothing) with a10g×3 at 95%: the plan is solved again
    with one A10G more, pinned, until it reaches the target (a plan that does not is not
    kept); the next pass, before it runs, keeps it pinned. Growing stops where the pool has no
    room: with a Batch service on the fourth A10G, chat stays at three (and no solve is spent
    on a fourth)."""
    monkeypatch.setattr(cluster, "predict_served", grows_to_four)
    monkeypatch.setattr(cluster, "_derate", lambda *_: None)
    grown = chat(service("chat", 2, "t0", **A10G_ONLY))
    assert grown.target == {"a10g": 4}
    assert len(solves) == 2
    assert cond(grown.status, "SLOAtRisk")[:2] == ("False", "OnTarget")
    assert grown.status.derating is not None and grown.status.derating.kept_at_rate == 2
    solves.clear()
    again = chat(with_status(service("chat", 2, "t0", **A10G_ONLY), grown))
    assert again.target == {"a10g": 4} and len(solves) == 1  # kept, not grown again
    solves.clear()
    batch = service("other", 0.5, "t1", priority="Batch", **A10G_ONLY)
    d = planned(service("chat", 2, "t0", **A10G_ONLY), batch)
    assert d.services[KEY].target == {"a10g": 3}
    assert len(solves) == 1
    assert cond(d.services[KEY].status, "SLOAtRisk")[:2] == ("True", "BelowTarget")


def just_over_the_target_at(replicas: int) -> Callable[..., PredictedAttainment]:
    """Predictions on target (99.05%) from ``replicas`` A10Gs, short of the search's aim
    (``aim(0.99)``, 99.18%); at its aim from one more; 95% below."""

    def predicted_at(*args: Any) -> PredictedAttainment:
        n = args[3].counts.get("a10g", 0)
        met = 0.995 if n > replicas else 0.9905 if n == replicas else 0.95
        return predicted(met, {"a10g": met})

    return predicted_at


def test_a_search_goes_on_past_a_plan_on_target_but_short_of_its_aim(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """a10g×3 predicted at 99.05% holds the 99% target in status, yet a plan predicted that
    close meets it in about half of other runs: the search derates on to a10g×4. Where the
    search can go no further (here derating does nothing, and the pool has four A10Gs), the
    first plan grown that holds the target is its plan."""
    assert aim(0.99) == pytest.approx(0.99 + (0.99 * 0.01 / PREDICTION_REQUESTS) ** 0.5)
    monkeypatch.setattr(cluster, "predict_served", just_over_the_target_at(3))
    searched = chat(service("chat", 2, "t0", **A10G_ONLY))
    assert searched.target == {"a10g": 4}
    assert cond(searched.status, "SLOAtRisk")[:2] == ("False", "OnTarget")
    monkeypatch.setattr(cluster, "predict_served", just_over_the_target_at(4))
    monkeypatch.setattr(cluster, "_derate", lambda *_: None)
    grown = chat(service("chat", 2, "t0", **A10G_ONLY))
    assert grown.target == {"a10g": 4}  # a fifth does not fit: on target, short of its aim
    assert cond(grown.status, "SLOAtRisk")[:2] == ("False", "OnTarget")


def only_h100_holds(*args: Any) -> PredictedAttainment:
    """A plan of H100s alone meets the target; in every other plan the H100s meet 50% and
    every other pool 95%."""
    counts = {o: n for o, n in args[3].counts.items() if n}
    if set(counts) == {"h100"}:
        return predicted(0.995, {"h100": 0.995})
    return predicted(0.9, {o: 0.5 if o == "h100" else 0.95 for o in counts})


def test_a_search_that_takes_many_rounds_tries_each_option_alone_cheapest_first(
    monkeypatch: pytest.MonkeyPatch, solves: list[str]
) -> None:
    """The sample at 5.5 req/s plans a mix of A100s and A10Gs, and in the derating rounds
    allowed (here: one, and options alone are tried after one) and three plans grown no plan
    reaches the target: options alone are searched next, the cheapest first (A100s, which
    miss), until one reaches it (H100s); without that search the plan is the cheapest mix of
    those that came closest, below target."""
    monkeypatch.setattr(cluster, "predict_served", only_h100_holds)
    monkeypatch.setattr(cluster, "SINGLE_TYPE_AFTER", 1)
    d = chat(service("chat", 5.5, "t0"), rounds=1)
    assert {o for o, n in d.target.items() if n} == {"h100"}
    assert cond(d.status, "SLOAtRisk")[:2] == ("False", "OnTarget")
    assert d.status.derating is not None and d.status.derating.kept_at_rate == 5.5
    searched = [JointInstance.model_validate_json(j).services[0].options for j in solves]
    alone = [{o.name for o in options if o.fixed is None} for options in searched]
    assert alone[-3:] == [{"a100-80gb"}, {"a100-80gb"}, {"h100"}]  # A100s twice, then H100s
    monkeypatch.setattr(cluster, "_single_type", lambda *_, **__: None)
    mixed = chat(service("chat", 5.5, "t0"), rounds=1)
    assert len([o for o, n in mixed.target.items() if n]) >= 2
    assert cond(mixed.status, "SLOAtRisk")[:2] == ("True", "BelowTarget")


def test_a_search_ended_for_this_generation_is_not_taken_up_again(solves: list[str]) -> None:
    """Status says a search ran for generation 1 and kept no factor: that pass's plan stands
    (one solve); the same status for an older generation is searched afresh."""
    body = service("chat", 2, "t0", **A10G_ONLY)
    body["status"] = {"derating": {"observedGeneration": 1, "rounds": 0}}
    sd = chat(body)
    assert len(solves) == 1 and sd.target == {"a10g": 3}
    assert sd.status.derating is not None and sd.status.derating.rounds == 0
    body["metadata"] = {**body["metadata"], "generation": 2}
    assert chat(body).target == {"a10g": 4}


def test_a_search_runs_to_its_end_in_one_pass_and_later_passes_change_nothing() -> None:
    """Two services derated within the pools they share, one round allowed (a search cut
    short, as a longer one is by MAX_ROUNDS): the second pass, with the first's statuses and
    its plan running, plans the same replicas and reports no change."""
    bodies = [service("chat", 5.5, "t0"), service("small", 2, "t1", pools=["a10g"])]
    first = planned(*bodies, rounds=1)
    again = planned(
        *(with_status(b, first.services[("default", b["metadata"]["name"])]) for b in bodies),
        running={
            k: Running(replicas=t, ready=t) for k, sd in first.services.items()
            if (t := {o: n for o, n in (sd.target or {}).items() if n})
        },
        rounds=1,
    )  # fmt: skip
    for key, sd in first.services.items():
        assert sd.status.derating is not None and sd.status.derating.rounds == 1
        assert again.services[key].target == sd.target, key
        assert again.services[key].status.derating == sd.status.derating
        assert "PlanChanged" not in [e.reason for e in again.services[key].events]


def test_a_solver_failure_after_the_first_plan_applies_the_first_plan(
    monkeypatch: pytest.MonkeyPatch, solves: list[str]
) -> None:
    spy = cluster._solve

    def fails_after_the_first(instance: JointInstance, limit_s: float) -> JointAllocation | None:
        if solves:
            raise SolverError("highs: time limit without a solution")
        return spy(instance, limit_s)

    monkeypatch.setattr(cluster, "_solve", fails_after_the_first)
    sd = chat(service("chat", 2, "t0", **A10G_ONLY))
    assert sd.apply == {"a10g": 3} and sd.target == {"a10g": 3}
    assert sd.status.derating is None
    assert cond(sd.status, "Planned")[:2] == ("True", "PlanComputed")
    assert cond(sd.status, "SLOAtRisk")[:2] == ("True", "BelowTarget")


def test_a_failed_prediction_applies_the_plan_without_rounds(solves: list[str]) -> None:
    """The simulator has no shape for this model: nothing says the plan misses its target."""
    model = "example/unshaped-7b"
    body = service("chat", 2, "t0", **A10G_ONLY)
    body["spec"]["model"]["name"] = model
    profs = profiles()
    for p in profs:
        p["spec"]["model"] = model
    sd = chat(body, profiles=profs)
    assert len(solves) == 1
    assert sd.apply == {"a10g": 3}
    assert sd.status.derating is None
    assert cond(sd.status, "SLOAtRisk")[:2] == ("Unknown", "PredictionFailed")


def test_two_services_are_derated_within_the_pools_they_share() -> None:
    """Each service keeps its own best round; the plan applied is one joint solve."""
    chat_body = service("chat", 5.5, "t0")
    small = service("small", 2, "t1", pools=["a10g", "l4"])
    d = planned(chat_body, small)
    for key in (KEY, ("default", "small")):
        status = d.services[key].status
        assert status.predicted_attainment is not None and status.predicted_attainment >= 0.99
        assert status.derating is not None and status.derating.rounds >= 1
    for name, pool in d.pool_status.items():
        assert (pool.planned_gpus or 0) <= pool.allocatable_gpus, name


def predicted(met: float, pools: dict[str, float], alone: float = 0.0) -> PredictedAttainment:
    return PredictedAttainment(
        tpot=met, ttft=None, met=met, alone=alone, requests=100,
        pools={p: PoolAttainment(requests=50, met=m, utilisation=1.0) for p, m in pools.items()},
    )  # fmt: skip


def test_derate_step_shrinks_the_pools_that_miss_past_their_planned_load() -> None:
    counts, load = {"a": 2, "b": 1, "c": 0}, {"a": 1.0, "b": 0.99, "c": 0.0}
    stepped = derate_step({"b": 0.5}, predicted(0.8, {"a": 0.95, "b": 0.4}), counts, load, 0.99)
    # a: 95% met → a step of 0.9, but a×2 carry a load of 1: until it no longer fits (0.5);
    # b: 40% met → a step of 0.6 from the 0.5 it had.
    assert stepped == pytest.approx({"a": 0.5 * 0.999, "b": 0.5 * 0.6})
    on_target_pools = predicted(0.97, {"a": 0.995, "b": 0.995})  # the misses are dropped ones
    stepped = derate_step({}, on_target_pools, counts, {"a": 2.0, "b": 0.0}, 0.99)
    assert stepped == pytest.approx({"a": 0.9, "b": 0.9})  # every planned pool; b: no load


def test_joint_plans_are_kept_by_digest_and_the_least_recently_used_goes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    solved: list[str] = []

    def solve_joint(instance: Any, **_: Any) -> JointAllocation | None:
        solved.append(instance.services[0].name)
        return None

    monkeypatch.setattr(cluster, "solve_joint", solve_joint)
    monkeypatch.setattr(cluster, "_solved", DigestCache(3))
    instances = [
        JointInstance.model_validate_json(
            f'{{"services": [{{"name": "s{i}", "rates": [[1.0]], "options": []}}], "pools": []}}'
        )
        for i in range(4)
    ]
    for instance in instances[:3]:
        cluster._solve(instance, 5.0)
    cluster._solve(instances[0], 5.0)  # s0 is now the most recently used
    cluster._solve(instances[3], 5.0)  # s1 goes
    cluster._solve(instances[0], 5.0)
    cluster._solve(instances[1], 5.0)
    cluster._solve(instances[0], 6.0)  # another time limit: another plan
    assert solved == ["s0", "s1", "s2", "s3", "s1", "s0"]
    assert len(cluster._solved) == 3


def changed_weight(body: dict[str, Any], previous: ClusterDecision) -> dict[str, Any]:
    """``body`` with the status ``previous`` gave it, in a new generation that changed more
    than the rate (its search starts over)."""
    changed = with_status(body, previous.services[("default", body["metadata"]["name"])])
    changed["metadata"] = {**changed["metadata"], "generation": 2}
    changed["spec"] = {**changed["spec"], "weight": 2}
    return changed


def running_of(d: ClusterDecision) -> dict[tuple[str, str], Running]:
    return {
        k: Running(replicas=t, ready=t) for k, sd in d.services.items()
        if (t := {o: n for o, n in (sd.target or {}).items() if n})
    }  # fmt: skip


def test_a_changed_service_is_searched_alone_and_the_fleet_solved_twice(
    solves: list[str],
) -> None:
    """After a change, only the changed service searches: its rounds solve it alone in the
    capacity the others leave, then the fleet is solved once with the factors found and its
    replicas pinned to the plan its search chose (the fleet is solved twice in all)."""
    bodies = [service("chat", 5.5, "t0"), service("small", 1.5, "t1", pools=["a10g", "l4"])]
    first = planned(*bodies)
    again = [with_status(bodies[0], first.services[KEY]), changed_weight(bodies[1], first)]
    solves.clear()
    alone = planned(*again, running=running_of(first))
    sizes = [len(JointInstance.model_validate_json(j).services) for j in solves]
    derating = alone.services[("default", "small")].status.derating
    assert derating is not None and derating.observed_generation == 2 and derating.rounds >= 1
    # Its rounds, and any round it did not keep or growth of its plan, each solve it alone.
    assert sizes[0] == sizes[-1] == 2 and set(sizes[1:-1]) == {1}
    assert len(sizes) - 2 >= derating.rounds
    final = JointInstance.model_validate_json(solves[-1]).services
    pins = {s.name: {o.name: o.fixed for o in s.options} for s in final}
    assert pins["default/small"] == alone.services[("default", "small")].target
    # chat's search had ended on a plan that holds, which runs: kept there at its rate.
    assert first.services[KEY].status.derating is not None
    assert first.services[KEY].status.derating.kept_at_rate == 5.5
    kept = {o: n for o, n in (first.services[KEY].target or {}).items() if n}
    assert {o: n for o, n in pins["default/chat"].items() if n} == kept


def test_a_service_searched_alone_never_takes_another_services_capacity(
    solves: list[str],
) -> None:
    """test_derating_never_takes_another_services_capacity after a change: the Batch service
    keeps its A10G, so chat, searched alone in the three the Batch service leaves, cannot be
    derated onto a fourth: its one round leaves traffic unserved, and the fleet is not solved
    again."""
    other = ("default", "other")
    bodies = [
        service("chat", 2, "t0", **A10G_ONLY),
        service("other", 0.5, "t1", priority="Batch", **A10G_ONLY),
    ]
    first = planned(*bodies)
    again = [changed_weight(bodies[0], first), with_status(bodies[1], first.services[other])]
    solves.clear()
    d = planned(*again, running=running_of(first))
    assert [len(JointInstance.model_validate_json(j).services) for j in solves] == [2, 1]
    assert (d.services[KEY].target, d.services[other].target) == ({"a10g": 3}, {"a10g": 1})
    assert d.services[other].status.unserved_fraction is None
    derating = d.services[KEY].status.derating
    assert derating is not None and derating.observed_generation == 2
    assert derating.rounds == 0 and not derating.options
    assert cond(d.services[KEY].status, "SLOAtRisk")[:2] == ("True", "BelowTarget")


def test_a_serving_service_whose_search_runs_past_its_slice_gets_its_best_plan_then_the_rest(
    solves: list[str],
) -> None:
    """2 req/s on A10Gs, changed (its search starts over) while a10g×4 runs: with no time in
    its slice the pass applies its first plan (a10g×3, below target) and marks the search to
    go on; the next pass takes it up from there within the search's time limit, finds
    a10g×4 and ends it. A new service's search is not held to the slice."""
    body = service("chat", 2, "t0", **A10G_ONLY)
    first = planned(body)
    assert first.services[KEY].target == {"a10g": 4}
    changed = changed_weight(body, first)
    solves.clear()
    cut = chat(changed, running=running_of(first), search_slice_s=1e-9)
    assert len(solves) == 1 and cut.target == {"a10g": 3}
    derating = cut.status.derating
    assert derating is not None and derating.searching and derating.observed_generation == 2
    state, reason, message = cond(cut.status, "SLOAtRisk")
    assert (state, reason) == ("True", "BelowTarget")
    assert message.endswith("(the search goes on next pass)")

    solves.clear()
    resumed = chat(with_status(changed, cut), running=running_of(first), search_slice_s=1e-9)
    assert len(solves) == 2 and resumed.target == {"a10g": 4}
    derating = resumed.status.derating
    assert derating is not None and not derating.searching and derating.rounds == 1
    assert cond(resumed.status, "SLOAtRisk")[:2] == ("False", "OnTarget")
    assert chat(with_status(changed, resumed), running=running_of(first)).target == {"a10g": 4}
    assert chat(body, search_slice_s=1e-9).target == {"a10g": 4}  # nothing runs: no slice


def test_a_plan_rolling_out_is_kept_while_what_runs_moves_towards_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The passes after a rollout see what runs move towards the plan, which changes the joint
    instance (its churn penalty): the plan is kept, not solved again, and it is the plan a
    solve gives. What runs moving past the plan is solved again."""
    solved: list[int] = []
    solve_joint = cluster.solve_joint

    def counted(instance: JointInstance, **kw: Any) -> JointAllocation | None:
        solved.append(len(instance.services))
        return solve_joint(instance, **kw)

    monkeypatch.setattr(cluster, "solve_joint", counted)
    monkeypatch.setattr(cluster, "_solved", DigestCache(cluster.SOLVES_KEPT))
    monkeypatch.setattr(cluster, "_rolling", DigestCache(cluster.SOLVES_KEPT))
    bodies = [service("chat", 5.5, "t0"), service("small", 1, "t1", pools=["a10g", "l4"])]
    first = planned(*bodies)
    assert solved
    again = [with_status(b, first.services[("default", b["metadata"]["name"])]) for b in bodies]
    rolled = running_of(first)
    solved.clear()
    kept = planned(*again, running=rolled)
    assert solved == []
    for cache in ("_solved", "_rolling"):
        monkeypatch.setattr(cluster, cache, DigestCache(cluster.SOLVES_KEPT))
    fresh = planned(*again, running=rolled)
    assert solved == [2]
    for key, sd in fresh.services.items():
        assert kept.services[key].target == sd.target, key
        assert kept.services[key].status.cost_per_hour == sd.status.cost_per_hour, key
    option, n = next(iter(rolled[KEY].replicas.items()))
    past = {**rolled, KEY: Running(replicas={**rolled[KEY].replicas, option: n + 1})}
    solved.clear()
    planned(*again, running=past)
    assert solved == [2]


def test_a_first_pass_of_a_fleet_searches_each_service_alone(solves: list[str]) -> None:
    """A first pass searches as a change does: each service's rounds solve it alone, then the
    fleet once with every searched service pinned. Both services reach their target within
    the pools."""
    d = planned(service("chat", 5.5, "t0"), service("small", 2, "t1", pools=["a10g", "l4"]))
    rounds = {k: sd.status.derating.rounds for k, sd in d.services.items() if sd.status.derating}
    assert set(rounds) == {KEY, ("default", "small")} and all(rounds.values())
    sizes = [len(JointInstance.model_validate_json(j).services) for j in solves]
    assert sizes == [2] + [1] * sum(rounds.values()) + [2]
    final = JointInstance.model_validate_json(solves[-1]).services
    for s in final:
        key = ("default", s.name.split("/")[1])
        assert {o.name: o.fixed for o in s.options} == d.services[key].target
    for sd in d.services.values():
        assert sd.status.predicted_attainment is not None
        assert sd.status.predicted_attainment >= 0.99
        # Pinned to what its search predicted, and kept there while its rate stands.
        assert sd.status.derating is not None and sd.status.workload is not None
        assert sd.status.derating.kept_at_rate == sd.status.workload.planned_request_rate
    for name, pool in d.pool_status.items():
        assert (pool.planned_gpus or 0) <= pool.allocatable_gpus, name


def two_more_a10gs(
    risk: str, reason: str
) -> tuple[dict[str, int], dict[str, int], dict[str, Any], dict[Any, Running]]:
    """chat's cheapest plan (its search ends at once), and chat running, ready, 2 more A10Gs
    than it as its plan in force, not (yet) kept, with SLOAtRisk ``risk`` for ``reason``:
    (cheapest, runs, body, running)."""
    first = chat(service("chat", 5.5, "t0"))
    cheapest = {o: n for o, n in (first.target or {}).items() if n}
    runs = {**cheapest, "a10g": cheapest.get("a10g", 0) + 2}
    body = with_status(service("chat", 5.5, "t0"), first)
    del body["status"]["derating"]["keptAtRate"]
    for a in body["status"]["allocation"]:
        a["replicas"] = runs[a["pool"]]
    body["status"]["conditions"] = [
        {**c, "status": risk, "reason": reason} if c["type"] == "SLOAtRisk" else c
        for c in body["status"]["conditions"]
    ]
    return cheapest, runs, body, {KEY: Running(replicas=runs, ready=runs)}


def test_a_service_is_not_moved_off_a_plan_that_holds_onto_one_predicted_to_miss(
    monkeypatch: pytest.MonkeyPatch, solves: list[str]
) -> None:
    """chat runs 2 more A10Gs than the cheapest plan and is predicted to hold there, and only
    there: the solve drops them, its prediction misses, so chat is pinned to what runs and
    the fleet solved again. Without the prediction's miss, the cheaper plan is applied."""
    monkeypatch.setattr(cluster, "predict_served", lambda *_: predicted(0.999, {}))
    cheapest, runs, body, running = two_more_a10gs("False", "OnTarget")
    solves.clear()

    def by_plan(*args: Any) -> PredictedAttainment:
        counts = {o: n for o, n in args[3].counts.items() if n}
        return predicted(0.999 if counts == runs else 0.95, {"a10g": 0.95})

    monkeypatch.setattr(cluster, "predict_served", by_plan)
    kept = planned(body, running=running).services[KEY]
    pins = [
        {o.name: o.fixed for o in s.options}
        for j in solves for s in JointInstance.model_validate_json(j).services
    ]  # fmt: skip
    assert len(solves) == 2 and set(pins[0].values()) == {None}
    assert {o: n for o, n in pins[1].items() if n} == runs
    assert {o: n for o, n in (kept.target or {}).items() if n} == runs
    assert cond(kept.status, "SLOAtRisk")[:2] == ("False", "OnTarget")
    derating = kept.status.derating
    assert (
        derating is not None and derating.kept_at_rate == kept.status.workload.planned_request_rate
    )
    # The next pass pins it from the start: one solve, the plan kept.
    solves.clear()
    again = planned(with_status(body, kept), running=running).services[KEY]
    assert len(solves) == 1
    (s,) = JointInstance.model_validate_json(solves[0]).services
    assert {o.name: o.fixed for o in s.options if o.fixed} == runs
    assert again.target == kept.target and again.status.derating == derating
    # Kept at another rate: solved free, then pinned again.
    other = with_status(body, kept)
    other["status"]["derating"]["keptAtRate"] = 1.0
    solves.clear()
    assert planned(other, running=running).services[KEY].target == kept.target
    assert len(solves) == 2
    monkeypatch.setattr(cluster, "predict_served", lambda *_: predicted(0.999, {}))
    solves.clear()
    moved = planned(body, running=running).services[KEY]
    assert moved.status.derating is not None and moved.status.derating.kept_at_rate is None
    assert len(solves) == 1
    assert {o: n for o, n in (moved.target or {}).items() if n} == cheapest
    # The last round (here the only one) keeps every holding plan that moved, even onto a plan
    # predicted to hold: none is left to miss.
    monkeypatch.setattr(cluster, "HOLDING_ROUNDS", 1)
    solves.clear()
    assert planned(body, running=running).services[KEY].target == kept.target
    assert len(solves) == 2


def test_a_service_short_of_its_target_is_not_moved_onto_a_plan_predicted_to_meet_less(
    monkeypatch: pytest.MonkeyPatch, solves: list[str]
) -> None:
    """chat runs 2 more A10Gs than the cheapest plan, predicted at 97% (below its 99%): a
    fleet solve that drops them onto a plan predicted at 95% is solved again with chat pinned
    to what runs (live, another service's change took such a service's pool). Predicted at
    least as well elsewhere, it moves; the pin is not kept for later passes."""
    monkeypatch.setattr(cluster, "predict_served", lambda *_: predicted(0.999, {}))
    cheapest, runs, body, running = two_more_a10gs("True", "BelowTarget")
    body["status"]["predictedAttainment"] = 0.97

    def elsewhere(met: float) -> Callable[..., PredictedAttainment]:
        def by_plan(*args: Any) -> PredictedAttainment:
            counts = {o: n for o, n in args[3].counts.items() if n}
            return predicted(0.97 if counts == runs else met, {"a10g": met})

        return by_plan

    monkeypatch.setattr(cluster, "predict_served", elsewhere(0.95))
    solves.clear()
    kept = planned(body, running=running).services[KEY]
    assert len(solves) == 2
    pins = [{o.name: o.fixed for o in s.options if o.fixed}
            for s in JointInstance.model_validate_json(solves[1]).services]  # fmt: skip
    assert pins == [runs]
    assert {o: n for o, n in (kept.target or {}).items() if n} == runs
    assert kept.status.derating is not None and kept.status.derating.kept_at_rate is None
    for met in (0.97, 0.975):  # as well or better: the cheaper plan applies
        monkeypatch.setattr(cluster, "predict_served", elsewhere(met))
        solves.clear()
        moved = planned(body, running=running).services[KEY]
        assert len(solves) == 1
        assert {o: n for o, n in (moved.target or {}).items() if n} == cheapest


def test_a_kept_plan_whose_replicas_are_not_ready_is_not_pinned() -> None:
    """Jiang App. M's GPU drop on a plan kept at its rate: the A100 nodes go, the Deployment
    still asks for its replicas but none is ready, and the plan moves to the H100 pool (pinned
    to what no longer runs, it stayed on the A100s for good)."""
    body = service("chat", 5.5, "t0", pools=["a100-80gb", "h100"])
    first = chat(body)
    assert first.target is not None and first.status.derating is not None
    a100 = {o: n for o, n in first.target.items() if n}
    assert a100 == {"a100-80gb": 2} and first.status.derating.kept_at_rate == 5.5
    kept = with_status(body, first)
    ran = chat(kept, running={KEY: Running(replicas=a100, ready=a100)})
    assert {o: n for o, n in (ran.target or {}).items() if n} == a100
    gone = nodes({"l4": 4, "a10g": 4, "h100": 2})
    moved = chat(with_status(body, ran), running={KEY: Running(replicas=a100, ready={})},
                 nodes=gone)  # fmt: skip
    assert {o: n for o, n in (moved.target or {}).items() if n} == {"h100": 1}
    assert moved.status.derating is not None and moved.status.derating.kept_at_rate is None


def missed_alone(body: dict[str, Any], sd: ServiceDecision) -> float:
    """Share of the service's requests its plan's traffic split (what the router gets) sends
    where they miss the SLO even alone, from the roofline of each option's replica."""
    spec = LLMService.model_validate(body).spec
    ie, oe, rates = (
        spec.workload.input_edges,
        spec.workload.output_edges,
        spec.workload.bucket_rates(),
    )
    missed = 0.0
    for option, grid in sd.shares.items():
        c = sd.choices[option]
        roof = Roofline(gpu_type(c.gpu_type), model_shape(spec.model.name), c.gpus_per_replica)
        missed += sum(
            share * rates[i][j]
            * (1 - roof.alone_met_share((ie[i], ie[i + 1]), (oe[j], oe[j + 1]), spec.slo.tpot_ms))
            for i, row in enumerate(grid) for j, share in enumerate(row) if share > 0
        )  # fmt: skip
    return missed / sum(map(sum, rates))


def test_a_plan_sends_no_more_requests_where_they_miss_alone_than_half_the_target_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The joint ILP's alone-miss budget (`with_alone_miss_budget`): without it, at 0.3 req/s
    and 80 ms the sample's cheapest plan, two A10Gs, sends 0.57% of its requests where they
    miss alone (predicted 99.1%, at the target only because the load is light; the search
    aims at the target itself here, as 99.1% is short of its aim); half the 1% a 99% target
    allows is the most a plan may (an A100 here)."""
    body = service("chat", 0.3, "t0", pools=["l4", "a10g", "a100-80gb"], slo={"tpotMs": 80})
    sd = chat(body)
    assert missed_alone(body, sd) <= 0.005
    assert sd.target is not None and sd.target.get("a100-80gb")
    monkeypatch.setattr(cluster, "with_alone_miss_budget", lambda demand, _: demand)
    monkeypatch.setattr(cluster, "aim", lambda target: target)
    cluster._PREPARED.clear()  # the same body: prepared again, without the budget
    unfiltered = chat(body)
    assert missed_alone(body, unfiltered) > 0.005
    assert unfiltered.status.cost_per_hour is not None and sd.status.cost_per_hour is not None
    assert unfiltered.status.cost_per_hour < sd.status.cost_per_hour


def test_a_mixed_plan_holds_whether_its_router_guesses_or_knows_output_lengths() -> None:
    """A plan's promise must not hang on how much of each answer's length the router knows:
    a client's ``max_tokens`` caps the router's guess, and a tight one routes each request to
    the bucket it was planned in, which the running-mean guess does not. At 4 req/s the plan
    promised by the guess alone (a100-80gb×1 + l4×1, 99.5%) met 90% knowing (the L4 71%),
    and the live e2e router 94.3%."""
    body = service("chat", 4, "t0")
    sd = chat(body)
    assert sd.target is not None
    counts = {o: n for o, n in sd.target.items() if n}
    assert len(counts) > 1  # a mix, where routing decides
    svc = LLMService.model_validate(body)
    tpot_s = svc.spec.slo.tpot_ms / 1e3
    for router in ("melange", "melange-oracle"):
        run = simulate_service(  # other arrivals and sizes than the prediction's
            svc, [GPUPool.model_validate(p) for p in pools()],
            [GPUProfile.model_validate(p) for p in profiles()],
            TrafficSpec(requests=3000, seed=11),
            plan=PlanChoice(counts=counts, share={o: sd.shares[o] for o in counts}),
            router=router,
        )  # fmt: skip
        met = sum(r.finish is not None and r.tpot <= tpot_s for r in run.requests)
        assert met / len(run.requests) >= 0.98, router
