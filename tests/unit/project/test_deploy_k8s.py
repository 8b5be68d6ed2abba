"""deploy/k8s renders, and what it renders matches the code.

A small renderer here implements the part of Kustomize that deploy/k8s uses
(resources, namespace, images, strategic-merge patches that merge lists of named
items by name, JSON 6902 patches with a target); a kustomization using anything
else fails the test. Where a kustomize binary exists (`kustomize`, or `kubectl
kustomize`), a second test renders with it and checks both agree; it is collected
only where one exists.

`docstream ingest` prepares and exits, so it is a Job; every other service is a
Deployment. Checks on base and every overlay: labels and selectors, probes on
/healthz and /readyz at the metrics port, resources, a termination grace long
enough to drain, a PDB per Deployment, the KEDA ScaledObject on the inference
consumer group, every DOCSTREAM_* name a real setting (and the values loadable),
secrets only from a Secret, and nvidia.com/gpu on inference only in the GPU overlay.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from docstream.settings import Settings
from docstream.topics import Topics
from tests.unit.project.test_deploy_compose import (
    API_PORT,
    ONE_SHOT,
    cli_commands,
    drain_budget_s,
    is_setting,
    secret_env_names,
    settings_from_env,
)

ROOT = Path(__file__).resolve().parents[3]
K8S = ROOT / "deploy" / "k8s"
TARGETS = {"base": K8S / "base", "cpu": K8S / "overlays" / "cpu", "gpu": K8S / "overlays" / "gpu"}
_SUPPORTED = {"apiVersion", "kind", "namespace", "resources", "images", "patches"}
_SELECTOR_LABELS = ("app.kubernetes.io/name", "app.kubernetes.io/component")
_CONFIGMAP = "docstream-settings"
_SECRET = "docstream-secrets"
GPU = "nvidia.com/gpu"

Doc = dict[str, Any]


# ---------------------------------------------------------------- the renderer


def _load_docs(path: Path) -> list[Doc]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _strategic_merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            merged[key] = _strategic_merge(base[key], value) if key in base else copy.deepcopy(value)
        return merged
    if isinstance(base, list) and isinstance(patch, list) and _named(base) and _named(patch):
        # kustomize's order: the patch's items (merged into the base's of that name), then the base's others.
        by_name = {item["name"]: item for item in base}
        merged_list = [
            _strategic_merge(by_name[item["name"]], item) if item["name"] in by_name else copy.deepcopy(item)
            for item in patch
        ]
        patched = {item["name"] for item in patch}
        return merged_list + [copy.deepcopy(item) for item in base if item["name"] not in patched]
    return copy.deepcopy(patch)


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(item, dict) and "name" in item for item in items)


def _json6902(doc: Doc, operations: list[Doc]) -> None:
    for op in operations:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        key: Any = int(last) if isinstance(node, list) and last != "-" else last
        if op["op"] in {"replace", "add"}:
            if isinstance(node, list) and op["op"] == "add":
                node.insert(len(node) if key == "-" else key, op["value"])
            else:
                if op["op"] == "replace":
                    assert (key in node) if isinstance(node, dict) else key < len(node), f"replace of missing {op}"
                node[key] = op["value"]
        elif op["op"] == "remove":
            del node[key]
        else:
            raise AssertionError(f"JSON 6902 op not supported by the test renderer: {op['op']}")


def _matches(doc: Doc, target: Doc) -> bool:
    group, _, version = doc["apiVersion"].rpartition("/")
    return bool(
        target.get("kind", doc["kind"]) == doc["kind"]
        and target.get("name", doc["metadata"]["name"]) == doc["metadata"]["name"]
        and target.get("group", group) == group
        and target.get("version", version) == version
    )


def _set_images(doc: Doc, images: list[Doc]) -> None:
    spec = doc.get("spec", {}).get("template", {}).get("spec", {})
    for container in spec.get("containers", []) + spec.get("initContainers", []):
        name, _, tag = container["image"].partition(":")
        for image in images:
            if image["name"] == name:
                container["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"


def render(directory: Path) -> list[Doc]:
    """Render a kustomization directory the way kustomize would (for the features above)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    unsupported = set(kustomization) - _SUPPORTED
    assert not unsupported, f"{directory}: the test renderer does not implement {sorted(unsupported)}"
    docs: list[Doc] = []
    for resource in kustomization.get("resources", []):
        path = directory / resource
        docs += render(path) if path.is_dir() else _load_docs(path)
    for patch in kustomization.get("patches", []):
        body = yaml.safe_load((directory / patch["path"]).read_text())
        if "target" in patch:
            hits = [doc for doc in docs if _matches(doc, patch["target"])]
            assert hits, f"patch {patch['path']} targets nothing"
            for doc in hits:
                _json6902(doc, body)
        else:
            where = [i for i, doc in enumerate(docs) if _matches(doc, {"kind": body["kind"], **body["metadata"]})]
            assert len(where) == 1, f"patch {patch['path']} matches {len(where)} resources"
            docs[where[0]] = _strategic_merge(docs[where[0]], body)
    for doc in docs:
        _set_images(doc, kustomization.get("images", []))
        if "namespace" in kustomization:
            doc["metadata"]["namespace"] = kustomization["namespace"]
    return docs


def _rendered(target: str) -> list[Doc]:
    return render(TARGETS[target])


def _kinds(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def _one(docs: list[Doc], kind: str, name: str) -> Doc:
    found = [doc for doc in docs if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def _containers(workload: Doc) -> list[Doc]:
    containers: list[Doc] = workload["spec"]["template"]["spec"]["containers"]
    return containers


def _workloads(docs: list[Doc]) -> list[Doc]:
    return _kinds(docs, "Deployment") + _kinds(docs, "Job")


def _component(workload: Doc) -> str:
    command = _containers(workload)[0]["command"]
    assert command[0] == "docstream" and len(command) == 2, command
    return str(command[1])


def _container_env(docs: list[Doc], container: Doc) -> dict[str, str]:
    """The env a container gets from its ConfigMap refs and env: (secrets are checked apart)."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(_one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = str(item["value"])
    return env


def _effective(docs: list[Doc], workload: Doc) -> Settings:
    return settings_from_env(_container_env(docs, _containers(workload)[0]))


def _all_env_names(docs: list[Doc]) -> Iterator[tuple[str, str]]:
    for configmap in _kinds(docs, "ConfigMap"):
        for key in configmap.get("data", {}):
            yield f"ConfigMap/{configmap['metadata']['name']}", key
    for workload in _workloads(docs):
        for container in _containers(workload):
            for item in container.get("env", []):
                yield f"{workload['kind']}/{workload['metadata']['name']}", item["name"]


def _port_number(container: Doc, port: int | str) -> int:
    if isinstance(port, int):
        return port
    return int(next(p["containerPort"] for p in container["ports"] if p["name"] == port))


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_renders_every_service_once(target: str) -> None:
    docs = _rendered(target)
    components = sorted(_component(d) for d in _workloads(docs))
    assert components == sorted({"ingest", "chunker", "inference", "reducer", "api"})
    assert {_component(d) for d in _kinds(docs, "Job")} == ONE_SHOT
    keys = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys))
    assert {d["metadata"]["namespace"] for d in docs} == {"docstream"}


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_workloads_run_real_commands(target: str) -> None:
    used = {_component(d) for d in _workloads(_rendered(target))}
    assert sorted(used - cli_commands()) == [], "not commands of docstream_cli.app"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_deployments_have_matching_labels_and_selectors(target: str) -> None:
    for deployment in _kinds(_rendered(target), "Deployment"):
        component = _component(deployment)
        assert deployment["metadata"]["name"] == f"docstream-{component}"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector == {"app.kubernetes.io/name": "docstream", "app.kubernetes.io/component": component}
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= pod_labels.items()
        assert selector.items() <= deployment["metadata"]["labels"].items()
    for job in _kinds(_rendered(target), "Job"):
        assert job["metadata"]["name"] == f"docstream-{_component(job)}"
        assert job["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"] == _component(job)


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_one_shot_jobs_retry_and_finish(target: str) -> None:
    for job in _kinds(_rendered(target), "Job"):
        assert job["spec"]["template"]["spec"]["restartPolicy"] in {"OnFailure", "Never"}
        assert job["spec"]["backoffLimit"] >= 1
        assert job["spec"]["activeDeadlineSeconds"] > 0
        assert "ttlSecondsAfterFinished" in job["spec"], "a finished Job must go, or the next image cannot apply"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_probes_hit_healthz_and_readyz_on_the_metrics_port(target: str) -> None:
    docs = _rendered(target)
    for deployment in _kinds(docs, "Deployment"):
        component = _component(deployment)
        container = _containers(deployment)[0]
        expected = API_PORT if component == "api" else _effective(docs, deployment).metrics.port
        assert expected > 0
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz"), ("startupProbe", "/healthz")):
            get = container[probe]["httpGet"]
            assert get["path"] == path, (component, probe)
            assert _port_number(container, get["port"]) == expected, (component, probe)
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"
        assert int(annotations["prometheus.io/port"]) == expected
        assert annotations["prometheus.io/path"] == "/metrics"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_container_has_resources(target: str) -> None:
    for deployment in _workloads(_rendered(target)):
        resources = _containers(deployment)[0]["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]), deployment["metadata"]["name"]
        assert "memory" in resources["limits"], deployment["metadata"]["name"]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_termination_grace_drains_a_batch(target: str) -> None:
    docs = _rendered(target)
    for deployment in _kinds(docs, "Deployment"):
        container = _containers(deployment)[0]
        pre_stop = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
        pre_stop_s = float(pre_stop[1]) if pre_stop[:1] == ["sleep"] else 0.0
        grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        needed = drain_budget_s(_component(deployment), _effective(docs, deployment), pre_stop_s)
        assert grace >= needed, f"{deployment['metadata']['name']}: grace {grace}s < drain {needed}s"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_every_deployment_has_a_pdb_selecting_it(target: str) -> None:
    docs = _rendered(target)
    pdbs = _kinds(docs, "PodDisruptionBudget")
    for deployment in _kinds(docs, "Deployment"):
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        selecting = [p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()]
        assert len(selecting) == 1, deployment["metadata"]["name"]
        assert selecting[0]["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
        assert "maxUnavailable" in selecting[0]["spec"] or "minAvailable" in selecting[0]["spec"]


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_keda_scales_inference_on_its_consumer_group_lag(target: str) -> None:
    docs = _rendered(target)
    inference = _one(docs, "Deployment", "docstream-inference")
    settings = _effective(docs, inference)
    (scaled,) = _kinds(docs, "ScaledObject")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    ref = scaled["spec"]["scaleTargetRef"]
    assert (ref.get("kind", "Deployment"), ref["name"]) == ("Deployment", inference["metadata"]["name"])
    assert "replicas" not in inference["spec"], "KEDA owns inference replicas; a fixed count fights it on apply"
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    meta = trigger["metadata"]
    assert meta["bootstrapServers"] == settings.kafka.bootstrap_servers
    assert meta["consumerGroup"] == f"{settings.kafka.topic_prefix}-inference"
    assert meta["topic"] == Topics(settings.kafka.topic_prefix).chunks
    assert isinstance(meta["lagThreshold"], str) and int(meta["lagThreshold"]) > 0
    assert 1 <= scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"] <= settings.kafka.partitions


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_env_names_are_settings_and_values_load(target: str) -> None:
    docs = _rendered(target)
    unknown = sorted(f"{where}: {name}" for where, name in _all_env_names(docs) if not is_setting(name))
    assert unknown == [], f"not settings of docstream.settings.Settings: {unknown}"
    for deployment in _workloads(docs):
        settings = _effective(docs, deployment)
        assert settings.service == _component(deployment)
        assert settings.log.format == "json"
        assert settings.store.backend == "cassandra"


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_secrets_come_only_from_the_secret(target: str) -> None:
    docs = _rendered(target)
    exposed = sorted(f"{where}: {name}" for where, name in _all_env_names(docs) if name in secret_env_names())
    assert exposed == []
    assert not _kinds(docs, "Secret"), "a committed Secret would overwrite the cluster's on every apply"
    for deployment in _workloads(docs):
        refs = [s["secretRef"]["name"] for s in _containers(deployment)[0]["envFrom"] if "secretRef" in s]
        assert refs == [_SECRET]
    (example,) = _load_docs(K8S / "base" / "secret.example.yaml")
    assert example["kind"] == "Secret" and example["metadata"]["name"] == _SECRET
    assert sorted(name for name in example["stringData"] if not is_setting(name)) == []
    assert secret_env_names() & set(example["stringData"])


@pytest.mark.parametrize("target", sorted(TARGETS))
def test_gpus_only_for_inference_and_only_in_the_gpu_overlay(target: str) -> None:
    docs = _rendered(target)
    for deployment in _workloads(docs):
        resources = _containers(deployment)[0]["resources"]
        gpus = {str(resources.get(kind, {}).get(GPU)) for kind in ("requests", "limits")} - {"None"}
        if target == "gpu" and _component(deployment) == "inference":
            assert gpus == {"1"}
            assert _effective(docs, deployment).inference.device == "cuda"
            assert any(t["key"] == GPU for t in deployment["spec"]["template"]["spec"]["tolerations"])
        else:
            assert gpus == set(), deployment["metadata"]["name"]
    if target == "cpu":
        inference = _one(docs, "Deployment", "docstream-inference")
        assert _effective(docs, inference).inference.device == "cpu"


def test_configmap_is_the_one_referenced() -> None:
    docs = _rendered("base")
    _one(docs, "ConfigMap", _CONFIGMAP)
    for deployment in _workloads(docs):
        refs = [s["configMapRef"]["name"] for s in _containers(deployment)[0]["envFrom"] if "configMapRef" in s]
        assert refs == [_CONFIGMAP]


def test_api_service_routes_to_the_api_pods() -> None:
    docs = _rendered("base")
    service = _one(docs, "Service", "docstream-api")
    api = _one(docs, "Deployment", "docstream-api")
    assert service["spec"]["selector"] == api["spec"]["selector"]["matchLabels"]
    (port,) = service["spec"]["ports"]
    assert _port_number(_containers(api)[0], port["targetPort"]) == API_PORT


# ---------------------------------------------------------------- a real kustomize, where one exists


def _kustomize_argv() -> list[str] | None:
    if shutil.which("kustomize"):
        return ["kustomize", "build"]
    if shutil.which("kubectl"):
        probe = subprocess.run(["kubectl", "kustomize", "--help"], capture_output=True, timeout=60, check=False)
        if probe.returncode == 0:
            return ["kubectl", "kustomize"]
    return None


_KUSTOMIZE = _kustomize_argv()

if _KUSTOMIZE is not None:

    @pytest.mark.parametrize("target", sorted(TARGETS))
    def test_kustomize_renders_the_same(target: str) -> None:
        assert _KUSTOMIZE is not None
        done = subprocess.run(
            [*_KUSTOMIZE, str(TARGETS[target])], capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, done.stderr
        theirs = {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(done.stdout) if d}
        ours = {(d["kind"], d["metadata"]["name"]): d for d in _rendered(target)}
        assert theirs.keys() == ours.keys()
        for key, doc in ours.items():
            assert theirs[key] == doc, key
