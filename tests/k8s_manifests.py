"""Read and check the Kubernetes recipes in contrib/k8s without a cluster.

Built-in kinds are validated by kubernetes-validate against the Kubernetes version's strict schemas
(unknown fields refused); custom resources against the strict JSON schemas in contrib/k8s/schemas.
A kind with no schema is an error, never a pass. Kubernetes' schemas type label values as plain
strings, so label syntax is checked here with the API server's rules.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parent.parent
MANIFEST_DIR = ROOT / "contrib" / "k8s"
SCHEMA_DIR = MANIFEST_DIR / "schemas"
# DRA (resource.k8s.io/v1) is GA from 1.34 on; older clusters cannot run the rack recipe.
K8S_VERSION = "1.34"

Document = dict[str, Any]

# The API server's label rules (k8s.io/apimachinery/pkg/util/validation).
_NAME = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_NAME = re.compile(_NAME)
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SHELLS = ("sh", "bash")
_SEPARATORS = frozenset({";", "&&", "||", "|", "&", "(", ")"})
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "while", "until", "do", "done", "!"})


class ManifestError(Exception):
    """A manifest document that Kubernetes would refuse; the message names the document and the field."""


def manifest_files() -> list[Path]:
    return sorted(MANIFEST_DIR.glob("*.yaml"))


def load_documents(path: Path) -> list[Document]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def all_documents() -> Iterator[tuple[Path, Document]]:
    for path in manifest_files():
        for doc in load_documents(path):
            yield path, doc


def describe(doc: Document) -> str:
    return f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"


def custom_schema_path(doc: Document) -> Path:
    """contrib/k8s/schemas/<kind>-<group's first label>-<version>.json, kubernetes-validate's naming."""
    group, _, version = str(doc.get("apiVersion", "")).rpartition("/")
    return SCHEMA_DIR / f"{str(doc.get('kind', '')).lower()}-{group.split('.')[0]}-{version}.json"


def _k8s_definitions(version: str) -> Resource[Any]:
    """The strict Kubernetes definitions kubernetes-validate bundles, so custom schemas can use ObjectMeta."""
    major_minor = ".".join(version.lstrip("v").split(".")[:2])
    folder = resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{major_minor}.0-local-strict"
    return Resource.from_contents(json.loads((folder / "_definitions.json").read_text(encoding="utf-8")))


def validate_document(doc: Document, version: str = K8S_VERSION) -> None:
    """Raise :class:`ManifestError` unless ``doc`` validates strictly against its kind's schema."""
    schema_path = custom_schema_path(doc)
    try:
        if schema_path.is_file():
            schema = json.loads(schema_path.read_text(encoding="utf-8"))
            registry: Registry[Any] = _k8s_definitions(version) @ Registry()
            jsonschema.Draft202012Validator(schema, registry=registry).validate(doc)
        else:
            kubernetes_validate.validate(doc, version, strict=True)
    except jsonschema.ValidationError as exc:
        where = ".".join(str(part) for part in exc.absolute_path)
        raise ManifestError(f"{describe(doc)}: {where}: {exc.message}") from None
    except kubernetes_validate.SchemaNotFoundError as exc:
        raise ManifestError(f"{describe(doc)}: no schema: {exc.message}") from None


def label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"label key {key!r}: prefix is not a DNS subdomain"
    if len(name) > 63 or not _LABEL_NAME.fullmatch(name):
        return f"label key {key!r}: name must be 1-63 alphanumerics, '-', '_', '.', alphanumeric at both ends"
    return None


def label_value_problem(value: object) -> str | None:
    if not isinstance(value, str):
        return f"label value {value!r} is not a string"
    if value and (len(value) > 63 or not _LABEL_NAME.fullmatch(value)):
        return f"label value {value!r}: at most 63 alphanumerics, '-', '_', '.', alphanumeric at both ends"
    return None


def _label_maps(node: object) -> Iterator[dict[str, Any]]:
    """Every map of labels in a document: metadata labels, selectors' matchLabels, nodeSelector."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("labels", "matchLabels", "nodeSelector") and isinstance(value, dict):
                yield value
            yield from _label_maps(value)
    elif isinstance(node, list):
        for item in node:
            yield from _label_maps(item)


def label_problems(doc: Document) -> list[str]:
    problems = []
    for labels in _label_maps(doc):
        for key, value in labels.items():
            problem = label_key_problem(str(key)) or label_value_problem(value)
            if problem:
                problems.append(f"{describe(doc)}: {problem}")
    return problems


def pod_spec(doc: Document) -> Document | None:
    if doc.get("kind") in ("Job", "DaemonSet", "Deployment", "StatefulSet"):
        spec: Document = doc["spec"]["template"]["spec"]
        return spec
    return None


def containers(doc: Document) -> list[Document]:
    spec = pod_spec(doc)
    return list(spec.get("containers", [])) + list(spec.get("initContainers", [])) if spec else []


def container_script(container: Document) -> str | None:
    """The script of a ``sh -c SCRIPT`` container, else None."""
    argv = [*container.get("command", []), *container.get("args", [])]
    if len(argv) >= 3 and argv[0] in _SHELLS and argv[1] == "-c":
        return str(argv[2])
    return None


def shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a shell script as argv lists: operators split them, redirections and
    leading keywords (if, while, !) are dropped, quotes removed, variables left unexpanded."""
    commands: list[list[str]] = []
    for line in script.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        current: list[str] = []
        tokens = list(lexer)
        index = 0
        while index < len(tokens):
            token = tokens[index]
            if token in _SEPARATORS:
                commands.append(current)
                current = []
            elif token[0] in "<>":
                index += 1  # the redirection's target
            elif token.isdigit() and index + 1 < len(tokens) and tokens[index + 1][0] in "<>":
                pass  # the file descriptor of "2>&1"
            elif current or token not in _KEYWORDS:
                current.append(token)
            index += 1
        commands.append(current)
    return [command for command in commands if command]


def container_commands(container: Document) -> list[list[str]]:
    script = container_script(container)
    if script is not None:
        return shell_commands(script)
    return [[str(part) for part in (*container.get("command", []), *container.get("args", []))]]


def commands_of(program: str) -> list[tuple[Path, list[str]]]:
    """Every command line running ``program`` in the manifests, with its file."""
    found: list[tuple[Path, list[str]]] = []
    for path, doc in all_documents():
        for container in containers(doc):
            found.extend((path, argv) for argv in container_commands(container) if argv and argv[0] == program)
    return found


def shell_assignments(script: str, name: str) -> list[str]:
    """The values ``name=VALUE`` lines of a script assign (as written, quotes and $(...) kept)."""
    return re.findall(rf"^\s*{re.escape(name)}=(.+?)\s*$", script, flags=re.MULTILINE)


def date_value(assignment: str, when: datetime) -> str:
    """What ``$(date -u +FORMAT)`` prints at ``when``, for an assignment of that form."""
    match = re.fullmatch(r"\$\(date -u \+([^)\s]+)\)", assignment)
    if match is None:
        raise ValueError(f"not a $(date -u +FORMAT) assignment: {assignment!r}")
    return when.strftime(match.group(1))


def option_value(argv: list[str], option: str) -> str | None:
    """The value of ``option=VALUE`` or ``option VALUE`` in ``argv``, the last one given."""
    value = None
    for index, token in enumerate(argv):
        if token.startswith(option + "="):
            value = token.split("=", 1)[1]
        elif token == option and index + 1 < len(argv):
            value = argv[index + 1]
    return value


def env_of(container: Document) -> dict[str, Document]:
    return {entry["name"]: entry for entry in container.get("env", [])}
