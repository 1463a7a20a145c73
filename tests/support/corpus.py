"""The published serving manifests of tests/corpus/published, what each one is known to run
(engine, served model, KV connector, where a write is unsafe), and the checks the corpus test
makes on a file before and after `autotuner apply`: which lines changed and whether each change
is the tuner's (a managed flag, its value, or the tuner's own annotations), and whether every
`sh -c` script still parses.

The expectations are read off each file by hand (SOURCES.md says where each file comes from); a
test compares the tool's answers with them, never with what the tool printed before.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from autotuner.cli.main import app

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "published"
SOURCES = CORPUS / "SOURCES.md"

# A hybrid model and a build whose rules implement replay for it, per engine: the corpus test
# declares them (--model, --engine-version) to write replay into files whose own model is not
# hybrid, so the writer is tried on every published layout.
HYBRID = {
    "vllm": ("nvidia/NVIDIA-Nemotron-3-Super-120B-A12B", "0.33.0"),
    "sglang": ("Qwen/Qwen3-Next-80B-A3B-Instruct", "0.5.23"),
}
# The flags a setup writes: the managed ones and the companions each engine's build rules add.
VLLM_FLAGS = (
    "--speculative-config",
    "--use-replayssm",
    "--replayssm-buffer-len",
    "--mamba-backend",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--disable-prefix-caching",
    "--no-disable-prefix-caching",
)
SGLANG_FLAGS = (
    "--speculative-",  # the drafter's and the tuner's --speculative-* flags alike
    "--enable-linear-replayssm",
    "--enable-linear-replayssm-spec",
    "--linear-replayssm-cache-len",
    "--mamba-radix-cache-strategy",
    "--disable-overlap-schedule",
    "--enable-metrics",  # the tuner reads SGLang's metrics: any setup it writes turns them on
)
SWITCHES = frozenset(
    {
        "--use-replayssm",
        "--enable-prefix-caching",
        "--no-enable-prefix-caching",
        "--disable-prefix-caching",
        "--no-disable-prefix-caching",
        "--enable-linear-replayssm",
        "--enable-linear-replayssm-spec",
        "--disable-overlap-schedule",
        "--speculative-adaptive",
        "--enable-metrics",
    }
)
TUNER_KEY = "spec-autotuner.io/"
# Flags the tuner keeps on for its own reading, whatever the setup: SGLang exports its metrics
# only with --enable-metrics, so any setup the tuner writes there turns them on (README).
TUNER_FLAGS = frozenset({"--enable-metrics"})
SHELLS = frozenset({"sh", "bash", "dash"})
runner = CliRunner()


@dataclass(frozen=True)
class Published:
    """One published file and what it is known to run."""

    file: str  # under tests/corpus/published
    engine: str  # vllm | sglang: what the engine container's command line starts
    query: str = ""  # the file target's ?name=/?container= (several workloads or workers)
    model: str | None = None  # the served model as the command line names it, if literal
    kv_connector: bool = False  # the engine runs a KV connector: replay must be refused
    attention_only: bool = False  # the model is a known attention-only one: no replay
    setup: str = "plain"  # the setup the file deploys
    advice: tuple[str, ...] = ()  # a write here is unsafe: the advice must name these
    flexible: frozenset[str] = frozenset()  # setups that may be written or advised
    low_precision: bool = False  # the file sets a non-fp32 SSM state (replay refused as is)
    replay_rule: tuple[str, ...] = ()  # another rule refuses replay here: its words
    foreign_versions: tuple[str, ...] = ()  # tags of images that do not carry the engine
    engine_version: str | None = None  # the version an engine image's tag names
    invalid: tuple[str, ...] = ()  # the file is not valid YAML: the error must say these
    scripts: bool = False  # the engine runs from a `sh -c` script
    kserve: bool = False  # KServe's template runs the engine: args go in VLLM_ADDITIONAL_ARGS
    notes: tuple[str, ...] = field(default=())

    @property
    def path(self) -> Path:
        return CORPUS / self.file

    @property
    def id(self) -> str:
        return self.file.removesuffix(".yaml")

    def uri(self, path: Path) -> str:
        return f"file://{path}" + (f"?{self.query}" if self.query else "")


LLAMA_8B = "deepseek-ai/DeepSeek-R1-Distill-Llama-8B"
PUBLISHED = (
    # kubernetes-sigs/lws
    Published("lws/sglang-lws.yaml", "sglang", model="meta-llama/Meta-Llama-3.1-8B-Instruct"),
    Published(
        "lws/vllm-gpu-lws.yaml",
        "vllm",
        model="meta-llama/Llama-3.1-405B-Instruct",
        engine_version="0.8.5",
        scripts=True,
    ),
    Published(
        "lws/vllm-tpu-lws.yaml", "vllm", model="meta-llama/Llama-3.3-70B-Instruct", scripts=True
    ),
    # llm-d
    Published(
        "llm-d/wide-ep-decode.yaml",
        "vllm",
        model="deepseek-ai/DeepSeek-R1-0528",
        kv_connector=True,
        scripts=True,
    ),
    Published(
        "llm-d/wide-ep-prefill.yaml",
        "vllm",
        model="deepseek-ai/DeepSeek-R1-0528",
        kv_connector=True,
        foreign_versions=("0.8.0",),
        scripts=True,
    ),
    Published(
        "llm-d/wide-ep-deepseek-v4-decode.yaml",
        "vllm",
        model="deepseek-ai/DeepSeek-V4-Pro",
        kv_connector=True,
        engine_version="0.23.0",
        scripts=True,
    ),
    Published(
        "llm-d/wide-ep-glm-5.2-dspark-decode.yaml",
        "vllm",
        model="zai-org/GLM-5.2-FP8",
        kv_connector=True,
        advice=("SPEC_ARGS",),
        scripts=True,
        notes=("--speculative-config is computed by the shell into $SPEC_ARGS",),
    ),
    Published(
        "llm-d/pd-baseline-manifest.yaml",
        "vllm",
        model="openai/gpt-oss-120b",
        engine_version="0.23.0",
    ),
    Published(
        "llm-d/optimized-baseline-vllm.yaml", "vllm", model="Qwen/Qwen3-32B", attention_only=True
    ),
    Published(
        "llm-d/optimized-baseline-sglang.yaml",
        "sglang",
        model="Qwen/Qwen3-32B",
        attention_only=True,
    ),
    Published("llm-d/pd-vllm-decode.yaml", "vllm", model="openai/gpt-oss-120b", kv_connector=True),
    Published("llm-d/pd-sglang-prefill.yaml", "sglang", model="openai/gpt-oss-120b"),
    Published(
        "llm-d/pd-tpu-v7-decode.yaml",
        "vllm",
        model="Qwen/Qwen3.5-397B-A17B-FP8",
        kv_connector=True,
    ),
    Published(
        "llm-d/agentic-nemotron-3-ultra-decode.yaml",
        "vllm",
        model="RedHatAI/NVIDIA-Nemotron-3-Ultra-550B-A55B-FP8-block",
        kv_connector=True,
    ),
    Published(
        "llm-d/tiered-prefix-cache-lmcache.yaml",
        "vllm",
        invalid=("env",),
        notes=("the published patch repeats the key `env` in one container",),
    ),
    Published(
        "llm-d/tiered-prefix-cache-sglang.yaml",
        "sglang",
        model="Qwen/Qwen3-32B",
        attention_only=True,
        replay_rule=("--page-size",),
    ),
    Published(
        "llm-d/precise-prefix-cache-vllm.yaml",
        "vllm",
        model="Qwen/Qwen3-32B",
        attention_only=True,
        notes=("$(KV_EVENTS_ENDPOINT) and $(POD_IP) inside an unmanaged flag's JSON",),
    ),
    Published(
        "llm-d/multimodal-encode-deployment.yaml",
        "vllm",
        model="Qwen/Qwen3-VL-32B-Instruct",
        notes=("a 4-line comment between --ec-transfer-config and its value",),
    ),
    # kserve/kserve
    Published("kserve/llmisvc-opt-125m-cpu.yaml", "vllm", engine_version="0.23.0", kserve=True),
    Published(
        "kserve/llmisvc-tool-calling-single-gpu.yaml",
        "vllm",
        foreign_versions=("0.9.0",),
        kserve=True,
    ),
    Published(
        "kserve/llmisvc-nemotron-3-ultra-pd.yaml",
        "vllm",
        kv_connector=True,
        foreign_versions=("0.9.0",),
        kserve=True,
    ),
    Published("kserve/llmisvc-dp-ep-deepseek-r1-deepep-ht.yaml", "vllm", kserve=True),
    Published("kserve/llmisvc-pd-qwen2-7b-gpu.yaml", "vllm", kv_connector=True, kserve=True),
    Published("kserve/llmisvc-qwen2-7b-kv-cache-routing.yaml", "vllm", kserve=True),
    # vllm-project/aibrix
    Published("aibrix/quickstart-model.yaml", "vllm", model=LLAMA_8B, engine_version="0.11.0"),
    Published(
        "aibrix/kvcache-l1cache-vllm.yaml",
        "vllm",
        model="/models/DeepSeek-R1-Distill-Llama-8B/",
        kv_connector=True,
    ),
    Published(
        "aibrix/volcano-deepseek-8b-kv-cluster.yaml",
        "vllm",
        model="/models/DeepSeek-R1-Distill-Llama-8B/",
        kv_connector=True,
    ),
    Published(
        "aibrix/multi-engine-sglang-llama-8b.yaml",
        "sglang",
        model="/root/models/DeepSeek-R1-Distill-Llama-8B",
    ),
    Published("aibrix/multi-engine-vllm-llama-8b.yaml", "vllm", model=LLAMA_8B),
    Published(
        "aibrix/adapter-base.yaml",
        "vllm",
        model="Qwen/Qwen2.5-Coder-1.5B-Instruct",
        engine_version="0.24.0",
    ),
    Published(
        "aibrix/brixbench-vllm-qwen3-32b-tp4.yaml",
        "vllm",
        model="/models/Qwen3-32B",
        scripts=True,
    ),
    Published(
        "aibrix/brixbench-llmd-qwen3-8b-pd.yaml",
        "vllm",
        query="name=pd-disaggregation-nvidia-gpu-vllm-decode",
        model="/models/Qwen3-8B",
        kv_connector=True,
    ),
    Published(
        "aibrix/brixbench-dynamo-qwen3-8b-1p1d.yaml",
        "vllm",
        query="container=VllmDecodeWorker",
        kv_connector=True,
        foreign_versions=("1.2.0",),
        scripts=True,
    ),
    Published(
        "aibrix/vineyard-deployment-tp.yaml",
        "vllm",
        model="deepseek-ai/deepseek-coder-33b-instruct",
        notes=("--enable-prefix-caching: replay's companion turns it off, going back restores it",),
    ),
    Published("aibrix/semantic-router-qwen3-8b.yaml", "vllm", model="/models/Qwen3-8B/"),
    # vllm-project/production-stack
    Published(
        "production-stack/pd-orchestrated-decode.yaml",
        "vllm",
        foreign_versions=("22.4.0", "22.04"),
        scripts=True,
        notes=("`bash -exc SCRIPT`: -c among clustered options; the model is ${MODEL_ID}",),
    ),
    Published(
        "production-stack/gie-gpu-deployment.yaml",
        "vllm",
        model="meta-llama/Llama-3.2-1B-Instruct",
        foreign_versions=("2025.5.5",),
    ),
    # ai-dynamo/dynamo
    Published(
        "dynamo/nemotron-3-super-agg-h200-chat.yaml",
        "vllm",
        query="container=agg",
        model="nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
        setup="spec:3",
        advice=("nemotron-3-super-h200-chat-config", "speculative-config"),
        flexible=frozenset({"plain", "replay:16"}),
        low_precision=True,
        foreign_versions=("1.3.0",),
        notes=("--speculative-config=$(SPECULATIVE_CONFIG), the value from a ConfigMap",),
    ),
    Published(
        "dynamo/sglang-agg.yaml",
        "sglang",
        query="container=decode",
        model="Qwen/Qwen3-0.6B",
        foreign_versions=("0.7.0",),
        replay_rule=("--page-size",),
    ),
    Published(
        "dynamo/vllm-disagg.yaml",
        "vllm",
        query="container=VllmDecodeWorker",
        model="Qwen/Qwen3-0.6B",
    ),
    # sgl-project/sglang
    Published(
        "sglang/lws-pd-decode.yaml", "sglang", model="/work/models", replay_rule=("--page-size",)
    ),
)


def published(name: str) -> Published:
    return next(p for p in PUBLISHED if p.file == name)


@dataclass(frozen=True)
class Ran:
    """What one `autotuner` command did."""

    code: int
    stdout: str
    stderr: str

    @property
    def said(self) -> str:
        return self.stdout + self.stderr


def cli(*args: str) -> Ran:
    """The command run in-process, as a user would type it."""
    result = runner.invoke(app, list(args))
    return Ran(result.exit_code, result.stdout, result.stderr)


# ------------------------------------------------------------------ the managed spans of a diff


def managed_words(tokens: Sequence[str], flags: Sequence[str]) -> set[str]:
    """The managed flags among an engine's tokens, and their values (as written, and each
    JSON or shell value also split into its whitespace-separated pieces)."""
    words: set[str] = set()
    for index, token in enumerate(tokens):
        name = token.split("=", 1)[0]
        if not any(name.startswith(flag) for flag in flags):
            continue
        words.add(token)
        value = token.split("=", 1)[1] if "=" in token else None
        if value is None and name not in SWITCHES and index + 1 < len(tokens):
            following = tokens[index + 1]
            value = None if following.startswith("--") else following
        if value is not None:
            words.add(value)
            words.update(value.split())
    return {w for w in words if w}


def _bare(word: str) -> str:
    """A word of a YAML or shell line without its quoting, list dash and continuation."""
    return word.strip("'\"\\,")


def _is_managed(word: str, managed: set[str], flags: Sequence[str]) -> bool:
    bare = _bare(word)
    if not bare or bare in {"-", "\\"}:
        return True
    if any(bare.split("=", 1)[0].startswith(flag) for flag in flags):
        return True
    return any(bare == m or (len(bare) > 1 and bare in m) for m in managed)


def _tuner_line(line: str, tuner_values: Sequence[str]) -> bool:
    """A line the tuner writes for its own record: an annotation of spec-autotuner.io, the
    `annotations:` key made for it, or a piece of such an annotation's value."""
    text = line.strip()
    if TUNER_KEY in text or re.fullmatch(r"annotations:\s*(\{\s*\})?", text):
        return True
    if text.removeprefix("- ").strip("'\"") in TUNER_FLAGS:
        return True
    return len(text) > 8 and any(text.strip("'\"") in value for value in tuner_values)


def tuner_values(text: str) -> list[str]:
    """The values of the tuner's annotations in a (multi-document) YAML file."""
    values: list[str] = []
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return values  # the caller reports the broken file; no annotation can be read
    for document in documents:
        if isinstance(document, dict):
            annotations = (document.get("metadata") or {}).get("annotations") or {}
            values += [str(v) for k, v in annotations.items() if str(k).startswith(TUNER_KEY)]
    return values


def foreign_changes(before: str, after: str, managed: set[str], flags: Sequence[str]) -> list[str]:
    """Every change between two texts that is not the tuner's: a line changed, added or
    removed that is not a managed flag, value or tuner annotation, a blank line added or
    removed, and words outside the managed ones that differ within a changed block. A line that
    keeps its indentation and its other words while managed words are added to it or taken from
    it (or only a trailing ` \\` continuation) is the tuner's. Empty: only managed spans
    changed."""
    old, new = before.splitlines(), after.splitlines()
    values = tuner_values(after) + tuner_values(before)
    problems: list[str] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        removed = _env_args_entry([line for line in old[i1:i2] if not _tuner_line(line, values)])
        added = _env_args_entry([line for line in new[j1:j2] if not _tuner_line(line, values)])
        # A line kept in place with managed words added to it or taken from it (or only a
        # trailing continuation): the same indentation and the same other words.
        in_place = {_unmanaged(line, managed, flags) for line in removed} & {
            _unmanaged(line, managed, flags) for line in added
        }
        for sign, lines in (("-", removed), ("+", added)):
            for line in lines:
                if not line.strip():
                    problems.append(f"{sign} a blank line")
                elif all(_is_managed(w, managed, flags) for w in line.split()):
                    continue
                elif _unmanaged(line, managed, flags) not in in_place:
                    problems.append(f"{sign} {line.strip()!r} (not a managed flag or value)")
        kept_old = _kept_words([w for line in removed for w in line.split()], managed, flags)
        kept_new = _kept_words([w for line in added for w in line.split()], managed, flags)
        if kept_old != kept_new:
            problems.append(f"words outside the managed flags changed: {kept_old} -> {kept_new}")
    return problems


def _env_args_entry(lines: Sequence[str]) -> list[str]:
    """Lines with a whole VLLM_ADDITIONAL_ARGS entry (added or removed) reduced to its value's
    words: where a KServe container has no command line of its own, the tuner's flags go in
    such an entry (its template expands it), so the entry is the managed span."""
    out: list[str] = []
    entry = False
    for line in lines:
        if re.fullmatch(r"\s*- name: VLLM_ADDITIONAL_ARGS", line):
            entry = True
            continue
        if entry and line.strip().startswith("value:"):
            line = line.replace("value:", "", 1)
        entry = False
        out.append(line)
    return out


def _unmanaged(line: str, managed: set[str], flags: Sequence[str]) -> tuple[str, ...]:
    """A line's indentation and its words that are not managed, quoted as written but for
    the closing quote of a string that managed lines now continue (it moves to their end)."""
    words = _kept_words(line.split(), managed, flags)
    if words and words[-1][-1:] in _QUOTES and words[-1][:1] not in _QUOTES:
        words[-1] = words[-1][:-1]
    return (_indent(line), *words)


_QUOTES = "'\""


def _kept_words(words: Sequence[str], managed: set[str], flags: Sequence[str]) -> list[str]:
    """The words that are not managed, quoted as written, except that a quote a managed word
    carries at its edge belongs to the string around them: flags appended at the end of a
    quoted script move its closing quote (`--enforce-eager"` -> `... 16"`), which is no
    change of the operator's words."""
    kept: list[str] = []
    opening = ""
    for word in words:
        if not _is_managed(word, managed, flags):
            kept.append(opening + word if not word.startswith(tuple(_QUOTES)) else word)
            opening = ""
            continue
        closing = word[len(word.rstrip(_QUOTES + ",")) :]
        if closing and kept and not kept[-1].endswith(closing):
            kept[-1] += closing
        opening += word[: len(word) - len(word.lstrip(_QUOTES))]
    return kept


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def object_changes(
    before: Any, after: Any, managed: set[str], flags: Sequence[str], where: str = ""
) -> list[str]:
    """Every difference between two API objects that is not the tuner's: a string (a script,
    an env value) or a list of strings (command, args) may differ only by managed words; any
    other field must be equal."""
    if isinstance(before, dict) and isinstance(after, dict):
        problems = [f"{where}/{k}: added or removed" for k in before.keys() ^ after.keys()]
        for key in before.keys() & after.keys():
            problems += object_changes(before[key], after[key], managed, flags, f"{where}/{key}")
        return problems
    if isinstance(before, list) and isinstance(after, list):
        if all(isinstance(v, str) for v in (*before, *after)):
            return object_changes(" ".join(before), " ".join(after), managed, flags, where)
        if len(before) != len(after):
            return [f"{where}: {len(before)} items became {len(after)}"]
        return [
            problem
            for index, (was, now) in enumerate(zip(before, after, strict=True))
            for problem in object_changes(was, now, managed, flags, f"{where}/{index}")
        ]
    if isinstance(before, str) and isinstance(after, str) and before != after:
        kept = [
            [w for w in text.split() if not _is_managed(w, managed, flags)]
            for text in (before, after)
        ]
        return [] if kept[0] == kept[1] else [f"{where}: {kept[0]} -> {kept[1]}"]
    return [] if before == after else [f"{where}: {before!r} -> {after!r}"]


def only_tuner_lines_differ(before: str, after: str) -> list[str]:
    """The lines (other than the tuner's own annotations) by which two texts differ."""
    values = tuner_values(after) + tuner_values(before)
    diff = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [
        line
        for line in diff
        if line[:1] in "+-"
        and not line.startswith(("+++", "---"))
        and not _tuner_line(line[1:], values)
    ]


# ------------------------------------------------------------------ the scripts containers run


def _containers(node: Any) -> Iterator[dict[str, Any]]:
    """Every container-like map (one with a command or args list) in a parsed document."""
    if isinstance(node, dict):
        if isinstance(node.get("command"), list) or isinstance(node.get("args"), list):
            yield node
        for value in node.values():
            yield from _containers(value)
    elif isinstance(node, list):
        for item in node:
            yield from _containers(item)


def shell_scripts(text: str) -> list[str]:
    """The script of every `sh -c SCRIPT` (or bash, with -c among clustered options) a
    container of the file runs."""
    scripts: list[str] = []
    for document in yaml.safe_load_all(text):
        for container in _containers(document):
            words = [str(w) for w in (container.get("command") or [])]
            words += [str(w) for w in (container.get("args") or [])]
            for index in range(len(words) - 2):
                shell, option = words[index].rsplit("/", 1)[-1], words[index + 1]
                if shell in SHELLS and option.startswith("-") and "c" in option:
                    scripts.append(words[index + 2])
                    break
    return scripts


def bash_refusals(scripts: Sequence[str]) -> list[str]:
    """What `bash -n` says of each script that does not parse (empty: all parse)."""
    said: list[str] = []
    for script in scripts:
        checked = subprocess.run(
            ["bash", "-n"], input=script, capture_output=True, text=True, timeout=10, check=False
        )
        if checked.returncode:
            said.append(checked.stderr.strip())
    return said


def runs_with(text: str, flag: str) -> bool:
    """Whether some container of the file hands `flag` to the program it runs: inside the
    script of a `sh -c SCRIPT` (words after the script are only the script's $0, $1 ...), else
    in its command or args, or in an env VLLM_ADDITIONAL_ARGS that KServe's template expands."""
    for document in yaml.safe_load_all(text):
        for container in _containers(document):
            words = [str(w) for w in (container.get("command") or [])]
            words += [str(w) for w in (container.get("args") or [])]
            script = shell_scripts(yaml.safe_dump({"command": words}))
            if script:
                if flag in script[0]:
                    return True
            elif any(w.split("=", 1)[0] == flag for w in words):
                return True
        if flag in _env_args(document):
            return True
    return False


def _env_args(node: Any) -> str:
    """Every VLLM_ADDITIONAL_ARGS value in a parsed document, joined."""
    if isinstance(node, dict):
        own = str(node.get("value", "")) if node.get("name") == "VLLM_ADDITIONAL_ARGS" else ""
        return " ".join([own, *(_env_args(v) for v in node.values())])
    if isinstance(node, list):
        return " ".join(_env_args(v) for v in node)
    return ""


def engine_containers(text: str) -> list[tuple[list[str], list[str]]]:
    """(command, args) of every container of the file, in document order."""
    found: list[tuple[list[str], list[str]]] = []
    for document in yaml.safe_load_all(text):
        for container in _containers(document):
            command = [str(w) for w in container.get("command") or []]
            found.append((command, [str(w) for w in container.get("args") or []]))
    return found


# ------------------------------------------------------------------ where each file comes from


def git_blob_id(data: bytes) -> str:
    """The id git gives a file's bytes (what `git hash-object` prints)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass(frozen=True)
class Source:
    file: str
    repo: str
    path: str
    commit: str
    license: str
    check: str


def sources() -> list[Source]:
    """The rows of SOURCES.md."""
    rows: list[Source] = []
    for line in SOURCES.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or cells[0] in ("file", "---") or set(cells[0]) <= {"-"}:
            continue
        file, repo, path, commit, _, license_, check = cells
        rows.append(Source(file, repo, path, commit, license_, check))
    return rows
