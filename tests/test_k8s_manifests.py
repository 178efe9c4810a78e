"""The Kubernetes recipes in contrib/k8s: schema-valid, and their command lines are ones our tools accept."""

from __future__ import annotations

import copy
import re
import shlex
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import k8s_manifests as k8s
import pytest
from kubernetes_validate import latest_version

from pytest_nvlink.cli import build_parser
from pytest_nvlink.config.suites import load_suite
from pytest_nvlink.launch import parser as launch_parser

DOCUMENTS = list(k8s.all_documents())
UNKNOWN = "Additional properties are not allowed"


def _doc(kind: str, name: str) -> dict[str, Any]:
    found = [doc for _, doc in DOCUMENTS if doc["kind"] == kind and doc["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name} in contrib/k8s: {len(found)}"
    return found[0]


def _only_container(doc: dict[str, Any]) -> dict[str, Any]:
    [container] = k8s.containers(doc)
    return container


def _ids(items: list[tuple[Path, Any]]) -> list[str]:
    return [f"{path.name}:{index}" for index, (path, _) in enumerate(items)]


def test_every_recipe_file_is_read() -> None:
    names = {path.name for path in k8s.manifest_files()}
    assert names == {
        "namespace.yaml",
        "results-pvc.yaml",
        "sweep-indexed-job.yaml",
        "fleet-merge-job.yaml",
        "health-daemonset.yaml",
        "rack-gb200-nvl72.yaml",
    }
    assert len(DOCUMENTS) == 11


@pytest.mark.parametrize("version", [k8s.K8S_VERSION, latest_version()])
@pytest.mark.parametrize(("path", "doc"), DOCUMENTS, ids=_ids(DOCUMENTS))
def test_document_validates_strictly(path: Path, doc: dict[str, Any], version: str) -> None:
    k8s.validate_document(doc, version)


@pytest.mark.parametrize(("path", "doc"), DOCUMENTS, ids=_ids(DOCUMENTS))
def test_labels_and_selectors_are_valid(path: Path, doc: dict[str, Any]) -> None:
    assert k8s.label_problems(doc) == []


@pytest.mark.parametrize(("path", "doc"), DOCUMENTS, ids=_ids(DOCUMENTS))
def test_namespaced_documents_use_the_recipes_namespace(path: Path, doc: dict[str, Any]) -> None:
    cluster_wide = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
    assert doc["metadata"].get("namespace") == (None if doc["kind"] in cluster_wide else "pytest-nvlink")


# --- the validator bites ---------------------------------------------------------------------


def _broken(kind: str, name: str, *path: str | int, value: object) -> dict[str, Any]:
    doc = copy.deepcopy(_doc(kind, name))
    node: Any = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


@pytest.mark.parametrize(
    ("kind", "name", "path", "value", "message"),
    [
        ("Job", "nvlink-sweep", ("spec", "completion"), 4, UNKNOWN),
        ("Job", "nvlink-sweep", ("spec", "completions"), "four", "not of type"),
        (
            "Job",
            "nvlink-sweep",
            ("spec", "template", "spec", "containers", 0, "imagePullPolicyy"),
            "Always",
            "Additional properties",
        ),
        (
            "DaemonSet",
            "pytest-nvlink-health",
            ("spec", "template", "spec", "nodeSelectors"),
            {},
            "Additional properties",
        ),
        ("ClusterRole", "pytest-nvlink-health", ("rules", 0, "verb"), ["get"], UNKNOWN),
        ("ComputeDomain", "nvlink-rack", ("spec", "numNode"), 18, UNKNOWN),
        ("ComputeDomain", "nvlink-rack", ("spec", "channel", "allocationMode"), "Some", "is not one of"),
        ("ComputeDomain", "nvlink-rack", ("metadata", "label"), {}, UNKNOWN),
    ],
)
def test_a_wrong_field_fails_validation(
    kind: str, name: str, path: tuple[str | int, ...], value: object, message: str
) -> None:
    with pytest.raises(k8s.ManifestError, match=re.escape(message)):
        k8s.validate_document(_broken(kind, name, *path, value=value))


def test_a_kind_without_schema_is_an_error_not_a_pass() -> None:
    doc = {"apiVersion": "example.com/v1", "kind": "Unknown", "metadata": {"name": "x"}}
    with pytest.raises(k8s.ManifestError, match="no schema"):
        k8s.validate_document(doc)


@pytest.mark.parametrize(
    ("labels", "problem"),
    [
        ({"pytest-nvlink/verdict": "not valid!"}, "label value"),
        ({"pytest-nvlink/last-run": "2026-12-03T07:28:33+00:00"}, "label value"),
        ({"pytest-nvlink/verdict": "x" * 64}, "label value"),
        ({"Pytest_NVLink/verdict": "pass"}, "prefix"),
        ({"pytest-nvlink/-verdict": "pass"}, "label key"),
    ],
)
def test_a_bad_label_fails(labels: dict[str, str], problem: str) -> None:
    doc = _broken("Job", "nvlink-sweep", "spec", "template", "metadata", "labels", value=labels)
    [found] = k8s.label_problems(doc)
    assert problem in found


# --- one pod per node --------------------------------------------------------------------------


def _anti_affinity_keys(doc: dict[str, Any]) -> list[str]:
    terms = doc["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    pod_labels = doc["spec"]["template"]["metadata"]["labels"]
    return [
        term["topologyKey"]
        for term in terms
        if term["labelSelector"]["matchLabels"].items() <= pod_labels.items()  # selects the Job's own pods
    ]


@pytest.mark.parametrize("name", ["nvlink-sweep", "nvlink-rack"])
def test_indexed_jobs_put_one_pod_on_each_node(name: str) -> None:
    job = _doc("Job", name)
    assert job["spec"]["completionMode"] == "Indexed"
    assert job["spec"]["completions"] == job["spec"]["parallelism"]
    assert "kubernetes.io/hostname" in _anti_affinity_keys(job)
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    assert spec["restartPolicy"] == "Never"


def test_sweep_writes_one_file_per_node_named_by_the_node() -> None:
    container = _only_container(_doc("Job", "nvlink-sweep"))
    assert k8s.env_of(container)["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert container["resources"]["limits"]["nvidia.com/gpu"] >= 1
    assert {"name": "results", "mountPath": "/results"} in container["volumeMounts"]
    [argv] = [argv for argv in k8s.container_commands(container) if argv[0] == "pytest"]
    assert k8s.option_value(argv, "--nvlink-host") == "$NODE_NAME"
    for option in ("--nvlink-json", "--junitxml", "--nvlink-save"):
        value = k8s.option_value(argv, option)
        assert value is not None and value.startswith("/results/") and "{host}" in value, option
    assert k8s.option_value(argv, "--nvlink-json") != k8s.option_value(argv, "--nvlink-save")


def test_volumes_claim_the_results_pvc() -> None:
    claim = _doc("PersistentVolumeClaim", "pytest-nvlink-results")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]  # pods on many nodes write at once
    for name in ("nvlink-sweep", "nvlink-fleet-merge", "nvlink-rack"):
        volumes = {volume["name"]: volume for volume in _doc("Job", name)["spec"]["template"]["spec"]["volumes"]}
        assert volumes["results"]["persistentVolumeClaim"]["claimName"] == "pytest-nvlink-results"


# --- every command line is one our parsers accept ----------------------------------------------

PYTEST_COMMANDS = k8s.commands_of("pytest")
FLEET_COMMANDS = k8s.commands_of("pytest-nvlink")


def test_recipes_run_pytest_in_both_forms() -> None:
    assert len(PYTEST_COMMANDS) == 2  # the sweep and the health check
    assert len(FLEET_COMMANDS) == 1


@pytest.mark.parametrize(("path", "argv"), PYTEST_COMMANDS, ids=_ids(PYTEST_COMMANDS))
def test_pytest_commands_parse_with_the_plugins_options(pytester: pytest.Pytester, path: Path, argv: list[str]) -> None:
    config = pytester.parseconfig(*argv[1:])
    assert config.getoption("nvlink_suite") == "auto"
    assert config.getoption("nvlink_host") == "$NODE_NAME"


def test_a_misspelled_pytest_option_is_refused(pytester: pytest.Pytester) -> None:
    with pytest.raises(pytest.UsageError, match="unrecognized arguments"):
        pytester.parseconfig("--nvlink-suit=auto")


@pytest.mark.parametrize(("path", "argv"), FLEET_COMMANDS, ids=_ids(FLEET_COMMANDS))
def test_fleet_commands_parse_with_the_fleet_cli(path: Path, argv: list[str]) -> None:
    args = build_parser().parse_args(argv[1:])
    assert args.command == "fleet"
    assert [str(path) for path in args.paths] == ["/results/nodes"]
    assert args.expect_nodes == "/etc/pytest-nvlink/nodes.txt"
    assert {str(args.json), str(args.junit), str(args.html)} == {
        "/results/fleet.json",
        "/results/fleet.xml",
        "/results/fleet.html",
    }


def test_fleet_merge_reads_the_expected_nodes_it_is_given() -> None:
    spec = _doc("Job", "nvlink-fleet-merge")["spec"]["template"]["spec"]
    mounts = {
        mount["name"]: mount["mountPath"]
        for mount in _only_container(_doc("Job", "nvlink-fleet-merge"))["volumeMounts"]
    }
    [volume] = [volume for volume in spec["volumes"] if volume["name"] == "expected-nodes"]
    assert "optional" not in volume["configMap"]  # no list, no merge: a missing node must not vanish
    assert mounts["expected-nodes"] == "/etc/pytest-nvlink"


# --- the health DaemonSet --------------------------------------------------------------------


def _health_script() -> str:
    script = k8s.container_script(_only_container(_doc("DaemonSet", "pytest-nvlink-health")))
    assert script is not None
    return script


def test_health_check_is_the_quick_mode_on_every_gpu_node() -> None:
    daemonset = _doc("DaemonSet", "pytest-nvlink-health")
    spec = daemonset["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert "nvidia.com/gpu" not in _only_container(daemonset).get("resources", {}).get("limits", {})
    [argv] = [argv for argv in k8s.shell_commands(_health_script()) if argv[0] == "pytest"]
    assert "--nvlink-quick" in argv
    assert k8s.option_value(argv, "--nvlink-suite") == "auto"


def test_health_role_may_only_read_and_patch_nodes() -> None:
    role = _doc("ClusterRole", "pytest-nvlink-health")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = _doc("ClusterRoleBinding", "pytest-nvlink-health")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = _doc("ServiceAccount", "pytest-nvlink-health")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "pytest-nvlink"}
    ]
    assert (
        _doc("DaemonSet", "pytest-nvlink-health")["spec"]["template"]["spec"]["serviceAccountName"]
        == (account["metadata"]["name"])
    )


def _node_labels(script: str) -> dict[str, str]:
    [argv] = [argv for argv in k8s.shell_commands(script) if argv[:3] == ["kubectl", "label", "node"]]
    assert argv[3] == "$NODE_NAME" and "--overwrite" in argv
    return dict(token.split("=", 1) for token in argv[4:] if "=" in token)


@pytest.mark.parametrize(
    "when",
    [datetime(2026, 12, 3, 7, 28, 33, tzinfo=timezone.utc), datetime(1999, 1, 1, tzinfo=timezone.utc)],
)
def test_health_labels_are_valid_label_values(when: datetime) -> None:
    script = _health_script()
    labels = _node_labels(script)
    assert set(labels) == {"pytest-nvlink/verdict", "pytest-nvlink/last-run"}
    assert all(k8s.label_key_problem(key) is None for key in labels)
    assert labels["pytest-nvlink/verdict"] == "$verdict"
    assert sorted(k8s.shell_assignments(script, "verdict")) == ["fail", "pass"]
    assert labels["pytest-nvlink/last-run"] == "$stamp"
    [stamp] = k8s.shell_assignments(script, "stamp")
    value = k8s.date_value(stamp, when)
    assert k8s.label_value_problem(value) is None
    assert datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc) == when


# --- the NVL72 rack ------------------------------------------------------------------------------


def _rack_argv() -> list[str]:
    container = _only_container(_doc("Job", "nvlink-rack"))
    [argv] = k8s.container_commands(container)
    return argv


def _kubernetes_expanded(argv: list[str], env: dict[str, dict[str, Any]], values: dict[str, str]) -> list[str]:
    """argv as the kubelet starts it: $(NAME) of a variable the container defines is replaced."""

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        assert name in env, f"$({name}) is not in the container's env, so Kubernetes leaves it as text"
        return values[name]

    return [re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", replace, token) for token in argv]


def test_compute_domain_spans_the_rack_and_its_channel_reaches_the_pods() -> None:
    domain = _doc("ComputeDomain", "nvlink-rack")
    assert domain["spec"]["numNodes"] == 18
    template_name = domain["spec"]["channel"]["resourceClaimTemplate"]["name"]
    spec = _doc("Job", "nvlink-rack")["spec"]["template"]["spec"]
    claims = {claim["name"]: claim for claim in spec["resourceClaims"]}
    container = _only_container(_doc("Job", "nvlink-rack"))
    [used] = container["resources"]["claims"]
    assert claims[used["name"]]["resourceClaimTemplateName"] == template_name


def test_rack_job_is_18_trays_of_4_gpus_in_one_clique() -> None:
    job = _doc("Job", "nvlink-rack")
    assert job["spec"]["completions"] == 18
    assert job["spec"]["backoffLimit"] == 0
    container = _only_container(job)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    env = k8s.env_of(container)
    assert env["NCCL_MNNVL_ENABLE"]["value"] == "1"
    assert env["PYTEST_NVLINK_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    index = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
    assert env["TRAY_INDEX"]["valueFrom"] == {"fieldRef": {"fieldPath": index}}  # torchrun's --node-rank
    affinity = job["spec"]["template"]["spec"]["affinity"]["podAffinity"]
    [term] = affinity["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "nvidia.com/gpu.clique"
    assert term["labelSelector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()


@pytest.fixture(scope="module")
def torchrun_args() -> Any:
    from torch.distributed.run import get_args_parser

    container = _only_container(_doc("Job", "nvlink-rack"))
    argv = _kubernetes_expanded(_rack_argv(), k8s.env_of(container), {"TRAY_INDEX": "5"})
    assert argv[0] == "torchrun"
    return get_args_parser().parse_args(argv[1:])


def test_rack_torchrun_starts_72_ranks_with_index_0_as_rendezvous(torchrun_args: Any) -> None:
    assert (int(torchrun_args.nnodes), int(torchrun_args.nproc_per_node)) == (18, 4)
    assert torchrun_args.node_rank == 5  # the pod's completion index
    assert torchrun_args.module and torchrun_args.training_script == "pytest_nvlink.launch"
    job = _doc("Job", "nvlink-rack")
    service = _doc("Service", "nvlink-rack")
    spec = job["spec"]["template"]["spec"]
    assert torchrun_args.master_addr == f"{job['metadata']['name']}-0.{spec['subdomain']}"
    assert service["metadata"]["name"] == spec["subdomain"]
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert torchrun_args.master_port == 29500
    assert [port["port"] for port in service["spec"]["ports"]] == [29500]


def test_rack_launch_arguments_parse_with_the_launcher(torchrun_args: Any) -> None:
    args = launch_parser().parse_args(torchrun_args.training_script_args)
    assert args.command == "rack"
    assert args.suite == "gb200-nvl72"
    assert args.backend == "nccl"
    assert str(args.out_dir) == "/results/rack"


def _readme_commands(program: str) -> list[list[str]]:
    text = (k8s.MANIFEST_DIR / "README.md").read_text(encoding="utf-8").replace("\\\n", " ")
    blocks = re.findall(r"^```\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    lines = [line.strip() for block in blocks for line in block.splitlines()]
    return [shlex.split(line) for line in lines if line.startswith(program + " ")]


@pytest.mark.parametrize("program", ["pytest", "torchrun"])
def test_readme_quotes_the_manifests_command_lines(program: str) -> None:
    quoted = _readme_commands(program)
    assert quoted, f"contrib/k8s/README.md shows no {program} command"
    in_manifests = [argv for _, argv in k8s.commands_of(program)]
    for argv in quoted:
        assert argv in in_manifests


def test_rack_launch_suite_is_the_shape_the_job_starts(torchrun_args: Any) -> None:
    suite = load_suite(launch_parser().parse_args(torchrun_args.training_script_args).suite)
    gpus_per_pod = _only_container(_doc("Job", "nvlink-rack"))["resources"]["limits"]["nvidia.com/gpu"]
    assert suite.gpus_per_host == int(torchrun_args.nproc_per_node) == gpus_per_pod
    assert suite.gpu_count == int(torchrun_args.nnodes) * gpus_per_pod


CONTAINERS = [(path, container) for path, doc in DOCUMENTS for container in k8s.containers(doc)]


@pytest.mark.parametrize(("path", "container"), CONTAINERS, ids=_ids(CONTAINERS))
def test_kubernetes_variable_references_name_the_containers_env(path: Path, container: dict[str, Any]) -> None:
    """Kubernetes expands $(NAME) in command and args only for variables the container defines."""
    text = "\n".join(str(part) for part in (*container.get("command", []), *container.get("args", [])))
    referenced = set(re.findall(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)", text))
    assert referenced <= set(k8s.env_of(container))
