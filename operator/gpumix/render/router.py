"""The router of one LLMService (``routing.mode: Router``): ``gpumix route`` pods behind the
Service ``<service>``, sending each request to a pool by its size bucket as the plan says.

The router reads the routing ConfigMap and watches the service's vLLM pods itself, so its pods
run under a ServiceAccount of their own, bound to a namespaced Role. RBAC lets the operator grant
only what it holds itself, hence the same verbs in its ClusterRole (gpumix.install).
"""

from typing import Any

from gpumix.api import LLMServiceSpec
from gpumix.install import OPERATOR, labels
from gpumix.render.deployment import (
    ADMIN_PORT,
    PORT,
    PORT_NAME,
    SCRAPE_ANNOTATIONS,
    TERMINATION_GRACE_SECONDS,
)
from gpumix.render.inferencepool import MODE as PICKER_MODE
from gpumix.render.inferencepool import picker_flags, picker_port
from gpumix.render.names import (
    Owner,
    object_meta,
    picker_labels,
    router_labels,
    router_name,
    router_selector,
)

ROUTER_KINDS: tuple[tuple[str, str], ...] = (
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("apps/v1", "Deployment"),
)
"""(apiVersion, kind) of the router's objects, all named :func:`router_name`, in the order
:func:`render_router` returns them: the Role before the RoleBinding that grants it (which the
apiserver checks against the Role), the ServiceAccount before the pods that run under it."""

CONTAINER = "router"
TMP_SIZE_LIMIT = "64Mi"
ADMIN_PORT_NAME = "admin"


def _role_rules() -> list[dict[str, Any]]:
    """The routing ConfigMap ``<service>-routing`` and the readiness of the service's vLLM pods."""
    return [
        {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["get", "list", "watch"]}
    ]


def _resources() -> dict[str, Any]:
    """An asyncio proxy: little CPU at rest, memory bounded by the requests it holds."""
    return {"limits": {"memory": "512Mi"}, "requests": {"cpu": "100m", "memory": "128Mi"}}


def migratable(spec: LLMServiceSpec) -> bool:
    """Whether the KV loop moves this service's streams through its router (``kvMigration``
    on, ``via: Router``): only then does the router relay streams so that they can move."""
    kv = spec.kv_migration
    return kv.enabled and kv.via == "Router" and spec.routing.mode == "Router"


def router_command(owner: Owner, spec: LLMServiceSpec) -> list[str]:
    """``gpumix route`` for this service, in its namespace, on the engines' port; the endpoint
    picker in routing mode InferencePool; ``--migratable`` when the KV loop moves streams
    through it (turning that on or off rolls the routers: streams in flight finish on the old
    ones, as on any rollout)."""
    picker = picker_flags() if spec.routing.mode == PICKER_MODE else []
    migrate = ["--migratable"] if migratable(spec) else []
    return [
        "gpumix",
        "route",
        "--service",
        owner.name,
        "--namespace",
        owner.namespace,
        "--port",
        str(PORT),
        "--max-inflight-per-pod",
        str(spec.routing.max_inflight_per_pod),
        "--log-format",
        "json",
        *picker,
        *migrate,
    ]


def _meta(owner: Owner) -> dict[str, Any]:
    return object_meta(owner, router_name(owner.name), router_labels(owner.name))


def render_router_service_account(owner: Owner) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(owner)}


def render_router_role(owner: Owner) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(owner),
        "rules": _role_rules(),
    }


def render_router_role_binding(owner: Owner) -> dict[str, Any]:
    name = router_name(owner.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(owner),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": owner.namespace}],
    }


def render_router_pdb(owner: Owner) -> dict[str, Any]:
    """At most one router pod evicted at a time, whatever ``routing.replicas``: with two or more
    a drain never takes the last one; with one the drain proceeds (a minAvailable of 1 would
    block it for good). Pods that are not Ready (e.g. no vLLM pod ready yet) may always go."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(owner),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": router_selector(owner.name)},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def render_router_network_policy(
    owner: Owner, spec: LLMServiceSpec, operator_namespace: str
) -> dict[str, Any]:
    """Ingress to the router pods: the served port (and the endpoint picker's, for the gateway)
    from anywhere, the admin API (``/admin/inflight``, ``/admin/migrate``) only from the
    operator's pods in ``operator_namespace``, whose KV loop moves streams through it: nothing
    else can list or move another client's requests. Takes effect where the CNI enforces
    NetworkPolicies."""
    served = [{"port": PORT_NAME, "protocol": "TCP"}]
    if spec.routing.mode == PICKER_MODE:
        served.append({"port": picker_port()["name"], "protocol": "TCP"})
    operator = {k: v for k, v in labels().items() if k != "app.kubernetes.io/name"}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(owner),
        "spec": {
            "podSelector": {"matchLabels": router_selector(owner.name)},
            "policyTypes": ["Ingress"],
            "ingress": [
                {"ports": served},
                {
                    "from": [
                        {
                            "namespaceSelector": {
                                "matchLabels": {"kubernetes.io/metadata.name": operator_namespace}
                            },
                            # part-of and component: the chart's and kustomize's pods alike
                            # (a chart's nameOverride changes app.kubernetes.io/name).
                            "podSelector": {"matchLabels": operator},
                        }
                    ],
                    "ports": [{"port": ADMIN_PORT_NAME, "protocol": "TCP"}],
                },
            ],
        },
    }


def _probe(path: str, period: int) -> dict[str, Any]:
    return {
        "failureThreshold": 3,
        "httpGet": {"path": path, "port": PORT_NAME},
        "periodSeconds": period,
        "timeoutSeconds": 5,
    }


def render_router_deployment(owner: Owner, spec: LLMServiceSpec, image: str) -> dict[str, Any]:
    """The apps/v1 Deployment of ``routing.replicas`` router pods running ``image`` (the
    operator's own: ``gpumix route`` ships with it), under the restricted Pod Security profile
    with the operator's user and security contexts."""
    picker = spec.routing.mode == PICKER_MODE
    labels = picker_labels(owner.name) if picker else router_labels(owner.name)
    selector = router_selector(owner.name)
    port = {"containerPort": PORT, "name": PORT_NAME, "protocol": "TCP"}
    admin = {"containerPort": ADMIN_PORT, "name": ADMIN_PORT_NAME, "protocol": "TCP"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(owner, router_name(owner.name), labels),
        "spec": {
            "replicas": spec.routing.replicas,
            "selector": {"matchLabels": selector},
            # A new router must be Ready before an old one goes: the Service keeps its capacity.
            "strategy": {
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
                "type": "RollingUpdate",
            },
            "template": {
                "metadata": {"annotations": dict(SCRAPE_ANNOTATIONS), "labels": dict(labels)},
                "spec": {
                    "containers": [
                        {
                            "command": router_command(owner, spec),
                            "env": OPERATOR.env(),
                            "image": image,
                            "livenessProbe": _probe("/health", period=10),
                            "name": CONTAINER,
                            "ports": [port, picker_port()] if picker else [port, admin],
                            # Ready once the routing table is loaded and a vLLM pod is ready.
                            "readinessProbe": _probe("/ready", period=5),
                            "resources": _resources(),
                            "securityContext": OPERATOR.container_security_context(),
                            "volumeMounts": [{"mountPath": "/tmp", "name": "tmp"}],
                        }
                    ],
                    # Nothing reads Service environment variables; without them, a namespace
                    # of many Services does not fill the router's environment.
                    "enableServiceLinks": False,
                    "securityContext": OPERATOR.pod_security_context(),
                    "serviceAccountName": router_name(owner.name),
                    # A generation in flight through the router lasts as long as on the engine.
                    "terminationGracePeriodSeconds": TERMINATION_GRACE_SECONDS,
                    # One node going away should not take every router with it; soft, so a
                    # one-node cluster still runs them all.
                    "topologySpreadConstraints": [
                        {
                            "labelSelector": {"matchLabels": dict(selector)},
                            "matchLabelKeys": ["pod-template-hash"],
                            "maxSkew": 1,
                            "topologyKey": "kubernetes.io/hostname",
                            "whenUnsatisfiable": "ScheduleAnyway",
                        }
                    ],
                    "volumes": [{"emptyDir": {"sizeLimit": TMP_SIZE_LIMIT}, "name": "tmp"}],
                },
            },
        },
    }


def render_router(
    owner: Owner, spec: LLMServiceSpec, image: str, operator_namespace: str
) -> list[dict[str, Any]]:
    """Every object of the router, in :data:`ROUTER_KINDS` order (the order to apply them in);
    ``operator_namespace`` is where the KV loop that may call the admin API runs."""
    return [
        render_router_service_account(owner),
        render_router_role(owner),
        render_router_role_binding(owner),
        render_router_pdb(owner),
        render_router_network_policy(owner, spec, operator_namespace),
        render_router_deployment(owner, spec, image),
    ]
