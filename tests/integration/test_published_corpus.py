"""`autotuner status` and `autotuner apply` on serving manifests as their projects publish them
(tests/corpus/published: LeaderWorkerSet, llm-d, KServe, AIBrix, production-stack, Dynamo,
SGLang; SOURCES.md names each file's repository, path and commit), used as GitOps files and
loaded into the loopback API server.

Each file is tried as it is (its own setup, plain, spec:3 and replay:16: replay refused by the
rule that forbids it, a KV connector, an attention-only model, an unknown model) and with a
hybrid model declared (--model, --engine-version), so that replay is written into every layout
the publishers use. A write may change only the managed flags, their values and the tuner's own
annotations (every other byte, comment and indentation kept), leaves every `sh -c` script
`bash -n` clean, and going back to the file's own setup gives back its bytes. Where the args
cannot be written safely (a value from a ConfigMap, a flag the shell computes) the advice is
checked instead, and the file is left alone.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.corpus import (
    CORPUS,
    HYBRID,
    PUBLISHED,
    SGLANG_FLAGS,
    VLLM_FLAGS,
    Published,
    Ran,
    bash_refusals,
    cli,
    engine_containers,
    foreign_changes,
    git_blob_id,
    managed_words,
    object_changes,
    only_tuner_lines_differ,
    published,
    runs_with,
    shell_scripts,
    sources,
)
from tests.support.fake_apiserver import FakeApiServer, fake_apiserver

READABLE = [p for p in PUBLISHED if not p.invalid]
SETUPS = ("spec:3", "plain", "replay:16")
LABELS = {"vllm": "vLLM", "sglang": "SGLang"}
KV_WORDS = ("kv connector", "kv_connector", "kv-transfer-config", "kv_transfer_config")
REPLAY_FLAG = {"vllm": "--use-replayssm", "sglang": "--enable-linear-replayssm"}


def _open_failures() -> dict[str, str]:
    """The checks issue 38 has not fixed yet (test name -> its class), from
    tests/corpus/open_failures.txt."""
    listed: dict[str, str] = {}
    for line in (CORPUS.parent / "open_failures.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        number, label, name = (part.strip() for part in line.split("|"))
        listed[name] = f"issue 38 class {number} ({label}) is still open"
    return listed


OPEN_FAILURES = _open_failures()


@pytest.fixture(autouse=True)
def _known_open(request: pytest.FixtureRequest) -> None:
    """A check of a class still open is an expected failure, not strict: its fix makes it
    pass (and its line is then deleted); every other check must pass."""
    reason = OPEN_FAILURES.get(request.node.name)
    if reason is not None:
        request.applymarker(pytest.mark.xfail(reason=reason, strict=False))


def ids(files: list[Published]) -> list[str]:
    return [p.id for p in files]


def copied(p: Published, tmp_path: Path) -> Path:
    target = tmp_path / Path(p.file).name
    shutil.copyfile(p.path, target)
    return target


def flags_of(p: Published) -> tuple[str, ...]:
    return SGLANG_FLAGS if p.engine == "sglang" else VLLM_FLAGS


def status_of(uri: str) -> dict[str, Any]:
    ran = cli("status", "--json", "--target", uri)
    assert ran.code == 0, ran.said
    report: dict[str, Any] = json.loads(ran.stdout)
    return report


def engine_named(report: dict[str, Any]) -> str | None:
    """The engine a status report names: its `engine` entry where it has one, and the label
    its build description starts with."""
    engine = report.get("engine")
    if isinstance(engine, dict):
        engine = engine.get("kind") or engine.get("name")
    label = str(report["build"]["description"]).split(" ", 1)[0]
    by_label = {v: k for k, v in LABELS.items()}.get(label)
    if engine is not None and str(engine).lower() != by_label:
        return f"{engine} / {label}"
    return by_label


def tokens(report: dict[str, Any]) -> list[str]:
    return [str(w) for w in (*report["command"], *report["args"])]


# ------------------------------------------------------------------ provenance


def test_every_file_is_kept_with_its_repository_path_and_commit() -> None:
    rows = {row.file: row for row in sources()}
    on_disk = {str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.yaml")}
    assert on_disk == set(rows), "every corpus file has a SOURCES.md row and every row a file"
    assert on_disk == {p.file for p in PUBLISHED}, "every file has its expectations"
    for row in rows.values():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", row.repo), row
        assert re.fullmatch(r"[0-9a-f]{40}", row.commit), row
        assert row.license == "Apache-2.0", row
        data = (CORPUS / row.file).read_bytes()
        if row.check.startswith("git blob "):
            assert git_blob_id(data) == row.check.removeprefix("git blob "), row.file
        else:
            chars = int(row.check.split()[2])
            assert len(data.decode("utf-8")) == chars, row.file


def test_the_span_check_tells_a_managed_edit_from_any_other() -> None:
    """The checker itself, on a published file edited by hand: flags inserted into the args,
    appended to a script's last line, and the tuner's annotation pass; a re-indented list, a
    deleted comment, a moved blank line and a re-quoted value do not."""
    text = published("aibrix/quickstart-model.yaml").path.read_text(encoding="utf-8")
    port = "            - --port\n"
    assert port in text
    flags = VLLM_FLAGS
    managed = managed_words(["--use-replayssm", "--replayssm-buffer-len", "16"], flags)
    inserted = text.replace(port, f"            - --use-replayssm\n{port}", 1)
    inserted = inserted.replace(
        "metadata:\n", "metadata:\n  annotations:\n    spec-autotuner.io/state: '{}'\n", 1
    )
    assert foreign_changes(text, inserted, managed, flags) == []
    script = "--max-model-len 40960 \\\n  --tensor-parallel-size 4\n"
    appended = script.replace("size 4", "size 4 --use-replayssm --replayssm-buffer-len 16")
    assert foreign_changes(script, appended, managed, flags) == []
    reindented = text.replace(port, port[2:], 1)
    assert foreign_changes(text, reindented, managed, flags)
    comment = next(line for line in text.splitlines() if line.strip().startswith("#"))
    assert foreign_changes(text, text.replace(comment + "\n", "", 1), managed, flags)
    assert foreign_changes(text, text + "\n", managed, flags)
    assert foreign_changes(text, text.replace('"8000"', "'8000'", 1), managed, flags)


def test_the_flag_check_reads_what_the_container_runs() -> None:
    """A flag after `bash -exc SCRIPT` is only the script's $0: not handed to the engine; one
    inside the script is."""
    text = published("production-stack/pd-orchestrated-decode.yaml").path.read_text("utf-8")
    last = "                --max-model-len ${MAX_SEQ_LEN}\n"
    assert last in text
    inside = text.replace(last, last.replace("}\n", "} --use-replayssm\n"), 1)
    assert runs_with(inside, "--use-replayssm")
    after_script = text.replace(
        "\n      volumes:", "\n            - --use-replayssm\n      volumes:"
    )
    assert after_script != text
    assert not runs_with(after_script, "--use-replayssm")


# ------------------------------------------------------------------ status


@pytest.mark.parametrize("p", READABLE, ids=ids(READABLE))
def test_status_names_the_engine_and_the_model_the_command_line_runs(
    p: Published, tmp_path: Path
) -> None:
    path = copied(p, tmp_path)
    report = status_of(p.uri(path))
    assert engine_named(report) == p.engine, report["build"]
    if p.model:
        read = tokens(report)
        # As a word of its own (a positional, `--model M`) or joined (`--model-path=M`).
        joined = {t.split("=", 1)[1] for t in read if t.startswith("--") and "=" in t}
        assert p.model in read or p.model in joined, f"{p.model} not read from {read}"
    assert report["setup"] == p.setup or p.advice, report["setup"]
    assert path.read_bytes() == p.path.read_bytes()


VERSIONED = [p for p in READABLE if p.foreign_versions or p.engine_version]


@pytest.mark.parametrize("p", VERSIONED, ids=ids(VERSIONED))
def test_status_takes_a_version_only_from_an_image_that_carries_the_engine(
    p: Published, tmp_path: Path
) -> None:
    build = status_of(p.uri(copied(p, tmp_path)))["build"]
    if p.engine_version:
        assert build["version"] == p.engine_version, build
    for tag in p.foreign_versions:
        assert build["version"] != tag, f"{build['description']}: read from another image"


NAMED = [p for p in READABLE if p.query]


@pytest.mark.parametrize("p", NAMED, ids=ids(NAMED))
def test_a_file_with_several_workers_says_how_to_name_one_in_the_file_target(
    p: Published, tmp_path: Path
) -> None:
    ran = cli("status", "--target", f"file://{copied(p, tmp_path)}")
    assert ran.code != 0
    form = "?name=" if p.query.startswith("name=") else "?container="
    assert "file://" in ran.said, ran.said
    assert form in ran.said, ran.said


INVALID = [p for p in PUBLISHED if p.invalid]


@pytest.mark.parametrize("p", INVALID, ids=ids(INVALID))
def test_a_file_that_is_not_valid_yaml_is_refused_and_left_alone(
    p: Published, tmp_path: Path
) -> None:
    path = copied(p, tmp_path)
    for command in (("status",), ("apply", "--setup", "replay:16", "--force")):
        ran = cli(*command, "--target", p.uri(path))
        assert ran.code != 0
        assert all(word in ran.said for word in p.invalid), ran.said
        assert path.read_bytes() == p.path.read_bytes()


# ------------------------------------------------------------------ apply, the file as it is


@dataclass(frozen=True)
class Expect:
    """What `apply` must do: write, change nothing (already there), refuse naming a rule
    (any of `words`), or advise naming every one of `words`."""

    outcome: str  # written | noop | refused | advised | written-or-advised
    words: tuple[str, ...] = ()
    code: int | None = None
    names: str | None = None  # a refusal that must name the model it read


def as_published(p: Published, setup: str) -> Expect:
    if setup == p.setup:
        return Expect("noop")
    if setup.startswith("replay"):
        if p.kv_connector:  # refused by the rule, or advised where the shell computes a flag
            return Expect("refused", (*KV_WORDS, *p.advice), code=None if p.advice else 2)
        if p.replay_rule:  # a rule of the args alone, or the model's, whichever is checked first
            return Expect("refused", (*p.replay_rule, "not known", "architecture"), code=2)
        if p.attention_only:
            return Expect("refused", ("architecture",), code=2)
        if p.low_precision:
            return Expect("refused", ("precision",), code=2)
        if p.advice and setup not in p.flexible:
            return Expect("advised", p.advice)
        return Expect("refused", ("not known", "architecture"), code=2, names=p.model)
    if p.advice:
        return Expect("written-or-advised" if setup in p.flexible else "advised", p.advice)
    if setup.startswith("spec"):
        return Expect("refused", ("drafter",))
    return Expect("written")


def check_refusal(ran: Ran, expect: Expect) -> None:
    said = ran.said.lower()
    assert ran.code != 0, ran.said
    if expect.code is not None:
        assert ran.code == expect.code, ran.said
    assert any(w.lower() in said for w in expect.words), f"names none of {expect.words}: {said}"
    if expect.names:
        assert expect.names.lower() in said, f"does not name {expect.names}: {said}"


def check_advice(ran: Ran, expect: Expect) -> None:
    assert ran.code != 0 or "advi" in ran.said.lower(), ran.said
    assert all(w in ran.said for w in expect.words), f"does not name {expect.words}: {ran.said}"


def check_written(p: Published, before: str, after: str, uri: str, setup: str) -> None:
    """Only the managed spans changed, every script still parses, and status reads `setup`."""
    try:
        list(yaml.safe_load_all(after))
    except yaml.YAMLError as error:
        raise AssertionError(f"the file is no longer YAML: {error}") from None
    live_before = tokens(status_of_text(p, before, uri))
    report = status_of(uri)
    problems = []
    if report["setup"] != setup:
        problems.append(f"status reads {report['setup']} after writing {setup}")
    managed = managed_words([*live_before, *tokens(report)], flags_of(p))
    problems += foreign_changes(before, after, managed, flags_of(p))
    problems += [f"bash -n: {said}" for said in bash_refusals(shell_scripts(after))]
    written = REPLAY_FLAG[p.engine] if setup.startswith("replay") else None
    if written and not runs_with(after, written):
        problems.append(f"{written} is written where the engine does not read it")
    if p.kserve and engine_containers(after) != engine_containers(before):
        problems.append("command/args written into a KServe container (its template's args)")
    assert not problems, "\n".join(problems)


def status_of_text(p: Published, text: str, uri: str) -> dict[str, Any]:
    """The status of a copy of `text` at the place `uri` names (the file as it was)."""
    path = Path(uri.removeprefix("file://").split("?", 1)[0])
    twin = path.with_name(f"before-{path.name}")
    twin.write_text(text, encoding="utf-8")
    return status_of(p.uri(twin))


def check(p: Published, ran: Ran, expect: Expect, path: Path, before: str, setup: str) -> bool:
    """The answer `expect` asks for; True when the file was written."""
    after = path.read_text(encoding="utf-8")
    written = after != before
    if expect.outcome == "written-or-advised":
        expect = Expect("written" if written else "advised", expect.words)
    if expect.outcome != "written":
        assert after == before, "the file changed"
    if expect.outcome == "noop":
        assert ran.code == 0, ran.said
    elif expect.outcome == "refused":
        check_refusal(ran, expect)
    elif expect.outcome == "advised":
        check_advice(ran, expect)
    else:
        assert ran.code == 0, ran.said
        assert written, f"nothing written: {ran.said}"
        check_written(p, before, after, p.uri(path), setup)
    return written


CASES = [(p, s) for p in READABLE for s in SETUPS]


@pytest.mark.parametrize(("p", "setup"), CASES, ids=[f"{p.id}-{s}" for p, s in CASES])
def test_apply_to_the_file_as_published(p: Published, setup: str, tmp_path: Path) -> None:
    path = copied(p, tmp_path)
    before = path.read_text(encoding="utf-8")
    expect = as_published(p, setup)
    ran = cli("apply", "--setup", setup, "--target", p.uri(path))
    if check(p, ran, expect, path, before, setup):
        back = cli("apply", "--setup", p.setup, "--target", p.uri(path))
        assert back.code == 0, back.said
        assert not only_tuner_lines_differ(before, path.read_text(encoding="utf-8"))


# ------------------------------------------------------------------ replay on a hybrid model


def hybrid(p: Published) -> tuple[str, ...]:
    model, version = HYBRID[p.engine]
    return ("--model", model, "--engine-version", version, "--allow-low-precision-replay")


def as_hybrid(p: Published) -> Expect:
    if p.kv_connector:
        return Expect("refused", (*KV_WORDS, *p.advice), code=None if p.advice else 2)
    if p.replay_rule:
        return Expect("refused", p.replay_rule, code=2)
    if p.advice:
        return Expect("written-or-advised" if "replay:16" in p.flexible else "advised", p.advice)
    return Expect("written")


@pytest.mark.parametrize("p", READABLE, ids=ids(READABLE))
def test_replay_for_a_hybrid_model_writes_only_the_managed_spans_and_comes_back(
    p: Published, tmp_path: Path
) -> None:
    path = copied(p, tmp_path)
    before = path.read_text(encoding="utf-8")
    ran = cli("apply", "--setup", "replay:16", "--target", p.uri(path), *hybrid(p))
    if check(p, ran, as_hybrid(p), path, before, "replay:16"):
        back = cli("apply", "--setup", p.setup, "--target", p.uri(path), *hybrid(p))
        assert back.code == 0, back.said
        restored = path.read_text(encoding="utf-8")
        assert not only_tuner_lines_differ(before, restored), "\n".join(
            only_tuner_lines_differ(before, restored)
        )


def test_a_spec_value_from_a_configmap_is_advised_naming_the_configmap_and_key(
    tmp_path: Path,
) -> None:
    p = published("dynamo/nemotron-3-super-agg-h200-chat.yaml")
    path = copied(p, tmp_path)
    ran = cli("apply", "--setup", "spec:2", "--target", p.uri(path))
    assert path.read_bytes() == p.path.read_bytes()
    check_advice(ran, Expect("advised", p.advice))
    assert re.search(r'"num_speculative_tokens":\s*2\b', ran.said), "the new value is not named"


# ------------------------------------------------------------------ the same objects in a cluster


@dataclass(frozen=True)
class InCluster:
    file: str
    kind: str  # the kind word of the k8s:// URI
    part: str = ""  # /CONTAINER or /COMPONENT


CLUSTER = [
    InCluster("lws/sglang-lws.yaml", "leaderworkerset"),
    InCluster("llm-d/pd-baseline-manifest.yaml", "deployment"),
    InCluster("kserve/llmisvc-pd-qwen2-7b-gpu.yaml", "llminferenceservice.v1alpha2"),
    InCluster("kserve/llmisvc-dp-ep-deepseek-r1-deepep-ht.yaml", "llminferenceservice.v1alpha2"),
    InCluster("dynamo/sglang-agg.yaml", "dynamographdeployment.v1alpha1", "/decode"),
    InCluster("dynamo/nemotron-3-super-agg-h200-chat.yaml", "dynamographdeployment", "/agg"),
    InCluster("dynamo/vllm-disagg.yaml", "dynamographdeployment.v1alpha1", "/VllmDecodeWorker"),
    InCluster("llm-d/wide-ep-decode.yaml", "leaderworkerset"),
    InCluster("aibrix/brixbench-vllm-qwen3-32b-tp4.yaml", "deployment"),
    InCluster("aibrix/adapter-base.yaml", "deployment"),
    InCluster("kserve/llmisvc-tool-calling-single-gpu.yaml", "llminferenceservice.v1alpha2"),
    InCluster("production-stack/gie-gpu-deployment.yaml", "deployment"),
]


def load(server: FakeApiServer, p: Published) -> tuple[str, str]:
    """Every document of the file put into the server (namespace llm); the workload's kind
    and name."""
    workload = ("", "")
    for document in yaml.safe_load_all(p.path.read_text(encoding="utf-8")):
        if not isinstance(document, dict):
            continue
        document.setdefault("metadata", {})["namespace"] = "llm"
        server.put(document["kind"], document)
        if document["kind"] not in ("ConfigMap", "Service"):
            workload = (document["kind"], document["metadata"]["name"])
    return workload


def without_bookkeeping(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    annotations = {k: v for k, v in meta.get("annotations", {}).items() if "autotuner" not in k}
    kept = {k: v for k, v in meta.items() if k not in ("resourceVersion", "generation")}
    return {**obj, "metadata": {**kept, "annotations": annotations}}


@pytest.mark.parametrize("c", CLUSTER, ids=[c.file.removesuffix(".yaml") for c in CLUSTER])
def test_the_published_object_in_a_cluster(c: InCluster) -> None:
    p = published(c.file)
    with fake_apiserver() as server:
        kind, name = load(server, p)
        target = ["--target", f"k8s://llm/{c.kind}/{name}{c.part}", "--kube-server", server.url]
        shown = cli("status", "--json", *target)
        assert shown.code == 0, shown.said
        assert engine_named(json.loads(shown.stdout)) == p.engine
        before = server.get(kind, "llm", name)
        ran = cli("apply", "--setup", "replay:16", "--allow-surge", *target, *hybrid(p))
        expect = as_hybrid(p)
        after = server.get(kind, "llm", name)
        if expect.outcome == "refused":
            check_refusal(ran, expect)
            assert after == before
            return
        if expect.outcome == "advised" or (expect.outcome == "written-or-advised" and ran.code):
            check_advice(ran, Expect("advised", p.advice))
            assert after == before
            return
        assert ran.code == 0, ran.said
        assert json.loads(cli("status", "--json", *target).stdout)["setup"] == "replay:16"
        managed = managed_words(_engine_words(after), flags_of(p))
        problems = object_changes(
            without_bookkeeping(before), without_bookkeeping(after), managed, flags_of(p)
        )
        assert not problems, "\n".join(problems)
        assert runs_with(yaml.safe_dump(after), REPLAY_FLAG[p.engine]), "not where the engine reads"


def _engine_words(obj: dict[str, Any]) -> list[str]:
    """The words of every command, args list and VLLM_ADDITIONAL_ARGS value in an object."""
    text = yaml.safe_dump(obj, width=1 << 20)
    words = [
        word
        for command, args in engine_containers(text)
        for item in (*command, *args)
        for word in item.split()  # a script's words too
    ]
    for match in re.finditer(r"name: VLLM_ADDITIONAL_ARGS\n\s+value: (.*)", text):
        words += match.group(1).strip("'\"").split()
    return words


def test_an_engine_rule_refuses_with_the_builds_exit_code_and_yields_to_force(
    tmp_path: Path,
) -> None:
    """SGLang's own start-up rule (replay needs --page-size 1) exits 2 as the build table's
    rules do, names the flag, and `--force` writes the setup anyway."""
    p = published("dynamo/sglang-agg.yaml")
    path = copied(p, tmp_path)
    refused = cli("apply", "--setup", "replay:16", "--target", p.uri(path), *hybrid(p))
    assert refused.code == 2, refused.said
    assert "--page-size" in refused.said
    assert "--force" in refused.said
    assert path.read_bytes() == p.path.read_bytes()
    forced = cli("apply", "--setup", "replay:16", "--force", "--target", p.uri(path), *hybrid(p))
    assert forced.code == 0, forced.said
    assert status_of(p.uri(path))["setup"] == "replay:16"
