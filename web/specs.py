"""Declarative job specs: a whole job in one YAML (or JSON) document, applied by name.

    apiVersion: crawlplatform/v1
    kind: CrawlJob
    metadata:
      name: python-docs
    spec:
      seeds: [https://docs.python.org/3/]
      scope: {max_depth: 3, exclude_patterns: ["/whatsnew/"]}
      politeness: {delay: 0.5}
      content:
        extract:
          - {name: title, selector: h1}
      schedule: "0 3 * * *"

``apply`` creates the job named in ``metadata.name`` or updates the one that has that name;
``dump`` writes a job back out in the same shape, so apply -> get -> apply changes nothing.
A spec is checked twice, with the same messages wherever a job comes from: against the JSON
Schema below (shapes and types; ``schema()`` is published as ``docs/job-spec.schema.json``),
then by the job's own validation (``CrawlJob.problems``: regexes, selectors, seeds, proxies,
schedules). Every error names the spec's path and, for YAML, its line. A spider job names its
spider (``spec.spider``, with ``spec.spider_args``) and may have no seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jsonschema
import yaml

from tasks.frontier import jobs
from web.models import CrawlJob
from web.models.jobs import MAX_DEPTH_LIMIT

API_VERSION = "crawlplatform/v1"
KIND = "CrawlJob"

# spec path -> the job's field. Sections group what belongs together; the order is the dump's.
FIELDS: dict[str, str] = {
    "seeds": "seeds",
    "spider": "spider",
    "spider_args": "spider_args",
    "scope.allowed_domains": "allowed_domains",
    "scope.include_subdomains": "include_subdomains",
    "scope.include_patterns": "include_patterns",
    "scope.exclude_patterns": "exclude_patterns",
    "scope.max_depth": "max_depth",
    "scope.max_pages": "max_pages",
    "scope.max_pages_per_host": "max_pages_per_host",
    "scope.path_caps": "path_caps",
    "scope.use_sitemaps": "use_sitemaps",
    "politeness.delay": "delay",
    "politeness.host_concurrency": "host_concurrency",
    "politeness.obey_robots": "obey_robots",
    "politeness.obey_nofollow": "obey_nofollow",
    "identities.user_agents": "user_agents",
    "identities.proxies": "proxies",
    "identities.headers": "headers",
    "identities.warmup_path": "warmup_path",
    "identities.render": "render",
    "content.store_bodies": "store_bodies",
    "content.extract": "extract",
    "schedule": "schedule",
    "notifications.webhook_url": "webhook_url",
    "channel": "channel",
    "priority": "priority",
    "settings": "settings",
}
PATH_OF = {field: path for path, field in FIELDS.items()}

_STRINGS = {"type": "array", "items": {"type": "string"}}
_RULE = {
    "type": "object",
    "required": ["name", "selector"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "description": "The field's name in Page.data."},
        "selector": {"type": "string", "description": "A CSS selector (soupsieve)."},
        "attr": {"type": "string", "description": "Take this attribute instead of the text."},
        "all": {"type": "boolean", "description": "Every match (a list), not the first."},
        "pattern": {"type": "string", "description": "Only on URLs matching this regex."},
    },
}
_TYPES: dict[str, dict] = {
    "seeds": _STRINGS,
    "spider": {"type": "string", "maxLength": 200},
    "spider_args": {"type": "object", "additionalProperties": {"type": "string"}},
    "allowed_domains": _STRINGS,
    "include_subdomains": {"type": "boolean"},
    "include_patterns": _STRINGS,
    "exclude_patterns": _STRINGS,
    "max_depth": {"type": "integer", "minimum": 0, "maximum": 32767},
    "max_pages": {"type": ["integer", "null"], "minimum": 0},
    "max_pages_per_host": {"type": ["integer", "null"], "minimum": 0},
    "path_caps": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "use_sitemaps": {"type": "boolean"},
    "delay": {"type": "number", "minimum": 0, "maximum": 86400},
    "host_concurrency": {"type": "integer", "minimum": 0},
    "obey_robots": {"type": "boolean"},
    "obey_nofollow": {"type": "boolean"},
    "user_agents": _STRINGS,
    "proxies": _STRINGS,
    "headers": {"type": "object", "additionalProperties": {"type": "string"}},
    "warmup_path": {"type": "string"},
    "render": {"enum": ["never", "auto", "always"]},
    "store_bodies": {"type": "boolean"},
    "extract": {"type": "array", "items": _RULE},
    "schedule": {"type": "string"},
    "webhook_url": {"type": "string", "maxLength": 2000},
    "channel": {"type": "string", "maxLength": 40},
    "priority": {"type": "integer", "minimum": 0, "maximum": 9},
    "settings": {"type": "object"},
}


class SpecError(ValueError):
    """A spec that cannot be applied; ``problems`` are lines naming the path (and line)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def schema() -> dict[str, Any]:
    """The JSON Schema of a job spec (draft 2020-12), descriptions from the job's fields."""
    sections: dict[str, dict] = {}
    top: dict[str, dict] = {}
    for path, field in FIELDS.items():
        help_text = str(CrawlJob._meta.get_field(field).help_text)
        prop = {**_TYPES[field], **({"description": help_text} if help_text else {})}
        section, _, name = path.rpartition(".")
        if section:
            sections.setdefault(section, {"type": "object", "additionalProperties": False,
                                          "properties": {}})["properties"][name] = prop  # fmt: skip
        else:
            top[name] = prop
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "crawlplatform job spec",
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "additionalProperties": False,
        "properties": {
            "apiVersion": {"const": API_VERSION},
            "kind": {"const": KIND},
            "metadata": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 200}},
            },
            "spec": {
                "type": "object",
                "anyOf": [{"required": ["seeds"]}, {"required": ["spider"]}],
                "additionalProperties": False,
                "properties": {**top, **sections},
            },
        },
    }


@dataclass
class Applied:
    job: CrawlJob
    action: str  # created, configured or unchanged
    changed: list[str]  # spec paths whose values changed


class _SpecLoader(yaml.SafeLoader):
    """YAML without aliases: a spec is a few dozen values, and nested aliases make a document
    of a few lines expand into millions of nodes (billion laughs)."""

    def compose_node(self, parent, index):  # noqa: ANN001, ANN201 (PyYAML's signature)
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, f"aliases (*{event.anchor}) are not accepted in a spec: write the "
                "value out", event.start_mark,
            )  # fmt: skip
        return super().compose_node(parent, index)


def _lines(text: str) -> dict[tuple, int]:
    """Spec path (a tuple of keys and indexes) -> the 1-based line where its value starts."""
    found: dict[tuple, int] = {}

    def walk(node, path: tuple) -> None:
        found[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                walk(value, (*path, key.value))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    try:
        root = yaml.compose(text, Loader=_SpecLoader)
    except yaml.YAMLError:
        return found
    if root is not None:
        walk(root, ())
    return found


def _where(lines: dict[tuple, int], path: tuple, source: str) -> str:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return f"{source}:{lines[path[:cut]]}: "
    return f"{source}: "


def parse(text: str, source: str = "spec") -> tuple[dict[str, Any], dict[tuple, int]]:
    """The spec document (YAML or JSON) and its lines; SpecError if it is not a valid spec."""
    try:
        document = yaml.load(text, Loader=_SpecLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or exc
        raise SpecError([f"{source}{line}: not YAML or JSON: {problem}"]) from None
    lines = _lines(text)
    validator = jsonschema.Draft202012Validator(schema())
    errors = sorted(validator.iter_errors(document), key=lambda e: list(map(str, e.path)))
    if errors:
        raise SpecError([
            f"{_where(lines, tuple(e.path), source)}"
            f"{'.'.join(map(str, e.path)) or '(document)'}: {e.message}"
            for e in errors
        ])  # fmt: skip
    return document, lines


def _fields(spec: dict[str, Any]) -> dict[str, Any]:
    """The job's fields a spec sets (absent ones keep the model's defaults)."""
    values = {}
    for path, field in FIELDS.items():
        node: Any = spec
        for key in path.split("."):
            node = node.get(key, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            values[field] = node
    return values


_MISSING = object()


def _defaults() -> dict[str, Any]:
    blank = CrawlJob()
    return {field: getattr(blank, field) for field in FIELDS.values()}


def apply(text: str, source: str = "spec", owner: Any = None) -> Applied:
    """Create or update the job the spec names (``owner``: whose it is, when given);
    SpecError with every problem otherwise."""
    document, lines = parse(text, source)
    name = document["metadata"]["name"]
    given = _fields(document["spec"])
    wanted = {**_defaults(), **given}
    if given.get("spider") and "max_depth" not in given:  # a spider's requests: no depth limit
        wanted["max_depth"] = MAX_DEPTH_LIMIT
    if owner is not None:
        wanted["owner"] = owner
    found = list(CrawlJob.objects.filter(name=name)[:2])
    if len(found) > 1:
        raise SpecError([f"{source}: several jobs are named {name!r}; rename all but one"])

    def refused(exc: jobs.JobError) -> SpecError:
        by_field = exc.fields
        return SpecError([
            f"{_where(lines, ('spec', *PATH_OF.get(field, field).split('.')), source)}"
            f"spec.{PATH_OF.get(field, field)}: {message}"
            for field, messages in by_field.items() for message in messages
        ])  # fmt: skip

    if not found:
        seeds = wanted.pop("seeds")
        try:
            job = jobs.create_job(seeds, name=name, **wanted)
        except jobs.JobError as exc:
            raise refused(exc) from None
        return Applied(job, "created", [])
    job = found[0]
    try:
        changed = jobs.update(job, **wanted)
    except jobs.JobError as exc:
        raise refused(exc) from None
    paths = [PATH_OF.get(f, f) for f in changed]
    return Applied(job, "configured" if changed else "unchanged", paths)


def dump(job: CrawlJob) -> dict[str, Any]:
    """The job as a spec document (every field, so that the spec is the whole job)."""
    spec: dict[str, Any] = {}
    for path, field in FIELDS.items():
        *sections, name = path.split(".")
        node = spec
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = getattr(job, field)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": job.name}, "spec": spec}


def to_yaml(document: dict[str, Any]) -> str:
    return yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=100)
