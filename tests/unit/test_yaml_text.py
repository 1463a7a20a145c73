"""A YAML file's text edited in place: only the characters of the values that change move,
on every published file of the corpus and on the shapes they hold."""

from __future__ import annotations

import difflib
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from autotuner.actuators.yaml_text import TextEditError, edit_document, plain_ok

PUBLISHED = sorted((Path(__file__).parents[1] / "corpus" / "published").glob("*/*.yaml"))
STATE = "spec-autotuner.io/state"


def changed(before: str, after: str) -> tuple[list[str], list[str]]:
    """The lines removed and added between two texts."""
    diff = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0))
    body = [line for line in diff if not line.startswith(("---", "+++", "@@"))]
    return [d[1:] for d in body if d[0] == "-"], [d[1:] for d in body if d[0] == "+"]


def escaped(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def lists(node: Node, path: str = "") -> Iterator[tuple[str, SequenceNode]]:
    """Every `command`/`args` list of strings in a composed document, with its pointer."""
    if isinstance(node, MappingNode):
        for key, value in node.value:
            where = f"{path}/{escaped(key.value)}"
            if (
                key.value in ("command", "args")
                and isinstance(value, SequenceNode)
                and value.value
                and all(isinstance(i, ScalarNode) and "\n" not in i.value for i in value.value)
            ):
                yield where, value
            yield from lists(value, where)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield from lists(item, f"{path}/{index}")


def block_scalars(node: Node, path: str = "") -> Iterator[tuple[str, ScalarNode]]:
    """Every `|` or `>` string of a composed document, with its pointer."""
    if isinstance(node, ScalarNode) and node.style in ("|", ">"):
        yield path, node
    elif isinstance(node, MappingNode):
        for key, value in node.value:
            yield from block_scalars(value, f"{path}/{escaped(key.value)}")
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield from block_scalars(item, f"{path}/{index}")


def sites(kind: str) -> list[tuple[Path, int, str, Node]]:
    found: list[tuple[Path, int, str, Node]] = []
    for path in PUBLISHED:
        text = path.read_text(encoding="utf-8")
        for index, root in enumerate(yaml.compose_all(text, Loader=yaml.SafeLoader)):
            walk = lists if kind == "lists" else block_scalars
            found += [(path, index, where, node) for where, node in walk(root)]
    return found


LISTS = sites("lists")
BLOCKS = sites("blocks")


def ids(found: list[tuple[Path, int, str, Node]]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}#{i}{w}" for p, i, w, _ in found]


def test_the_corpus_has_lists_and_block_scalars_to_edit() -> None:
    assert len(LISTS) > 40
    assert len(BLOCKS) > 10
    assert any(isinstance(n, SequenceNode) and n.flow_style for _, _, _, n in LISTS)
    assert {n.style for _, _, _, n in BLOCKS if isinstance(n, ScalarNode)} == {"|", ">"}


@pytest.mark.parametrize(("path", "index", "where", "node"), LISTS, ids=ids(LISTS))
def test_a_list_of_a_published_file_changes_only_in_its_items(
    path: Path, index: int, where: str, node: SequenceNode
) -> None:
    text = path.read_text(encoding="utf-8")
    values = [str(i.value) for i in node.value]
    middle = len(values) // 2
    inserted = [*values[:middle], "--speculative-config", '{"method": "mtp", "n": 3}']
    inserted += values[middle:]
    new = edit_document(text, index, [{"op": "replace", "path": where, "value": inserted}])
    removed, added = changed(text, new)
    if node.flow_style:
        assert len(removed) == len(added) == 1
        assert "--speculative-config" in added[0]
    else:
        first = text.splitlines()[node.value[0].start_mark.line]
        dash = first[: node.value[0].start_mark.column]  # the siblings' `  - `
        assert removed == []
        assert all(a.startswith(dash) for a in added)
        assert [yaml.safe_load(a) for a in added] == [[v] for v in inserted[middle : middle + 2]]
    assert edit_document(new, index, [{"op": "replace", "path": where, "value": values}]) == text
    if len(values) > 1 and not node.flow_style:
        fewer = values[:middle] + values[middle + 1 :]
        shorter = edit_document(text, index, [{"op": "replace", "path": where, "value": fewer}])
        removed, added = changed(text, shorter)
        assert added == []
        assert len(removed) == 1
        assert values[middle] in removed[0]


@pytest.mark.parametrize(("path", "index", "where", "node"), BLOCKS, ids=ids(BLOCKS))
def test_a_block_scalar_of_a_published_file_changes_only_in_its_lines(
    path: Path, index: int, where: str, node: ScalarNode
) -> None:
    text = path.read_text(encoding="utf-8")
    value = str(node.value)
    if node.style == "|":
        lines = value.split("\n")
        lines[0] = lines[0] + " --spec-flag 3"
        new_value = "\n".join(lines)
    else:
        new_value = value.rstrip("\n") + " --spec-flag 3" + value[len(value.rstrip("\n")) :]
    op = {"op": "replace", "path": where, "value": new_value}
    new = edit_document(text, index, [op])
    removed, added = changed(text, new)
    if node.style == "|":
        assert len(removed) == len(added) == 1
        assert added[0] == removed[0] + " --spec-flag 3"
    else:
        assert removed == []
        assert [a.strip() for a in added] == ["--spec-flag 3"]
    assert edit_document(new, index, [{**op, "value": value}]) == text


# ------------------------------------------------------------------ the shapes, one by one

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: vllm
spec:
  template:
    spec:
      containers:
      - name: vllm
        envFrom: [{secretRef: {name: hf}}]
        args:
        - --model
        - "m"   # the weights
        # the server's own port, reviewed
        - --port
        - "3"

        env:
        - name: S
          value: plain words
---
kind: ConfigMap
"""
ARGS = "/spec/template/spec/containers/0/args"


def edit(ops: list[dict[str, object]], annotations: dict[str, str | None] | None = None) -> str:
    return edit_document(DEPLOYMENT, 0, ops, annotations)


def test_a_removed_item_leaves_the_comments_around_it() -> None:
    new = edit([{"op": "replace", "path": ARGS, "value": ["--model", "m", "3"]}])
    assert changed(DEPLOYMENT, new) == (["        - --port"], [])
    assert "# the server's own port, reviewed" in new


def test_a_replaced_item_keeps_its_quotes_and_the_blank_line_stays_after_the_list() -> None:
    new = edit([{"op": "replace", "path": ARGS, "value": ["--model", "m", "--port", "2"]}])
    assert changed(DEPLOYMENT, new) == (['        - "3"'], ['        - "2"'])
    new = edit([{"op": "replace", "path": ARGS, "value": ["--model", "m", "--port", "3", "-x"]}])
    assert '- "3"\n        - -x\n\n        env:' in new


def test_a_plain_value_that_needs_quotes_is_written_double_quoted() -> None:
    op = {"op": "replace", "path": "/spec/template/spec/containers/0/env/0/value"}
    new = edit([{**op, "value": "key: value #1"}])
    assert changed(DEPLOYMENT, new) == (
        ["          value: plain words"],
        ['          value: "key: value #1"'],
    )
    assert changed(DEPLOYMENT, edit([{**op, "value": "other words"}]))[1] == [
        "          value: other words"
    ]


def test_keys_are_added_at_their_siblings_indentation_and_removed_with_their_lines() -> None:
    add: dict[str, object] = {"op": "add", "path": "/spec/template/spec/containers/0/command"}
    add["value"] = ["vllm"]
    new = edit([add])
    assert changed(DEPLOYMENT, new) == ([], ["        command:", "        - vllm"])
    gone = edit([{"op": "remove", "path": ARGS}])
    removed, added = changed(DEPLOYMENT, gone)
    assert added == []
    assert removed[0] == "        args:"
    assert removed[-1] == '        - "3"'


def test_annotations_are_made_set_and_removed() -> None:
    state = '{"setup": "spec:3", "it\'s": 1}'
    new = edit([], {STATE: state})
    assert changed(DEPLOYMENT, new) == (
        [],
        ["  annotations:", """    spec-autotuner.io/state: '{"setup": "spec:3", "it''s": 1}'"""],
    )
    assert yaml.safe_load_all(new).__next__()["metadata"]["annotations"][STATE] == state
    again = edit_document(new, 0, [], {STATE: '{"setup": "plain"}'})
    assert changed(new, again)[1] == ["""    spec-autotuner.io/state: '{"setup": "plain"}'"""]
    emptied = edit_document(new, 0, [], {STATE: None})
    assert changed(new, emptied) == (
        ["  annotations:", """    spec-autotuner.io/state: '{"setup": "spec:3", "it''s": 1}'"""],
        ["  annotations: {}"],
    )


def test_a_flow_list_is_edited_within_its_brackets() -> None:
    text = 'kind: Pod\nmetadata: {name: p}\nspec:\n  args: &a ["a", "b"]  # kept\n'
    new = edit_document(text, 0, [{"op": "replace", "path": "/spec/args", "value": ["a", "x"]}])
    assert new == 'kind: Pod\nmetadata: {name: p}\nspec:\n  args: &a ["a", "x"]  # kept\n'


def test_a_literal_script_keeps_its_header_and_lines_and_changes_chomping_only_if_needed() -> None:
    text = "kind: Pod\nmetadata:\n  name: p\nscript: |-\n"
    text += "  set -e\n\n  vllm serve m \\\n    --port 1\n"
    op = {"op": "replace", "path": "/script", "value": "set -e\n\nvllm serve m \\\n  --port 2"}
    assert changed(text, edit_document(text, 0, [op])) == (["    --port 1"], ["    --port 2"])
    clipped = edit_document(text, 0, [{**op, "value": "set -e\n\nvllm serve m \\\n  --port 1\n"}])
    assert changed(text, clipped) == (["script: |-"], ["script: |"])


def test_an_anchor_shared_with_another_place_is_refused() -> None:
    text = "kind: Pod\nmetadata:\n  name: p\na: &args\n  - x\n  - y\nb: *args\n"
    with pytest.raises(TextEditError):
        edit_document(text, 0, [{"op": "replace", "path": "/a", "value": ["x"]}])


def test_a_change_that_does_not_fit_the_document_is_refused() -> None:
    with pytest.raises(TextEditError):
        edit([{"op": "replace", "path": "/spec/template/spec/containers/5/args", "value": []}])


@pytest.mark.parametrize(
    ("value", "plain"),
    [
        ("--model", True),
        ("8000", False),
        ("yes", False),
        ("0o17", False),
        ("a: b", False),
        ("-", False),
        ('{"a": 1}', False),
        ("Qwen/Qwen3-8B", True),
        ("x #y", False),
        ("", False),
    ],
)
def test_plain_words_are_those_every_reader_takes_for_the_same_string(
    value: str, plain: bool
) -> None:
    assert plain_ok(value) is plain


SCRIPT = """\
kind: LeaderWorkerSet
metadata: {name: vllm}
command:
  - sh
  - -c
  - "bash serve.sh leader --size=$(N);{TRAILING}
     python3 -m vllm.entrypoints.openai.api_server --port 8080 --tensor-parallel-size 8"
""".replace("{TRAILING}", " ")  # spaces before a line break inside quotes: not the value's
ENGINE = "python3 -m vllm.entrypoints.openai.api_server --port 8080 --tensor-parallel-size"


def test_a_quoted_string_over_several_lines_keeps_the_lines_whose_words_stay() -> None:
    op = {"op": "replace", "path": "/command/2", "value": "bash serve.sh leader --size=$(N); "}
    changed_line = edit_document(SCRIPT, 0, [{**op, "value": op["value"] + f"{ENGINE} 4"}])
    assert changed(SCRIPT, changed_line) == (
        [f'     {ENGINE} 8"'],
        [f'     {ENGINE} 4"'],
    )
    appended = edit_document(SCRIPT, 0, [{**op, "value": op["value"] + f"{ENGINE} 8 --x 1"}])
    assert changed(SCRIPT, appended) == ([f'     {ENGINE} 8"'], [f"     {ENGINE} 8", '     --x 1"'])
    back = edit_document(appended, 0, [{**op, "value": op["value"] + f"{ENGINE} 8"}])
    assert back == SCRIPT


@pytest.mark.parametrize(
    ("written", "made"),
    [
        ("annotations:", "annotations: {spec-autotuner.io/state: '1'}"),
        ("annotations: ~", "annotations: {spec-autotuner.io/state: '1'}"),
        ("annotations: {a: b, x: y}", "annotations: {a: b, spec-autotuner.io/state: '1'}"),
    ],
)
def test_annotations_written_as_null_or_a_flow_map_stay_one(written: str, made: str) -> None:
    text = f"kind: Deployment\nmetadata:\n  {written}\n  name: x\n"
    new = edit_document(text, 0, [], {STATE: "1", "x": None})
    assert new == f"kind: Deployment\nmetadata:\n  {made}\n  name: x\n"
    again = edit_document(new, 0, [], {STATE: "2"})
    assert changed(new, again) == ([f"  {made}"], ["  " + made.replace("'1'", "'2'")])


def test_keys_are_added_inside_a_flow_map() -> None:
    text = "kind: Deployment\nmetadata: {name: x}\nspec: {containers: [{name: a, args: [x]}]}\n"
    add = {"op": "add", "path": "/spec/containers/0/command", "value": ["vllm", "8000"]}
    new = edit_document(text, 0, [add], {STATE: '{"a": 1}'})
    assert new == (
        "kind: Deployment\n"
        """metadata: {name: x, annotations: {spec-autotuner.io/state: '{"a": 1}'}}\n"""
        """spec: {containers: [{name: a, args: [x], command: [vllm, "8000"]}]}\n"""
    )


def test_a_file_with_windows_line_ends_keeps_them() -> None:
    text = DEPLOYMENT.replace("\n", "\r\n")
    new = edit_document(text, 0, [{"op": "replace", "path": ARGS, "value": ["--model", "m"]}])
    assert new == edit([{"op": "replace", "path": ARGS, "value": ["--model", "m"]}]).replace(
        "\n", "\r\n"
    )
    assert new.count("\n") == new.count("\r\n") == DEPLOYMENT.count("\n") - 2


ENV = "/spec/template/spec/containers/0/env"


def test_an_env_var_is_appended_as_its_neighbours_are_written_and_removed_again() -> None:
    """VLLM_ADDITIONAL_ARGS given to a KServe container: a map item after the last env var,
    dash and keys where that one has them; removing it gives the text back."""
    entry = {"name": "VLLM_ADDITIONAL_ARGS", "value": "--use-replayssm --replayssm-buffer-len 16"}
    new = edit([{"op": "add", "path": f"{ENV}/-", "value": entry}])
    assert changed(DEPLOYMENT, new) == (
        [],
        [
            "        - name: VLLM_ADDITIONAL_ARGS",
            "          value: --use-replayssm --replayssm-buffer-len 16",
        ],
    )
    assert edit_document(new, 0, [{"op": "remove", "path": f"{ENV}/1"}]) == DEPLOYMENT


def test_an_env_list_is_made_with_its_map_item() -> None:
    entry = {"name": "VLLM_ADDITIONAL_ARGS", "value": "--use-replayssm"}
    gone = edit([{"op": "remove", "path": ENV}])
    new = edit_document(gone, 0, [{"op": "add", "path": ENV, "value": [entry]}])
    assert yaml.safe_load(new.split("---")[0])["spec"]["template"]["spec"]["containers"][0][
        "env"
    ] == [entry]
    _, added = changed(gone, new)
    assert added == [
        "        env:",
        "        - name: VLLM_ADDITIONAL_ARGS",
        "          value: --use-replayssm",
    ]


def test_the_only_item_of_a_list_is_not_removed_as_an_item() -> None:
    with pytest.raises(TextEditError):
        edit([{"op": "remove", "path": f"{ENV}/0"}])
