"""The Helm chart, rendered by a real helm: lint, schema, and what every object must hold.

helm comes from deploy/tools/install-helm.sh (built from the Go module proxy into
.local/tools); these tests skip only when no helm binary exists. Rendered manifests are
also checked against the Kubernetes JSON schemas offline (kubernetes-validate).
"""

from __future__ import annotations

import filecmp
import json
import shutil
import subprocess
import tarfile
from dataclasses import fields
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from memwright.settings import (
    PREFIX,
    ApiSettings,
    CuratorSettings,
    IndexerSettings,
    IngestSettings,
    SweeperSettings,
)

Obj = dict[str, Any]  # one rendered Kubernetes object

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "memwright"
DASHBOARDS = ROOT / "deploy" / "grafana" / "dashboards"
ALERT_RULES = ROOT / "deploy" / "prometheus" / "rules" / "memwright.rules.yml"
SERVICES = ("ingest", "sweeper", "curator", "indexer", "api")
VALUE_FILES = [None, *sorted(p.name for p in (CHART / "ci").glob("*-values.yaml"))]
# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBE_VERSIONS = ("1.25.0", "1.37.0")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}  # not in the Kubernetes schemas
SECRET_VARS = {
    "MEMWRIGHT_JWT_SECRET",
    "MEMWRIGHT_PG_DSN",
    "PGPASSWORD",
    "MEMWRIGHT_QDRANT_API_KEY",
    "MEMWRIGHT_LLM_API_KEY",
    "MEMWRIGHT_EMBED_API_KEY",
}


def _helm_binary() -> str | None:
    local = ROOT / ".local" / "tools" / "helm"
    return str(local) if local.exists() else shutil.which("helm")


HELM = _helm_binary()
needs_helm = pytest.mark.skipif(
    HELM is None, reason="no helm binary: run deploy/tools/install-helm.sh (make test runs it)"
)


def helm(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert HELM is not None
    proc = subprocess.run([HELM, *args], capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"helm {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


def render(values_file: str | None = None, *sets: str) -> list[Obj]:
    args = ["template", "rel", str(CHART), "--namespace", "mw"]
    if values_file:
        args += ["-f", str(CHART / "ci" / values_file)]
    for s in sets:
        args += ["--set", s]
    return [doc for doc in yaml.safe_load_all(helm(*args).stdout) if doc]


def of_kind(objs: list[Obj], kind: str) -> list[Obj]:
    return [o for o in objs if o["kind"] == kind]


def pod_specs(objs: list[Obj]) -> list[tuple[str, Obj]]:
    """(name, pod spec) of every Deployment and Job."""
    workloads = [o for o in objs if o["kind"] in ("Deployment", "Job")]
    return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in workloads]


def deployment(objs: list[Obj], svc: str) -> Obj:
    (dep,) = [d for d in of_kind(objs, "Deployment") if d["metadata"]["name"] == f"rel-memwright-{svc}"]
    return dep


def container(objs: list[Obj], svc: str) -> Obj:
    (only,) = deployment(objs, svc)["spec"]["template"]["spec"]["containers"]
    return only


def env_of(c: Obj) -> dict[str, Obj]:
    return {e["name"]: e for e in c.get("env", [])}


@pytest.fixture(scope="module")
def default_objs() -> list[Obj]:
    return render()


def test_chart_dashboards_are_identical_copies_of_deploy_grafana() -> None:
    # helm package cannot follow a symlink out of the chart, so the chart keeps copies.
    names = sorted(p.name for p in DASHBOARDS.glob("*.json"))
    assert names == sorted(p.name for p in (CHART / "dashboards").glob("*.json"))
    _, mismatch, errors = filecmp.cmpfiles(DASHBOARDS, CHART / "dashboards", names, shallow=False)
    fix = "cp deploy/grafana/dashboards/*.json helm/memwright/dashboards/"
    assert not mismatch and not errors, f"chart copies differ: {mismatch + errors}; run {fix}"


def test_chart_alert_rules_are_an_identical_copy_of_deploy_prometheus() -> None:
    fix = "cp deploy/prometheus/rules/memwright.rules.yml helm/memwright/rules/"
    assert filecmp.cmp(ALERT_RULES, CHART / "rules" / ALERT_RULES.name, shallow=False), f"run {fix}"


@needs_helm
@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_helm_lint_passes(values_file: str | None) -> None:
    args = ["lint", str(CHART), "--strict"]
    if values_file:
        args += ["-f", str(CHART / "ci" / values_file)]
    assert "0 chart(s) failed" in helm(*args).stdout


@needs_helm
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("ingest.replicas=two", "/ingest/replicas"),
        ("curator.policy=llm", "/llm/baseUrl"),  # the llm policy needs an endpoint
        ("kafka.bootstrap=no-port", "/kafka/bootstrap"),
        ("sweeper.replicass=2", "replicass"),  # a typo is an error, not a silent default
        ("api.env.JWT_SECRET=x", "JWT_SECRET"),  # only MEMWRIGHT_* names
        ("secrets.existingSecret=", "/secrets/existingSecret"),
        ("auth.jwks.enabled=true", "/auth/jwks"),  # a JWKS needs a ConfigMap or a Secret
        ("auth.jwks.enabled=true,auth.jwks.configMap=a,auth.jwks.secret=b", "/auth/jwks"),  # not both
        ("auth.hs256.enabled=false", "/auth/jwks/enabled"),  # no HS256 and no JWKS: no token verifies
        ("llm.maxSteps=0", "/llm/maxSteps"),
        ("llm.timeoutSeconds=0", "/llm/timeoutSeconds"),
        ("indexer.driftCheckSeconds=-1", "/indexer/driftCheckSeconds"),
        ("sweeper.sessionTimeoutSeconds=5", "/sweeper/sessionTimeoutSeconds"),  # the service refuses < 6
    ],
)
def test_wrong_value_fails_on_the_schema(setting: str, message: str) -> None:
    proc = helm("template", "rel", str(CHART), "--set", setting, check=False)
    assert proc.returncode != 0
    assert "values don't meet the specifications of the schema" in proc.stderr
    assert message in proc.stderr


@needs_helm
@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_rendered_manifests_match_kubernetes_schemas(values_file: str | None) -> None:
    objs = render(values_file)
    for version in KUBE_VERSIONS:
        for obj in objs:
            if obj["kind"] in CRD_KINDS:
                continue
            kubernetes_validate.validate(obj, version, strict=True)  # raises on any error


@needs_helm
def test_one_deployment_per_service_runs_its_command(default_objs: list[Obj]) -> None:
    for svc in SERVICES:
        assert container(default_objs, svc)["args"] == [svc]
        app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
        assert container(default_objs, svc)["image"] == f"memwright:{app_version}"


@needs_helm
@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_every_container_runs_restricted(values_file: str | None) -> None:
    specs = pod_specs(render(values_file))
    assert specs
    for name, spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert spec["automountServiceAccountToken"] is False, name
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True, (name, c["name"])
            assert sc["readOnlyRootFilesystem"] is True, (name, c["name"])
            assert sc["allowPrivilegeEscalation"] is False, (name, c["name"])
            assert sc["capabilities"]["drop"] == ["ALL"], (name, c["name"])
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, (name, c["name"])
            assert c["resources"]["limits"]["memory"], (name, c["name"])


@needs_helm
def test_probes_hit_health_endpoints_on_the_ops_port(default_objs: list[Obj]) -> None:
    for svc in SERVICES:
        c = container(default_objs, svc)
        ops = {p["name"]: p["containerPort"] for p in c["ports"]}["ops"]
        assert env_of(c)["MEMWRIGHT_OPS_PORT"]["value"] == str(ops)
        assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "ops"}
        assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "ops"}
        assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "ops"}


@needs_helm
def test_services_expose_http_and_ops_ports(default_objs: list[Obj]) -> None:
    ports = {
        s["metadata"]["name"]: {p["name"]: p["port"] for p in s["spec"]["ports"]}
        for s in of_kind(default_objs, "Service")
    }
    assert ports["rel-memwright-ingest"] == {"http": 8081, "ops": 9181}
    assert ports["rel-memwright-api"] == {"http": 8082, "ops": 9182}
    assert ports["rel-memwright-sweeper"] == {"ops": 9183}
    assert ports["rel-memwright-curator"] == {"ops": 9184}
    assert ports["rel-memwright-indexer"] == {"ops": 9185}


@needs_helm
@pytest.mark.parametrize("values_file", VALUE_FILES)
def test_no_secret_values_anywhere(values_file: str | None) -> None:
    objs = render(values_file)
    assert not of_kind(objs, "Secret"), "the chart only references an existing Secret"
    (config,) = [c for c in of_kind(objs, "ConfigMap") if c["metadata"]["name"] == "rel-memwright"]
    data = config["data"]
    assert not SECRET_VARS & {k for k in data if k != "MEMWRIGHT_PG_DSN"}
    if "MEMWRIGHT_PG_DSN" in data:  # address mode: a DSN without a password
        userinfo = data["MEMWRIGHT_PG_DSN"].split("://", 1)[1].split("@", 1)[0]
        assert ":" not in userinfo
    assert data["MEMWRIGHT_OPS_HOST"] == data["MEMWRIGHT_HTTP_HOST"] == "0.0.0.0"
    for name, spec in pod_specs(objs):
        for c in spec["containers"] + spec.get("initContainers", []):
            for var, entry in env_of(c).items():
                if var == "MEMWRIGHT_PG_DSN" and "value" in entry:
                    assert entry["value"] == data[var]  # the password-free DSN
                elif var in SECRET_VARS:
                    assert entry["valueFrom"]["secretKeyRef"]["name"], (name, var)


@needs_helm
def test_each_service_gets_only_the_secrets_it_needs(default_objs: list[Obj]) -> None:
    wanted = {
        "ingest": {"MEMWRIGHT_JWT_SECRET"},
        "sweeper": {"PGPASSWORD"},
        "curator": {"PGPASSWORD", "MEMWRIGHT_LLM_API_KEY"},
        "indexer": {"PGPASSWORD", "MEMWRIGHT_QDRANT_API_KEY", "MEMWRIGHT_EMBED_API_KEY"},
        "api": {"PGPASSWORD", "MEMWRIGHT_JWT_SECRET"},
    }
    for svc, names in wanted.items():
        env = env_of(container(default_objs, svc))
        assert {k for k, e in env.items() if "secretKeyRef" in e.get("valueFrom", {})} == names, svc


@needs_helm
def test_sweeper_writes_only_to_an_empty_dir(default_objs: list[Obj]) -> None:
    spec = deployment(default_objs, "sweeper")["spec"]["template"]["spec"]
    config = of_kind(default_objs, "ConfigMap")[0]["data"]
    mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
    volume = mounts[config["MEMWRIGHT_SWEEPER_DATA_DIR"]]
    assert "emptyDir" in {v["name"]: v for v in spec["volumes"]}[volume]


@needs_helm
def test_migrations_run_as_a_pre_install_and_pre_upgrade_hook(default_objs: list[Obj]) -> None:
    (job,) = of_kind(default_objs, "Job")
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == {"pre-install", "pre-upgrade"}
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    spec = job["spec"]["template"]["spec"]
    assert [c["args"] for c in spec["initContainers"]] == [["migrate"]]
    assert [c["args"] for c in spec["containers"]] == [["topics"]]
    # The ConfigMap does not exist yet at pre-install: settings must be inline.
    assert not any("envFrom" in c for c in spec["containers"] + spec["initContainers"])
    assert "MEMWRIGHT_PG_DSN" in env_of(spec["initContainers"][0])
    assert "MEMWRIGHT_KAFKA_BOOTSTRAP" in env_of(spec["containers"][0])


@needs_helm
def test_dashboards_are_configmaps_labelled_for_grafana(default_objs: list[Obj]) -> None:
    maps = [c for c in of_kind(default_objs, "ConfigMap") if c["metadata"]["labels"].get("grafana_dashboard") == "1"]
    files = {p.name: json.loads(p.read_text()) for p in DASHBOARDS.glob("*.json")}
    assert len(maps) == len(files) == 5
    for cm in maps:
        ((name, body),) = cm["data"].items()
        assert json.loads(body) == files[name]


@needs_helm
def test_optional_objects_follow_their_enabled_values(default_objs: list[Obj]) -> None:
    kinds = lambda objs: sorted(o["kind"] for o in objs)  # noqa: E731
    default = kinds(default_objs)
    assert default.count("PodDisruptionBudget") == 5
    assert "ServiceMonitor" not in default and "NetworkPolicy" not in default and "PrometheusRule" not in default
    assert "HorizontalPodAutoscaler" not in default
    production = render("production-values.yaml")
    assert kinds(production).count("NetworkPolicy") == 5
    assert kinds(production).count("ServiceMonitor") == 1
    assert kinds(production).count("PrometheusRule") == 1
    hpas = {h["spec"]["scaleTargetRef"]["name"] for h in of_kind(production, "HorizontalPodAutoscaler")}
    assert hpas == {"rel-memwright-ingest", "rel-memwright-curator"}
    for svc in ("ingest", "curator"):  # the HPA owns the replica count
        assert "replicas" not in deployment(production, svc)["spec"]
    minimal = kinds(render("minimal-values.yaml"))
    assert "PodDisruptionBudget" not in minimal and "Job" not in minimal
    assert minimal.count("ConfigMap") == 1  # settings only, no dashboards


@needs_helm
def test_the_prometheus_rule_holds_the_alert_rules_as_written() -> None:
    """Every group and alert of deploy/prometheus/rules, with Prometheus's own {{ $value }}
    templates left for Prometheus (Helm does not render the file), selectable by its labels."""
    [rule] = of_kind(render("production-values.yaml"), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert rule["spec"] == yaml.safe_load(ALERT_RULES.read_text())
    annotations = [r["annotations"]["description"] for g in rule["spec"]["groups"] for r in g["rules"]]
    assert any("{{ $value" in a for a in annotations)


@needs_helm
def test_packaged_chart_contains_the_dashboards(tmp_path: Path) -> None:
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("memwright-*.tgz")
    with tarfile.open(archive) as tar:
        packaged = {Path(n).name for n in tar.getnames() if "/dashboards/" in n}
        rules = {Path(n).name for n in tar.getnames() if "/rules/" in n}
    assert packaged == {p.name for p in DASHBOARDS.glob("*.json")}
    assert rules == {ALERT_RULES.name}


@needs_helm
def test_every_setting_the_chart_passes_is_one_a_service_reads(default_objs: list[Obj]) -> None:
    known = {
        PREFIX + f.name.upper()
        for cls in (IngestSettings, SweeperSettings, CuratorSettings, IndexerSettings, ApiSettings)
        for f in fields(cls)
    }
    (config,) = [c for c in of_kind(default_objs, "ConfigMap") if c["metadata"]["name"] == "rel-memwright"]
    assert set(config["data"]) - known == set(), "a typo in a setting name is silently ignored"
    passed = {e["name"] for _, spec in pod_specs(default_objs) for c in spec["containers"] for e in c.get("env", [])}
    assert {n for n in passed if n.startswith(PREFIX)} - known == set()


@needs_helm
def test_chart_defaults_of_llm_indexer_and_sweeper_settings_are_the_services_defaults(default_objs: list[Obj]) -> None:
    (config,) = [c for c in of_kind(default_objs, "ConfigMap") if c["metadata"]["name"] == "rel-memwright"]
    for cls, names in {
        CuratorSettings: ("llm_timeout_s", "llm_max_retries", "llm_max_steps"),
        IndexerSettings: ("drift_check_seconds", "drift_settle_seconds", "drain_seconds"),
        SweeperSettings: ("sweeper_session_timeout_seconds",),
    }.items():
        for name in names:
            assert float(config["data"][PREFIX + name.upper()]) == getattr(cls, name), name


@needs_helm
def test_indexer_drain_must_fit_in_its_termination_grace_period() -> None:
    proc = helm("template", "rel", str(CHART), "--set", "indexer.drainSeconds=30", check=False)
    assert proc.returncode != 0
    assert "indexer.drainSeconds must be below indexer.terminationGracePeriodSeconds" in proc.stderr


@needs_helm
def test_without_jwks_ingest_and_api_require_the_jwt_secret(default_objs: list[Obj]) -> None:
    for svc in ("ingest", "api"):
        c = container(default_objs, svc)
        ref = env_of(c)["MEMWRIGHT_JWT_SECRET"]["valueFrom"]["secretKeyRef"]
        assert "optional" not in ref, svc
        assert "MEMWRIGHT_JWT_JWKS_FILE" not in env_of(c)
        assert "jwks" not in {m["name"] for m in c["volumeMounts"]}


@needs_helm
@pytest.mark.parametrize("source", ["configMap", "secret"])
def test_jwks_is_mounted_into_ingest_and_api_and_the_jwt_secret_becomes_optional(source: str) -> None:
    objs = render(None, "auth.jwks.enabled=true", f"auth.jwks.{source}=memwright-jwks", "auth.jwks.key=keys.json")
    for svc in SERVICES:
        spec = deployment(objs, svc)["spec"]["template"]["spec"]
        env = env_of(spec["containers"][0])
        volumes = {v["name"]: v for v in spec["volumes"]}
        if svc not in ("ingest", "api"):
            assert "jwks" not in volumes and "MEMWRIGHT_JWT_JWKS_FILE" not in env, svc
            continue
        (mount,) = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "jwks"]
        # the directory, not the file (subPath): an updated ConfigMap or Secret reaches the pod
        # and auth.py re-reads the changed file, so keys rotate without a restart
        assert mount["readOnly"] is True and "subPath" not in mount
        volume = volumes["jwks"]
        if source == "configMap":
            assert volume["configMap"]["name"] == "memwright-jwks"
            items = volume["configMap"]["items"]
        else:
            assert volume["secret"]["secretName"] == "memwright-jwks"
            items = volume["secret"]["items"]
        assert items == [{"key": "keys.json", "path": "jwks.json"}]
        assert env["MEMWRIGHT_JWT_JWKS_FILE"]["value"] == mount["mountPath"] + "/jwks.json"
        # HS256 still works when the Secret has the key, and the pod starts without it
        assert env["MEMWRIGHT_JWT_SECRET"]["valueFrom"]["secretKeyRef"]["optional"] is True
    for version in KUBE_VERSIONS:
        for obj in objs:
            if obj["kind"] not in CRD_KINDS:
                kubernetes_validate.validate(obj, version, strict=True)


@needs_helm
def test_rs256_only_reads_no_jwt_secret() -> None:
    objs = render("rs256-values.yaml")
    for svc in ("ingest", "api"):
        env = env_of(container(objs, svc))
        assert "MEMWRIGHT_JWT_SECRET" not in env, svc
        assert env["MEMWRIGHT_JWT_JWKS_FILE"]["value"].endswith("/jwks.json")
