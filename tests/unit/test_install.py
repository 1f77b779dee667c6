"""The install files: generated ones are fresh, and the chart's defaults are gpumix.install's.

The e2e tests (tests/e2e/test_install_*.py) render the chart with Helm and the manifests with
kustomize, compare the two, and install both on the local control plane.
"""

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpumix
from gpumix.cli import build_parser
from gpumix.install import (
    IMAGE_REPOSITORY,
    LEADER_ELECTION_RULES,
    LEASE_NAME,
    NAME,
    NAMESPACE,
    OPERATOR,
    ROUTER_IMAGE_ENV,
    RULES,
    base_objects,
    render_install_files,
)
from gpumix.reconcile.cluster import SEARCH_SLICE_S, SEARCH_TIME_LIMIT_S

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "gpumix"


def test_generated_install_files_are_fresh() -> None:
    expected = render_install_files(ROOT)
    for path, text in expected.items():
        assert path.exists(), f"{path.relative_to(ROOT)} is missing: run `make manifests`"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.relative_to(ROOT)} is stale: run `make manifests` (gpumix manifests)"
        )
    chart_crds = set((CHART / "templates" / "crds").glob("*.yaml"))
    assert chart_crds == {p for p in expected if p.parent == CHART / "templates" / "crds"}, (
        "charts/gpumix/templates/crds/ does not match crds/: run `make manifests`"
    )


def test_chart_crds_are_the_crds_of_crds_dir() -> None:
    crds = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert crds, "no CRDs in crds/"
    assert sorted(p.name for p in (CHART / "templates" / "crds").glob("*.yaml")) == crds


def test_rbac_is_least_privilege() -> None:
    known = {"get", "list", "watch", "create", "update", "patch", "delete"}
    for rule in RULES:
        assert "*" not in rule.verbs
        assert "*" not in rule.resources
        assert rule.api_group != "*"
        assert set(rule.verbs) <= known, rule
        assert rule.why, rule
    # Nothing reads secrets or touches cluster-wide RBAC. The routers' Roles cannot escalate:
    # without the `escalate` and `bind` verbs (not in `known`), the apiserver lets the operator
    # grant only what this ClusterRole holds.
    resources = {r for rule in RULES for r in rule.resources}
    assert not resources & {"secrets", "clusterroles", "clusterrolebindings"}
    (rbac,) = [rule for rule in RULES if rule.api_group == "rbac.authorization.k8s.io"]
    assert set(rbac.resources) == {"roles", "rolebindings"}
    assert set(rbac.verbs) == {"create", "patch", "delete"}
    pairs = [(rule.api_group, r) for rule in RULES for r in rule.resources]
    assert len(pairs) == len(set(pairs)), "a resource appears in two rules"


def test_the_operator_deployment_is_restricted() -> None:
    (deployment,) = base_objects()["deployment.yaml"]
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "health": 8081}
    # Leader-elected replicas: a rolling update may run a new follower beside the old leader.
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert deployment["metadata"]["namespace"] == NAMESPACE
    env = {e["name"]: e.get("valueFrom") for e in container["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    (budget,) = base_objects()["pdb.yaml"]
    assert budget["spec"]["minAvailable"] == 1
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_the_lease_is_granted_in_the_operator_namespace_only() -> None:
    role, binding = base_objects()["leader-election.yaml"]
    assert (role["kind"], role["metadata"]["namespace"]) == ("Role", NAMESPACE)
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": [LEASE_NAME],
            "verbs": ["get", "update"],
        },
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert all(rule.why for rule in LEADER_ELECTION_RULES)
    # No lease verb reaches the ClusterRole: the operator cannot touch other Leases (the
    # kubelets' node heartbeats among them).
    assert not [r for r in RULES if "leases" in r.resources]
    assert build_parser().parse_args(["run"]).leader_elect_resource_name == LEASE_NAME


def test_the_operator_deploys_routers_with_its_own_image(monkeypatch: pytest.MonkeyPatch) -> None:
    (deployment,) = base_objects("registry.example/gpumix:dev")["deployment.yaml"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "registry.example/gpumix:dev"
    assert {"name": ROUTER_IMAGE_ENV, "value": container["image"]} in container["env"]
    # The chart sets it from the image it runs; kustomize copies an image override into it.
    chart = (CHART / "templates" / "deployment.yaml").read_text()
    assert f'- name: {ROUTER_IMAGE_ENV}\n          value: {{{{ include "gpumix.image" . ' in chart
    default = yaml.safe_load((ROOT / "manifests" / "default" / "kustomization.yaml").read_text())
    (replacement,) = default["replacements"]
    assert replacement["source"]["fieldPath"].endswith(".[name=operator].image")
    (target,) = replacement["targets"]
    assert target["fieldPaths"] == [
        f"spec.template.spec.containers.[name=operator].env.[name={ROUTER_IMAGE_ENV}].value"
    ]
    # `gpumix run` reads it, else runs this release's image.
    monkeypatch.setenv(ROUTER_IMAGE_ENV, "registry.example/gpumix:dev")
    assert build_parser().parse_args(["run"]).router_image == "registry.example/gpumix:dev"
    monkeypatch.delenv(ROUTER_IMAGE_ENV)
    assert (
        build_parser().parse_args(["run"]).router_image
        == f"{IMAGE_REPOSITORY}:{gpumix.__version__}"
    )


def test_chart_defaults_are_the_operator_settings() -> None:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    s = OPERATOR
    assert values["image"]["repository"] == IMAGE_REPOSITORY
    assert values["image"]["tag"] == ""  # the chart's appVersion
    assert values["replicas"] == s.replicas == 2
    assert values["podDisruptionBudget"] == {"enabled": True, "minAvailable": s.pdb_min_available}
    assert values["metrics"]["port"] == s.metrics_port
    assert values["health"]["port"] == s.health_port
    assert values["operator"]["interval"] == s.interval_s
    assert values["operator"]["solverTimeLimit"] == s.solver_time_limit_s
    assert values["operator"]["searchTimeLimit"] == s.search_time_limit_s == SEARCH_TIME_LIMIT_S
    assert values["operator"]["searchSlice"] == s.search_slice_s == SEARCH_SLICE_S
    assert values["operator"]["logFormat"] == s.log_format
    assert values["resources"] == s.resources
    assert values["tmpSizeLimit"] == s.tmp_size_limit
    assert values["podSecurityContext"] == s.pod_security_context()
    assert values["securityContext"] == s.container_security_context()
    probe = {k: v for k, v in s.liveness_probe().items() if k != "httpGet"}
    assert values["livenessProbe"] == probe
    assert values["crds"] == {"enabled": True, "keep": True}


def test_chart_schema_constrains_replicas_and_knows_every_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert schema["properties"]["replicas"] == {
        "type": "integer",
        "minimum": 1,
        "description": schema["properties"]["replicas"]["description"],
    }

    def check(node: dict[str, Any], value: Any, path: str) -> None:
        if node.get("type") != "object" or "properties" not in node:
            return
        assert node.get("additionalProperties") is False, f"{path}: schema not strict"
        for key, child in value.items():
            assert key in node["properties"], f"{path}.{key}: not in values.schema.json"
            check(node["properties"][key], child, f"{path}.{key}")

    check(schema, values, "values")


def test_versions_agree() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart["appVersion"] == gpumix.__version__ == project["version"]
    kustomization = yaml.safe_load(
        (ROOT / "manifests" / "default" / "kustomization.yaml").read_text()
    )
    (image,) = kustomization["images"]
    assert image["name"] == IMAGE_REPOSITORY
    assert image["newTag"] == gpumix.__version__
    assert kustomization["namespace"] == NAMESPACE
    assert kustomization["resources"] == ["../../crds", "../base"]


def dockerfile_instructions() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_dockerfile_runs_gpumix_run_as_the_pods_user() -> None:
    steps = dockerfile_instructions()
    final = steps[max(i for i, (op, _) in enumerate(steps) if op == "FROM") :]
    entrypoint = [json.loads(arg) for op, arg in final if op == "ENTRYPOINT"]
    assert entrypoint == [["gpumix", "run"]]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["gpumix"] == "gpumix.cli:main"
    (user,) = [arg for op, arg in final if op == "USER"]
    assert user == f"{OPERATOR.uid}:{OPERATOR.uid}"
    assert OPERATOR.pod_security_context()["runAsUser"] == OPERATOR.uid
    (expose,) = [arg for op, arg in final if op == "EXPOSE"]
    assert expose.split() == [str(OPERATOR.metrics_port), str(OPERATOR.health_port)]
    base = [arg for op, arg in steps if op == "FROM"]
    assert all(re.match(r"python:3\.\d+-slim", b) for b in base), base
    # Only what the package build needs goes into the build context, versions pinned.
    ignore = (ROOT / ".dockerignore").read_text().split()
    allowed = ["*", "!pyproject.toml", "!README.md", "!constraints.txt", "!operator/"]
    assert ignore[ignore.index("*") :][:5] == allowed
    (install,) = [arg for op, arg in steps if op == "RUN" and "pip install" in arg]
    assert "PIP_CONSTRAINT=/src/constraints.txt" in install


def test_namespace_enforces_restricted_pod_security() -> None:
    (namespace,) = base_objects()["namespace.yaml"]
    assert namespace["metadata"]["name"] == NAMESPACE
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    account, role, binding = base_objects()["rbac.yaml"]
    assert account["metadata"]["name"] == NAME
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert role["rules"] == [r.policy_rule() for r in RULES]
