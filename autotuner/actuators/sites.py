"""Where in one container an engine's args sit, read and written in place (pure).

Operators put the engine's command line in the container's `command` or `args` (a list, or one
`sh -c` string: engines/commandline.py), in an env var the container's command expands
(`VLLM_ADDITIONAL_ARGS`, or any `$(VAR)` in its args), behind such an env var filled from a
ConfigMap, or in a `--config FILE` mounted from a ConfigMap. The first two are rewritten in place
(JSON patch operations on the container, every other byte kept); the ConfigMap ones are read and
advised, never written: the ConfigMap is another object, often another tool's.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from autotuner.engines.commandline import edit_shell, find, shell_tokens
from autotuner.engines.dialect import Dialect
from autotuner.errors import ArgsError

Obj = dict[str, Any]
ENV_ARGS = "VLLM_ADDITIONAL_ARGS"  # KServe's vLLM template expands it after its own flags
CONFIG_FLAG = "--config"
_REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
# A ConfigMap's data by name (the actuator reads it within the call's deadline).
ConfigMapReader = Callable[[str], dict[str, str]]


@dataclass(frozen=True)
class Site:
    """One container's engine command line: what the dialect reads, and where it is written."""

    pointer: str  # the container's JSON pointer in the object
    command: tuple[str, ...]
    args: tuple[str, ...]
    env_index: int | None = None  # the args are this env var's literal value
    advice: str | None = None  # where the args live when they cannot be written here

    @property
    def env_name(self) -> str | None:
        return None if self.env_index is None else f"env[{self.env_index}]"


def read_site(
    container: Obj, pointer: str, pod_spec: Obj, dialect: Dialect, config_map: ConfigMapReader
) -> Site:
    """Where `container` keeps the engine's args, and the command line the engine runs."""
    command = [str(v) for v in container.get("command") or []]
    args = [str(v) for v in container.get("args") or []]
    managed = dialect.managed
    env = container.get("env") or []
    referenced = {m for v in (*command, *args) for m in _REFERENCE.findall(v)}
    own = _holds(command, managed) or _holds(args, managed)
    for index, entry in enumerate(env):
        name = entry.get("name")
        if name != ENV_ARGS and name not in referenced:
            continue
        site = _env_site(entry, index, pointer, config_map)
        if site is None:
            continue
        if _holds(site.args, managed) and own:
            raise ArgsError(
                f"{pointer}: managed flags in both the container's command line and env "
                f"{name}: refusing to guess which the engine uses"
            )
        if _holds(site.args, managed) or (name == ENV_ARGS and not own):
            return site
    site = Site(pointer, tuple(command), tuple(args))
    return _config_site(site, container, pod_spec, dialect, config_map)


def _env_site(entry: Obj, index: int, pointer: str, config_map: ConfigMapReader) -> Site | None:
    """The engine's args in an env var: its literal value (written in place), or the ConfigMap
    key it is filled from (advised)."""
    name = entry["name"]
    if "value" in entry:
        words = [t.value for t in shell_tokens(str(entry["value"]))]
        return Site(pointer, (), tuple(words), env_index=index)
    ref = (entry.get("valueFrom") or {}).get("configMapKeyRef")
    if not ref:
        return None  # a Secret or a field reference: not where operators keep engine args
    data = config_map(ref["name"])
    if ref["key"] not in data:
        raise ArgsError(f"{pointer}: env {name}: ConfigMap {ref['name']} has no key {ref['key']}")
    words = [t.value for t in shell_tokens(data[ref["key"]])]
    where = f"ConfigMap {ref['name']} key {ref['key']} (env {name} of {pointer})"
    return Site(pointer, (), tuple(words), advice=f"the engine args live in {where}")


def _config_site(
    site: Site, container: Obj, pod_spec: Obj, dialect: Dialect, config_map: ConfigMapReader
) -> Site:
    """A `--config FILE` mounted from a ConfigMap that sets managed flags: read it, advise."""
    tokens = dialect.tokens(site.command, site.args)
    flag = find(tokens, CONFIG_FLAG)
    if flag is None or flag.value is None:
        return site
    mounted = _mounted_key(flag.value, container, pod_spec)
    if mounted is None:
        return site  # a file from an image or a volume we cannot read: the CLI is all we see
    name, key = mounted
    data = config_map(name)
    if key not in data:
        raise ArgsError(f"{site.pointer}: {flag.value}: ConfigMap {name} has no key {key}")
    settings = config_tokens(data[key], flag.value)
    if not _holds(settings, dialect.managed):
        return site  # the file sets none of the managed flags: the command line stays ours
    given = {t.split("=", 1)[0] for t in tokens if t.startswith("--")}
    extra = _without(settings, given)  # the command line wins over the file
    where = f"ConfigMap {name} key {key} (mounted as {flag.value} in {site.pointer})"
    return Site(site.pointer, (), (*tokens, *extra), advice=f"the engine args live in {where}")


def _mounted_key(path: str, container: Obj, pod_spec: Obj) -> tuple[str, str] | None:
    """The (ConfigMap, key) a file path reads, through the container's volume mounts."""
    volumes = {v.get("name"): v for v in pod_spec.get("volumes") or []}
    for mount in container.get("volumeMounts") or []:
        root = str(mount.get("mountPath", "")).rstrip("/")
        if not path.startswith(root + "/"):
            continue
        source = (volumes.get(mount.get("name")) or {}).get("configMap")
        if not source:
            return None
        relative = mount.get("subPath") or path[len(root) + 1 :]
        for item in source.get("items") or []:
            if item.get("path") == relative:
                return source["name"], item["key"]
        return source["name"], posixpath.basename(relative)
    return None


def config_tokens(text: str, path: str) -> list[str]:
    """A YAML config file's settings as the flags they stand for (`key: v` -> `--key v`)."""
    try:
        settings = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ArgsError(f"{path}: not YAML ({error})") from None
    if not isinstance(settings, dict):
        raise ArgsError(f"{path}: not a mapping of settings")
    tokens: list[str] = []
    for key, value in settings.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            tokens.append(flag)
        elif value is not False and value is not None:
            text_value = value if isinstance(value, str) else json.dumps(value)
            tokens += [flag, text_value]
    return tokens


def _without(tokens: Sequence[str], given: Collection[str]) -> list[str]:
    """`tokens` less the flags (and their values) already in `given`."""
    out: list[str] = []
    skipping = False
    for token in tokens:
        if token.startswith("--"):
            skipping = token in given
        if not skipping:
            out.append(token)
    return out


def _holds(tokens: Sequence[str], managed: Collection[str]) -> bool:
    return any(t.split("=", 1)[0] in managed for t in tokens)


def site_ops(site: Site, container: Obj, command: Sequence[str], args: Sequence[str]) -> list[Obj]:
    """The JSON patch operations that write (command, args) where the site keeps them; only
    what changed is written."""
    if site.advice is not None:
        raise ArgsError(f"{site.pointer}: {site.advice}: advise only")
    if site.env_index is not None:
        entry = container["env"][site.env_index]
        value = edit_shell(str(entry["value"]), lambda _: list(args))
        if value == entry["value"]:
            return []
        path = f"{site.pointer}/env/{site.env_index}/value"
        return [{"op": "replace", "path": path, "value": value}]
    ops: list[Obj] = []
    for field, new in (("command", command), ("args", args)):
        old = container.get(field)
        if list(new) == list(old or []):
            continue
        path = f"{site.pointer}/{field}"
        if new:
            ops.append(
                {"op": "replace" if old is not None else "add", "path": path, "value": list(new)}
            )
        elif old is not None:
            ops.append({"op": "remove", "path": path})
    return ops


def managed_values(tokens: Sequence[str], managed: Collection[str]) -> dict[str, str | None]:
    """Each managed flag the command line sets, with its value (None: a bare switch)."""
    values: dict[str, str | None] = {}
    for name in sorted(managed):
        flag = find(tokens, name)
        if flag is not None:
            values[name] = flag.value
    return values
