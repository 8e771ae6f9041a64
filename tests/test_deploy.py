"""deploy/sidecar.yaml, the Kubernetes example, checked against the server:
its probes hit endpoints that answer as the probes expect (also while the
proxy drains), its ports and grace period match the server's defaults, and
its environment names variables the proxy reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from proxy.app import DRAIN_PATHS
from proxy.config import ServerModel
from proxy.history.service import STORE_TIMEOUT
from proxy.runtime import CUT_SECONDS
from proxy.serving import CLOSE_SECONDS
from tests.harness import FakeUpstream, route_config, running_proxy
from tests.test_container_files import DOCKERFILE, instructions, known_env_vars

REPO = Path(__file__).resolve().parent.parent
DEPLOYMENT: dict[str, Any] = yaml.safe_load(
    (REPO / "deploy" / "sidecar.yaml").read_text(encoding="utf-8")
)
POD: dict[str, Any] = DEPLOYMENT["spec"]["template"]["spec"]
(SIDECAR,) = POD["initContainers"]
(APP,) = POD["containers"]
DEFAULTS = ServerModel()


def _port(probe: dict[str, Any]) -> int:
    """A probe's port, a number or the name of one of the sidecar's ports."""
    port = probe["httpGet"]["port"]
    if isinstance(port, int):
        return port
    (number,) = [p["containerPort"] for p in SIDECAR["ports"] if p["name"] == port]
    return int(number)


def _probes() -> dict[str, dict[str, Any]]:
    return {kind: SIDECAR[f"{kind}Probe"] for kind in ("startup", "liveness", "readiness")}


def test_it_is_a_deployment_whose_proxy_is_a_native_sidecar() -> None:
    assert DEPLOYMENT["apiVersion"] == "apps/v1"
    assert DEPLOYMENT["kind"] == "Deployment"
    selector = DEPLOYMENT["spec"]["selector"]["matchLabels"]
    assert selector.items() <= DEPLOYMENT["spec"]["template"]["metadata"]["labels"].items()
    # restartPolicy Always on an init container: started first, stopped last
    assert SIDECAR["restartPolicy"] == "Always"


def test_ports_match_the_image_and_the_servers_default() -> None:
    (cmd,) = [args for name, args in instructions(DOCKERFILE) if name == "CMD"]
    assert '"--host", "0.0.0.0"' in cmd  # the kubelet probes the pod's address
    assert f'"--port", "{DEFAULTS.port}"' in cmd
    assert [p["containerPort"] for p in SIDECAR["ports"]] == [DEFAULTS.port]
    for probe in _probes().values():
        assert _port(probe) == DEFAULTS.port
    env = {e["name"]: e for e in APP["env"]}
    assert env["OPENAI_BASE_URL"]["value"] == f"http://127.0.0.1:{DEFAULTS.port}/v1"


def test_the_probes_hit_endpoints_that_answer_as_expected_also_while_draining(
    upstream: FakeUpstream,
) -> None:
    probes = _probes()
    assert probes["liveness"]["httpGet"]["path"] == "/healthz"
    assert probes["readiness"]["httpGet"]["path"] == "/readyz"
    # /readyz waits up to STORE_TIMEOUT for the store: the probe waits longer
    assert probes["readiness"]["timeoutSeconds"] > STORE_TIMEOUT
    with running_proxy(route_config(upstream)) as proxy:
        for kind, probe in probes.items():
            path = probe["httpGet"]["path"]
            assert httpx.get(proxy.base + path, timeout=10).status_code == 200, kind
        proxy.runtime.draining = True  # what SIGTERM does first
        try:
            for kind, probe in probes.items():
                path = probe["httpGet"]["path"]
                assert path in DRAIN_PATHS, kind  # answered, not refused, while draining
                status = httpx.get(proxy.base + path, timeout=10).status_code
                # out of rotation, but not restarted, while it drains
                assert status == (503 if kind == "readiness" else 200), kind
        finally:
            proxy.runtime.draining = False


def test_the_grace_period_covers_the_proxys_drain() -> None:
    drain = DEFAULTS.shutdown_grace_seconds + CUT_SECONDS + CLOSE_SECONDS
    grace = POD["terminationGracePeriodSeconds"]
    assert drain + 5 <= grace <= drain + 60


def test_the_secret_comes_from_a_secret_and_redis_is_optional() -> None:
    env = {e["name"]: e for e in SIDECAR["env"]}
    assert set(env) <= known_env_vars()
    secret = env["REASONING_PROXY_SECRET"]
    assert "value" not in secret
    assert secret["valueFrom"]["secretKeyRef"].get("optional", False) is False
    store = env["REASONING_PROXY_STORE"]["valueFrom"]["secretKeyRef"]
    assert store["optional"] is True  # no key: the memory store
    assert store["name"] == secret["valueFrom"]["secretKeyRef"]["name"]


def test_it_runs_as_the_images_user() -> None:
    (user,) = [args for name, args in instructions(DOCKERFILE) if name == "USER"]
    context = SIDECAR["securityContext"]
    assert context["runAsNonRoot"] is True
    assert str(context["runAsUser"]) == user.split(":")[0]
    assert context["allowPrivilegeEscalation"] is False
