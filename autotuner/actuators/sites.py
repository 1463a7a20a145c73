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
SHELLS = frozenset({"sh", "bash", "dash"})
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
    shell: ShellSpan | None = None  # the args are one command of a `sh -c` script


NO_ENGINE = Site("", (), ())  # a script of commands none of which is the engine


@dataclass(frozen=True)
class ShellSpan:
    """The engine's command inside a `sh -c` script: the container field and index of the
    script, and the characters of the engine's command in it."""

    field: str  # command or args
    index: int
    start: int
    end: int


def read_site(
    container: Obj, pointer: str, pod_spec: Obj, dialect: Dialect, config_map: ConfigMapReader
) -> Site | None:
    """Where `container` keeps the engine's args, and the command line the engine runs; None
    when its script visibly runs no engine (a Ray worker that only joins the leader)."""
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
    script = _script_site(pointer, command, args, dialect)
    if script is NO_ENGINE:
        return None
    site = script or Site(pointer, tuple(command), tuple(args))
    return _config_site(site, container, pod_spec, dialect, config_map)


def _script_site(
    pointer: str, command: list[str], args: list[str], dialect: Dialect
) -> Site | None:
    """The engine's command in a `sh -c` script the plain reading cannot take: a script of
    several commands (`setup; vllm serve ...`, `... | tee log`) or one split between
    `command: [sh, -c]` and `args: [script]`. None: leave it to the plain reading; NO_ENGINE:
    a script that never names the engine nor a managed flag."""
    joined = [*command, *args]
    for i in range(2, len(joined)):
        if joined[i - 1] != "-c" or joined[i - 2].rsplit("/", 1)[-1] not in SHELLS:
            continue
        split = i >= len(command) > i - 2  # `sh -c` in command, the script in args
        line = joined[i]
        spans = shell_segments(line)
        if not _names_engine(line.split(), dialect) and not _holds(line.split(), dialect.managed):
            return NO_ENGINE
        if not split and len(spans) < 2:
            return None
        found = _engine_command(line, spans, dialect)
        if found is None:
            return NO_ENGINE if len(spans) > 1 else None
        start, end, words = found
        field, index = ("command", i) if i < len(command) else ("args", i - len(command))
        return Site(pointer, (), tuple(words), shell=ShellSpan(field, index, start, end))
    return None


def shell_segments(line: str) -> list[tuple[int, int]]:
    """The spans of a script's commands: split at `;`, `&&`, `||`, `|`, `&` and newlines
    outside quotes and `$(...)`; a redirection (`2>&1`, `> log`) ends a command's words and
    starts a span of its own (one that runs nothing)."""
    spans: list[tuple[int, int]] = []
    start, i, depth, quote = 0, 0, 0, ""
    while i < len(line):
        char = line[i]
        if quote:
            quote = "" if char == quote else quote
            i += 2 if char == "\\" and quote == '"' else 1
            continue
        if char in "'\"":
            quote = char
        elif char == "\\":
            i += 1
        elif line.startswith("$(", i):
            depth, i = depth + 1, i + 1
        elif char == ")" and depth:
            depth -= 1
        elif not depth and char in "<>":  # a redirection ends the command's words
            back = i
            while back > start and line[back - 1].isdigit():
                back -= 1
            if back > start and not line[back - 1].isspace():
                back = i  # `x2>log`: the digits belong to the word, not the redirection
            spans.append((start, back))
            start = back
        elif not depth and char in ";|&\n" and line[i - 1 : i] not in ("<", ">"):
            spans.append((start, i))
            i += 2 if line[i : i + 2] in ("&&", "||") else 1
            start = i
            continue
        i += 1
    spans.append((start, len(line)))
    return [(a, b) for a, b in spans if line[a:b].strip()]


def _engine_command(
    line: str, spans: Sequence[tuple[int, int]], dialect: Dialect
) -> tuple[int, int, list[str]] | None:
    """The script's command that runs the engine: the one holding managed flags, else the
    last plain one that names the engine."""
    plain: list[tuple[int, int, list[str]]] = []
    for start, end in spans:
        try:
            plain.append((start, end, [t.value for t in shell_tokens(line[start:end])]))
        except ArgsError:
            continue  # shell syntax of its own: not a command the tuner edits
    holding = [p for p in plain if _holds(p[2], dialect.managed)]
    if len(holding) > 1:
        raise ArgsError("managed flags in several commands of the shell script: refusing")
    named = holding or [p for p in plain if _names_engine(p[2][:3], dialect)]
    return named[-1] if named else None


def _names_engine(words: Sequence[str], dialect: Dialect) -> bool:
    """A word runs the engine (`vllm`, `vllm.entrypoints...`, `/usr/bin/sglang`)."""
    return any(w.rsplit("/", 1)[-1].startswith(dialect.name) for w in words)


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
    map_name, key = ref.get("name"), ref.get("key")
    if not map_name or not key:
        raise ArgsError(f"{pointer}: env {name}: a configMapKeyRef without a name and a key")
    data = config_map(map_name)
    if key not in data:
        raise ArgsError(f"{pointer}: env {name}: ConfigMap {map_name} has no key {key}")
    words = [t.value for t in shell_tokens(data[key])]
    where = f"ConfigMap {map_name} key {key} (env {name} of {pointer})"
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
    if (tuple(command), tuple(args)) == (site.command, site.args):
        return []
    if site.advice is not None:
        raise ArgsError(f"{site.pointer}: {site.advice}: advise only")
    if site.shell is not None:
        span = site.shell
        line = str(container[span.field][span.index])
        engine = edit_shell(line[span.start : span.end], lambda _: list(args))
        if engine == line[span.start : span.end]:
            return []
        path = f"{site.pointer}/{span.field}/{span.index}"
        value = line[: span.start] + engine + line[span.end :]
        return [{"op": "replace", "path": path, "value": value}]
    if site.env_index is not None:
        entry = container["env"][site.env_index]
        value = edit_shell(str(entry["value"]), lambda _: list(args))
        if value[:1].isspace() and not str(entry["value"])[:1].isspace():
            value = value[1:]  # edit_shell's blank before a word that now comes first
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


def check_agreement(sites: Sequence[Site], dialect: Dialect) -> None:
    """The engines of one group (leader and workers) must set the managed flags alike: they
    are tuned as one (ArgsError otherwise)."""
    values = [managed_values(dialect.tokens(s.command, s.args), dialect.managed) for s in sites]
    for site, other in zip(sites[1:], values[1:], strict=True):
        if other != values[0]:
            raise ArgsError(
                f"{site.pointer} and {sites[0].pointer} disagree on the managed flags ({other} "
                f"vs {values[0]}): make them agree first (every engine of a group must run "
                "the same setup)"
            )


def managed_values(tokens: Sequence[str], managed: Collection[str]) -> dict[str, str | None]:
    """Each managed flag the command line sets, with its value (None: a bare switch)."""
    values: dict[str, str | None] = {}
    for name in sorted(managed):
        flag = find(tokens, name)
        if flag is not None:
            values[name] = flag.value
    return values
