"""Where in one container an engine's args sit, read and written in place (pure).

Operators put the engine's command line in the container's `command` or `args` (a list, or the
engine's command in a `sh -c` script: engines/shell.py), in an env var the container's command
expands (`VLLM_ADDITIONAL_ARGS`, or an arg that is only `$(VAR)`), behind such an env var filled
from a ConfigMap, or in a `--config FILE` mounted from a ConfigMap. A value may also come from
`$(VAR)` inside an arg (`--speculative-config=$(SPEC)`): Kubernetes puts the env var's value
there as it is (no word splitting, no shell), so the arg is read with it. The lists, scripts and
literal env values are rewritten in place (JSON patch operations on the container, every other
byte kept); the ConfigMap ones are read and advised, never written: the ConfigMap is another
object, often another tool's.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

import yaml

from autotuner.engines import shell
from autotuner.engines.commandline import edit_shell, find, shell_tokens
from autotuner.engines.dialect import Dialect
from autotuner.errors import ArgsError

Obj = dict[str, Any]
ENV_ARGS = "VLLM_ADDITIONAL_ARGS"  # KServe's vLLM template expands it after its own flags
CONFIG_FLAG = "--config"
_REFERENCE = re.compile(r"(?<!\$)\$\(([A-Za-z_][A-Za-z0-9_]*)\)")  # `$$(X)` is literal
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
    references: tuple[Reference, ...] = ()  # `$(VAR)` inside args, read with the var's value
    new_env: bool = False  # the args go into a new VLLM_ADDITIONAL_ARGS (templated_site)
    config: ConfigFile | None = None  # the managed flags are set by this mounted config file


@dataclass(frozen=True)
class ConfigFile:
    """A `--config FILE` mounted from a ConfigMap: where it lives, and each flag's key as the
    file spells it (`speculative_num_steps` or `speculative-num-steps`)."""

    where: str
    keys: tuple[tuple[str, str], ...]  # (flag, key)

    def key(self, flag: str) -> str:
        """The flag's key in the file; a flag the file lacks, in the file's own spelling."""
        spelled = dict(self.keys)
        if flag in spelled:
            return spelled[flag]
        underscored = any("_" in key for _, key in self.keys)
        bare = flag.removeprefix("--")
        return bare.replace("-", "_") if underscored else bare


@dataclass(frozen=True)
class Reference:
    """An arg that holds `$(VAR)`: the arg as written, and where the var's value comes from."""

    field: str  # command or args
    index: int
    written: str  # the arg with `$(VAR)` in it
    name: str
    env_index: int
    config_map: tuple[str, str] | None  # (name, key) it is filled from; None: a literal value


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
    referenced = {m.group(1) for v in (*command, *args) if (m := _REFERENCE.fullmatch(v))}
    own = _holds(command, managed) or _holds(args, managed)
    for index, entry in enumerate(env):
        name = entry.get("name")
        if name != ENV_ARGS and name not in referenced:
            continue
        try:
            site = _env_site(entry, index, pointer, config_map)
        except ArgsError:
            if name == ENV_ARGS:
                raise
            continue  # not a command line (a JSON value, say): read as one arg's value below
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
    site = script or _referencing_site(pointer, command, args, env, config_map)
    return _config_site(site, container, pod_spec, dialect, config_map)


def templated_site(site: Site) -> Site:
    """A container whose command line is its object's template (a KServe LLMInferenceService
    `main` with no command, args or VLLM_ADDITIONAL_ARGS): writing `args` would replace the
    template's whole command line, so the tuner's flags go into a new VLLM_ADDITIONAL_ARGS,
    which the template's vLLM command expands after its own."""
    plain = not (site.command or site.args or site.shell or site.references)
    if plain and site.env_index is None and site.advice is None:
        return dataclasses.replace(site, new_env=True)
    return site


def _script_site(
    pointer: str, command: list[str], args: list[str], dialect: Dialect
) -> Site | None:
    """The engine's command in a `sh -c` script (the script in command, or split between
    `command: [sh, -c]` and `args: [script]`): its words, and where it stands. None: no
    script; NO_ENGINE: a script none of whose commands starts the engine or holds a managed
    flag. A managed flag the shell computes (from a variable the script assigns) or a command
    substitution around the engine's command makes the site advise-only."""
    joined = [*command, *args]
    index = shell.script_index(joined)
    if index is None or index >= len(joined):
        return None
    script = shell.parse(joined[index])
    found = shell.engine_command(script, dialect.managed, (dialect.name,))
    if found is None:
        return NO_ENGINE
    refusal = shell.substitution_refusal(found)
    if refusal is not None:
        raise ArgsError(f"{pointer}: {refusal}: refused")
    computed = shell.computed_flags(script, found, dialect.managed)
    advice = None if computed is None else f"{computed}: set it in the script by hand"
    field, at = ("command", index) if index < len(command) else ("args", index - len(command))
    span = ShellSpan(field, at, found.start, found.end)
    return Site(pointer, (), tuple(found.values), advice=advice, shell=span)


def _referencing_site(
    pointer: str, command: list[str], args: list[str], env: list[Obj], config_map: ConfigMapReader
) -> Site:
    """The command line as the engine gets it: each `$(VAR)` inside an arg filled with the
    env var's literal value or its ConfigMap key (Kubernetes' substitution: as it is, one arg
    stays one arg); a var the env does not give a value stays as written."""
    by_name = {str(e.get("name")): i for i, e in enumerate(env)}
    filled: dict[str, list[str]] = {"command": list(command), "args": list(args)}
    references: list[Reference] = []
    for field, values in filled.items():
        for index, value in enumerate(values):
            for name in dict.fromkeys(_REFERENCE.findall(value)):
                if name not in by_name:
                    continue
                source = _env_value(env[by_name[name]], pointer, config_map)
                if source is None:
                    continue
                text, origin = source
                references.append(Reference(field, index, value, name, by_name[name], origin))
                values[index] = values[index].replace(f"$({name})", text)
    return Site(
        pointer, tuple(filled["command"]), tuple(filled["args"]), references=tuple(references)
    )


def _env_value(
    entry: Obj, pointer: str, config_map: ConfigMapReader
) -> tuple[str, tuple[str, str] | None] | None:
    """An env var's value and the (ConfigMap, key) it comes from (None: a literal value); None
    for a Secret or a field reference, which the tuner does not read."""
    if "value" in entry:
        return str(entry["value"]), None
    ref = (entry.get("valueFrom") or {}).get("configMapKeyRef")
    if not ref:
        return None
    map_name, key = ref.get("name"), ref.get("key")
    if not map_name or not key:
        raise ArgsError(
            f"{pointer}: env {entry['name']}: a configMapKeyRef without a name and a key"
        )
    data = config_map(map_name)
    if key not in data:
        raise ArgsError(f"{pointer}: env {entry['name']}: ConfigMap {map_name} has no key {key}")
    return data[key], (map_name, key)


def _env_site(entry: Obj, index: int, pointer: str, config_map: ConfigMapReader) -> Site | None:
    """The engine's args in an env var: its literal value (written in place), or the ConfigMap
    key it is filled from (advised)."""
    source = _env_value(entry, pointer, config_map)
    if source is None:
        return None  # a Secret or a field reference: not where operators keep engine args
    text, origin = source
    words = tuple(t.value for t in shell_tokens(text))
    if origin is None:
        return Site(pointer, (), words, env_index=index)
    where = f"ConfigMap {origin[0]} key {origin[1]} (env {entry['name']} of {pointer})"
    return Site(pointer, (), words, advice=f"the engine args live in {where}")


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
    read = _config_settings(data[key], flag.value)
    settings = _as_flags(read)
    if not _holds(settings, dialect.managed):
        return site  # the file sets none of the managed flags: the command line stays ours
    given = {t.split("=", 1)[0] for t in tokens if t.startswith("--")}
    extra = _without(settings, given)  # the command line wins over the file
    where = f"ConfigMap {name} key {key} (mounted as {flag.value} in {site.pointer})"
    keys = tuple((_flag(k), str(k)) for k in read)
    return Site(
        site.pointer,
        (),
        (*tokens, *extra),
        advice=f"the engine args live in {where}",
        config=ConfigFile(where, keys),
    )


def config_change(site: Site, command: Sequence[str], args: Sequence[str], dialect: Dialect) -> str:
    """The change to a mounted config file in its own keys (empty for other sites): what an
    operator writes there, not the command-line flags the file stands for."""
    if site.config is None:
        return ""
    old = managed_values(dialect.tokens(site.command, site.args), dialect.managed)
    new = managed_values(dialect.tokens(command, args), dialect.managed)
    lines = []
    for flag in sorted(set(old) | set(new)):
        if old.get(flag, "") == new.get(flag, ""):
            continue
        key = site.config.key(flag)
        if flag not in new:
            lines.append(f"remove {key}")
        else:
            value = _file_value(new[flag])
            lines.append(yaml.safe_dump({key: value}, default_flow_style=True, width=1 << 16))
    said = "; ".join(line.strip().removeprefix("{").removesuffix("}") for line in lines)
    return f"; set there {said}" if said else ""


def _file_value(written: str | None) -> object:
    """A flag's value as a config file holds it: a switch as true, a JSON object as a map."""
    if written is None:
        return True
    if written.lstrip().startswith("{") or re.fullmatch(r"-?\d+", written):
        try:
            parsed: object = json.loads(written)
        except json.JSONDecodeError:
            return written
        return parsed
    return written


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
    return _as_flags(_config_settings(text, path))


def _config_settings(text: str, path: str) -> dict[Any, Any]:
    """A YAML config file's mapping of settings (ArgsError if it is not one)."""
    try:
        settings = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ArgsError(f"{path}: not YAML ({error})") from None
    if not isinstance(settings, dict):
        raise ArgsError(f"{path}: not a mapping of settings")
    return settings


def _flag(key: object) -> str:
    return "--" + str(key).replace("_", "-")


def _as_flags(settings: dict[Any, Any]) -> list[str]:
    tokens: list[str] = []
    for key, value in settings.items():
        if value is True:
            tokens.append(_flag(key))
        elif value is not False and value is not None:
            text_value = value if isinstance(value, str) else json.dumps(value)
            tokens += [_flag(key), text_value]
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
        text = str(container[span.field][span.index])
        script = shell.parse(text)
        found = shell.command_at(script, span.start)
        new_text = shell.rewrite(script, found, [*command, *args])
        if new_text == text:
            return []
        path = f"{site.pointer}/{span.field}/{span.index}"
        return [{"op": "replace", "path": path, "value": new_text}]
    if site.references:
        return _referencing_ops(site, container, command, args)
    if site.new_env:  # no command line to edit: the rendered words are all the tuner's
        return _new_env_ops(site.pointer, container, [*command, *args])
    if site.env_index is not None:
        return _env_ops(site.pointer, container, site.env_index, args)
    return _list_ops(site.pointer, container, command, args)


def _env_ops(pointer: str, container: Obj, index: int, args: Sequence[str]) -> list[Obj]:
    """The env var's literal value edited in place; a VLLM_ADDITIONAL_ARGS left empty goes
    (with the env list, when it was the only var), so a round trip gives the object back."""
    env = container["env"]
    old = str(env[index]["value"])
    value = edit_shell(old, lambda _: list(args))
    if value[:1].isspace() and not old[:1].isspace():
        value = value[1:]  # edit_shell's blank before a word that now comes first
    if not args and env[index].get("name") == ENV_ARGS:
        path = f"{pointer}/env" if len(env) == 1 else f"{pointer}/env/{index}"
        return [{"op": "remove", "path": path}]
    if value == old:
        return []
    return [{"op": "replace", "path": f"{pointer}/env/{index}/value", "value": value}]


def _new_env_ops(pointer: str, container: Obj, args: Sequence[str]) -> list[Obj]:
    """VLLM_ADDITIONAL_ARGS added with the args (appended to the env list, or made it)."""
    entry = {"name": ENV_ARGS, "value": " ".join(shell.quote(word) for word in args)}
    if container.get("env"):
        return [{"op": "add", "path": f"{pointer}/env/-", "value": entry}]
    return [{"op": "add", "path": f"{pointer}/env", "value": [entry]}]


def _list_ops(
    pointer: str, container: Obj, command: Sequence[str], args: Sequence[str]
) -> list[Obj]:
    """Replace (or add, or remove) the command and args lists that changed."""
    ops: list[Obj] = []
    for field, new in (("command", command), ("args", args)):
        old = container.get(field)
        if list(new) == list(old or []):
            continue
        path = f"{pointer}/{field}"
        if new:
            ops.append(
                {"op": "replace" if old is not None else "add", "path": path, "value": list(new)}
            )
        elif old is not None:
            ops.append({"op": "remove", "path": path})
    return ops


def _referencing_ops(
    site: Site, container: Obj, command: Sequence[str], args: Sequence[str]
) -> list[Obj]:
    """Write (command, args) back with each arg that holds `$(VAR)` kept as written: a new
    value for it goes into the env var's literal value; one from a ConfigMap, or an arg that
    goes, is advised (ArgsError naming the ConfigMap, the key and the new value)."""
    ops: list[Obj] = []
    written: dict[str, list[str]] = {}
    for field, old, new in (("command", site.command, command), ("args", site.args, args)):
        raw = [str(v) for v in container.get(field) or []]
        held = {r.index: r for r in site.references if r.field == field}
        out: list[str] = []
        matcher = SequenceMatcher(a=list(old), b=list(new), autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                out += raw[i1:i2]
                continue
            common = min(i2 - i1, j2 - j1)
            for k in range(i1, i2):
                now = new[j1 + k - i1] if k - i1 < common else None
                if k in held:
                    ops += _reference_ops(site.pointer, held[k], now)
                    out.append(raw[k])
                elif now is not None:
                    out.append(now)
            out += new[j1 + common : j2]
        written[field] = out
    return ops + _list_ops(site.pointer, container, written["command"], written["args"])


def _reference_ops(pointer: str, ref: Reference, now: str | None) -> list[Obj]:
    """The env write that gives an arg holding `$(VAR)` its new value `now` (None: the arg
    goes); ArgsError (advice) where that cannot be written here."""
    prefix, _, suffix = ref.written.partition(f"$({ref.name})")
    fits = now is not None and now.startswith(prefix) and now.endswith(suffix)
    value = now[len(prefix) : len(now) - len(suffix)] if now is not None and fits else None
    if ref.config_map is not None:
        name, key = ref.config_map
        change = (
            f"set that key to: {value}"
            if value is not None
            else f"the arg becomes {now!r}"
            if now is not None
            else "the arg goes"
        )
        raise ArgsError(
            f"{pointer}: {ref.written} takes its value from ConfigMap {name} key {key} (env "
            f"{ref.name}): advise only; {change}"
        )
    if value is None or ref.written.count("$(") > 1:
        raise ArgsError(
            f"{pointer}: {ref.written} takes its value from env {ref.name}: cannot write "
            f"{now!r} through it: advise only"
        )
    return [{"op": "replace", "path": f"{pointer}/env/{ref.env_index}/value", "value": value}]


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
