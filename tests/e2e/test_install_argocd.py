"""Argo CD: the LLMService health check (Lua) on its test cases, and the Application example.

Argo CD runs health checks in gopher-lua (Lua 5.1); we run them with Debian's lua5.4 (`make
test` installs it), on every case of health_test.yaml in Argo CD's resource_customizations
layout. The script uses nothing that differs between the two.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ARGOCD = ROOT / "argocd"
CHECK = ARGOCD / "resource_customizations" / "gpumix.io" / "LLMService"

pytestmark = pytest.mark.e2e


def lua_binary() -> str:
    lua = shutil.which("lua5.4") or shutil.which("lua")
    if lua is None:
        pytest.fail("no Lua interpreter: `make lua` (apt-get install lua5.4) installs one")
    return lua


def lua_value(value: Any) -> str:
    """A JSON-like value as a Lua expression (what Argo CD hands the script as `obj`)."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):  # UTF-8 bytes; decimal escapes mean the same in Lua 5.1 and 5.4
        return (
            '"'
            + "".join(
                chr(b) if 32 <= b < 127 and chr(b) not in '"\\' else f"\\{b:03d}"
                for b in value.encode()
            )
            + '"'
        )
    if isinstance(value, list):
        return "{" + ", ".join(lua_value(v) for v in value) + "}"
    if isinstance(value, dict):
        return (
            "{" + ", ".join(f"[{json.dumps(k)}] = {lua_value(v)}" for k, v in value.items()) + "}"
        )
    raise TypeError(type(value))


def health(obj: dict[str, Any]) -> dict[str, str]:
    """Run health.lua on `obj` as Argo CD does: `obj` global, the script returns a table."""
    script = (
        f"obj = {lua_value(obj)}\n"
        f"local function check()\n{(CHECK / 'health.lua').read_text()}\nend\n"
        "local hs = check()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    out = subprocess.run(
        [lua_binary(), "-"], input=script, capture_output=True, text=True, check=False, timeout=10
    )
    assert out.returncode == 0, out.stderr
    status, _, message = out.stdout.partition("\n")
    return {"status": status, "message": message}


CASES = yaml.safe_load((CHECK / "health_test.yaml").read_text())["tests"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: Path(c["inputPath"]).stem)
def test_health_check_cases(case: dict[str, Any]) -> None:
    obj = yaml.safe_load((CHECK / case["inputPath"]).read_text())
    assert health(obj) == case["healthStatus"]


def test_cases_cover_every_ready_reason() -> None:
    """Every reason the operator sets on Ready (gpumix.reconcile) has a case with its status."""
    want = {
        "Serving": "Healthy",
        "RollingOut": "Progressing",
        "Unschedulable": "Progressing",
        "InvalidSpec": "Degraded",
        "Unservable": "Degraded",
        "InsufficientCapacity": "Degraded",
        "NoUsablePool": "Degraded",
        "SolverFailed": "Degraded",
    }
    seen: dict[str, str] = {}
    for case in CASES:
        obj = yaml.safe_load((CHECK / case["inputPath"]).read_text())
        status = obj.get("status") or {}
        if status.get("observedGeneration") != obj["metadata"]["generation"]:
            continue
        for cond in status.get("conditions", []):
            if cond["type"] == "Ready":
                seen[cond["reason"]] = case["healthStatus"]["status"]
    assert seen == want
    reconcile = ROOT / "operator" / "gpumix" / "reconcile"
    source = "".join(p.read_text() for p in reconcile.glob("*.py"))
    for reason in want:
        assert f'"{reason}"' in source, f"the operator no longer sets {reason}"


def test_argocd_cm_patch_carries_the_health_check() -> None:
    patch = yaml.safe_load((ARGOCD / "argocd-cm-patch.yaml").read_text())
    key = "resource.customizations.health.gpumix.io_LLMService"
    assert patch == {"data": {key: (CHECK / "health.lua").read_text()}}


def test_application_points_at_the_kustomize_manifests() -> None:
    app = yaml.safe_load((ARGOCD / "application.yaml").read_text())
    assert app["apiVersion"] == "argoproj.io/v1alpha1"
    assert app["kind"] == "Application"
    source = app["spec"]["source"]
    assert (ROOT / source["path"] / "kustomization.yaml").exists()
    assert source["repoURL"] == "REPO_URL"  # the README's command substitutes it
    assert app["spec"]["destination"]["namespace"] == "gpumix-system"
    assert "ServerSideApply=true" in app["spec"]["syncPolicy"]["syncOptions"]
