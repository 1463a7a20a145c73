"""A YAML file's own text edited in place (pure): JSON patch operations and annotation edits
applied to one document of a (multi-document) file by rewriting only the spans of the nodes
that change.

Re-dumping a parsed file rewrites what it does not understand (comments between items, flow
maps, quoting, indentation, block scalars); a published file must come back from the tuner
changed only in the values it tunes. So nodes are found by the parser's positions and their
characters replaced: items kept keep their bytes, a scalar keeps its style, a block scalar keeps
its header and every line that did not change. Whatever is written is read back and compared
with the change applied to the parsed data; a text that does not read back as the change is
never returned (TextEditError), so the writer is safe whatever the file's shape.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

Op = Mapping[str, Any]
Pair = tuple[Node, Node]
STR = "tag:yaml.org,2002:str"
NULL = "tag:yaml.org,2002:null"
# Plain words another YAML reader (1.1 or 1.2) takes for a number, a boolean or null.
_NOT_TEXT = re.compile(
    r"[-+.]?\d|0[box]|[-+]?\.(inf|nan)$|(y|n|yes|no|on|off|true|false|null|~)$", re.IGNORECASE
)
_INDICATORS = "!&*{}[],#|>@`\"'%:?"
_HEADER = re.compile(r"([|>])([1-9]?)([-+]?)([1-9]?)")


class TextEditError(ValueError):
    """The change cannot be written into the file's text safely."""


@dataclass(frozen=True)
class _Edit:
    start: int
    end: int
    text: str


def edit_document(
    text: str,
    index: int,
    ops: Sequence[Op],
    annotations: Mapping[str, str | None] | None = None,
) -> str:
    """`text` with the JSON patch `ops` and the annotations (a value, or None: removed) of
    `metadata.annotations` applied to its document `index`, every other character kept.

    Values are written in the style of the node they replace; where that fails to read back
    as the change, they are written double-quoted; TextEditError when that fails too."""
    if "\r\n" in text and "\n" not in text.replace("\r\n", ""):  # Windows line ends
        return edit_document(text.replace("\r\n", "\n"), index, ops, annotations).replace(
            "\n", "\r\n"
        )
    annotations = annotations or {}
    try:
        roots = list(yaml.compose_all(text, Loader=yaml.SafeLoader))
        old = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise TextEditError(f"not valid YAML ({exc})") from None
    if not 0 <= index < len(roots) or not isinstance(roots[index], MappingNode):
        raise TextEditError(f"document {index} of the file is not a mapping")
    expected = _patched(old, index, ops, annotations)
    failure = "the edited text does not read back as the change"
    for double in (False, True):
        try:
            new = _Writer(text, roots[index], double=double).edit(ops, annotations)
        except TextEditError as exc:
            failure = str(exc)
            continue
        if _reads_as(new, expected):
            return new
        failure = "the edited text does not read back as the change"
    raise TextEditError(failure)


# ------------------------------------------------------------------ the check


def _parts(path: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def _patched(
    old: list[Any], index: int, ops: Sequence[Op], annotations: Mapping[str, str | None]
) -> list[Any]:
    """The parsed documents with the change applied to plain data: what the text must read."""
    documents = copy.deepcopy(old)
    document = documents[index]
    try:
        for op in ops:
            parts = _parts(str(op["path"]))
            parent: Any = document
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            if isinstance(parent, list) and parts[-1] == "-" and op["op"] == "add":
                parent.append(copy.deepcopy(op["value"]))
                continue
            key: Any = int(parts[-1]) if isinstance(parent, list) else parts[-1]
            if op["op"] == "remove":
                del parent[key]
            else:
                parent[key] = copy.deepcopy(op["value"])
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise TextEditError(f"the change does not fit the document ({exc!r})") from None
    metadata = document.get("metadata")
    for key, value in annotations.items():
        held = metadata.get("annotations") if isinstance(metadata, dict) else None
        if value is None:
            if isinstance(held, dict):
                held.pop(key, None)
        elif isinstance(metadata, dict):
            metadata["annotations"] = {**(held or {}), key: value}
    return documents


def _reads_as(text: str, expected: list[Any]) -> bool:
    try:
        documents = list(yaml.safe_load_all(text))
    except yaml.YAMLError:
        return False
    return _same(documents, expected)


def _same(actual: Any, expected: Any) -> bool:
    """Equal, a number or boolean the file kept as it was standing for its text (the change
    carries every item of a list it writes as a string)."""
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_same(actual[k], v) for k, v in expected.items())
        )
    if isinstance(expected, list):
        return (
            isinstance(actual, list)
            and len(actual) == len(expected)
            and all(_same(a, e) for a, e in zip(actual, expected, strict=True))
        )
    if isinstance(expected, str) and isinstance(actual, int | float):
        return str(actual) == expected
    return type(actual) is type(expected) and bool(actual == expected)


# ------------------------------------------------------------------ scalars written


def plain_ok(value: str, flow: bool = False) -> bool:
    """`value` reads back as the same string written plain (by YAML 1.1 and 1.2 readers)."""
    if not value or value != value.strip() or not value.isprintable():
        return False
    if value[0] in _INDICATORS or value.startswith(("- ", "---", "...")) or value == "-":
        return False
    if ": " in value or " #" in value or value.endswith(":") or _NOT_TEXT.match(value):
        return False
    if flow and any(c in value for c in ",[]{}"):
        return False
    try:
        return bool(yaml.safe_load(value) == value)
    except yaml.YAMLError:
        return False


def single_quoted(value: str) -> str | None:
    """'value', or None where single quotes cannot hold it on one line."""
    if not value.isprintable():
        return None
    return "'" + value.replace("'", "''") + "'"


def double_quoted(value: str) -> str:
    """Double-quoted: JSON's escapes are YAML's; non-printable characters escaped."""
    return json.dumps(value, ensure_ascii=not value.isprintable())


def _styled(value: str, style: str | None, flow: bool) -> str:
    """`value` in a scalar's style (plain, ' or "), double quotes where that cannot hold it."""
    if style == "'":
        return single_quoted(value) or double_quoted(value)
    if style is None and plain_ok(value, flow):
        return value
    return double_quoted(value)


def _new_item(value: str, quote: str | None, flow: bool) -> str:
    """A new item: in its siblings' quotes where they all quote, else plain when it can be,
    else in the quotes its quoted siblings use most (single ones for a value holding double
    quotes, JSON, where they use none or double)."""
    if quote == "all'":
        return single_quoted(value) or double_quoted(value)
    if quote == 'all"':
        return double_quoted(value)
    if plain_ok(value, flow):
        return value
    if quote != "'" and '"' not in value:
        return double_quoted(value)
    return single_quoted(value) or double_quoted(value)


def _quotes(items: Sequence[Node]) -> str | None:
    """How a sequence's scalar items quote: all' or all" when every one does alike, else the
    quote most of its quoted items use (None: none quotes)."""
    styles = [i.style for i in items if isinstance(i, ScalarNode)]
    quoted = Counter(s for s in styles if s in ("'", '"'))
    if not quoted:
        return None
    quote = quoted.most_common(1)[0][0]
    return f"all{quote}" if quoted[quote] == len(styles) else quote


def _key(name: str) -> str:
    """A map key as written: plain where it can be."""
    return name if plain_ok(name) else double_quoted(name)


def _flow(value: Any) -> str:
    """A new value in flow style: strings plain where they can be, else quoted (single
    quotes for JSON)."""
    if isinstance(value, str):
        return _new_item(value, None, True)
    if isinstance(value, list):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_flow(k)}: {_flow(v)}" for k, v in value.items()) + "}"
    raise TextEditError(f"cannot write {value!r}")


def _constructed(node: Node) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _keys(items: Sequence[Node], values: Sequence[str]) -> tuple[list[Any], list[str]]:
    """What the item diff compares: an item's text, a new value that is how a reader printed
    a kept number or boolean taken as that item's text."""
    old: list[Any] = [i.value if isinstance(i, ScalarNode) else ("", id(i)) for i in items]
    printed = {
        str(_constructed(i)): i.value
        for i in items
        if isinstance(i, ScalarNode) and i.tag not in (STR, NULL)
    }
    return old, [v if v in old else printed.get(v, v) for v in values]


# ------------------------------------------------------------------ the writer


def _pair(mapping: Node, name: str) -> Pair | None:
    if not isinstance(mapping, MappingNode):
        return None
    for key, value in mapping.value:
        if isinstance(key, ScalarNode) and key.value == name:
            return key, value
    return None


def _pairs(node: Node) -> list[Pair]:
    """Every key and value of the maps in a tree, outermost first."""
    found: list[Pair] = []
    stack = [node]
    while stack:
        node = stack.pop(0)
        if isinstance(node, MappingNode):
            found += node.value
            stack += [value for _, value in node.value]
        elif isinstance(node, SequenceNode):
            stack += node.value
    return found


def _is_null(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == NULL


class _Writer:
    """The edits of one change on one document, stitched into the text at the end."""

    def __init__(self, text: str, root: Node, *, double: bool) -> None:
        self.text = text
        self.root = root
        self.double = double
        self.edits: list[_Edit] = []

    def edit(self, ops: Sequence[Op], annotations: Mapping[str, str | None]) -> str:
        for op in ops:
            self._op(op)
        self._annotate(annotations)
        return self._stitched()

    def _stitched(self) -> str:
        out: list[str] = []
        at = 0
        for edit in sorted(self.edits, key=lambda e: (e.start, e.end)):
            if edit.start < at:
                raise TextEditError("two edits of the same text")
            out += [self.text[at : edit.start], edit.text]
            at = edit.end
        return "".join([*out, self.text[at:]])

    # -------------------------------------------------------------- positions

    def _content_end(self, node: Node) -> int:
        """Where a node's own characters end (a block collection's end mark lies at the next
        token, past blank lines and comments that are not its)."""
        if isinstance(node, ScalarNode):
            start, end = node.start_mark.index, node.end_mark.index
            if node.style in ("|", ">"):
                return start + len(self.text[start:end].rstrip())
            return end
        if isinstance(node, SequenceNode | MappingNode) and not node.flow_style and node.value:
            last = node.value[-1]
            return self._content_end(last[1] if isinstance(node, MappingNode) else last)
        return int(node.end_mark.index)

    def _line_after(self, index: int) -> int:
        newline = self.text.find("\n", index)
        return len(self.text) if newline < 0 else newline + 1

    def _line_of(self, index: int, what: str) -> int:
        """The start of the line `index` is first on (indentation aside)."""
        line = self.text.rfind("\n", 0, index) + 1
        if self.text[line:index].strip():
            raise TextEditError(f"{what} that does not start its line")
        return line

    def _dash(self, item: Node) -> int:
        """The `-` of a block sequence's item."""
        at = item.start_mark.index - 1
        while at >= 0 and self.text[at] == " ":
            at -= 1
        if at < 0 or self.text[at] != "-":
            raise TextEditError("an item apart from its dash")
        return at

    def _insert(self, at: int, lines: str) -> None:
        """Whole lines inserted at a line start (after a last line that has no newline)."""
        if at and self.text[at - 1] != "\n":
            lines = "\n" + lines.removesuffix("\n")
        self.edits.append(_Edit(at, at, lines))

    def _style(self) -> tuple[int, int]:
        """The document's indentation: a nested map's step (2 where none nests), and how far
        a list's dashes sit right of its key (0, flush, where no list is a key's)."""
        steps: list[int] = []
        offsets: list[int] = []
        for key, value in _pairs(self.root):
            if not isinstance(value, MappingNode | SequenceNode) or value.flow_style:
                continue
            if not value.value:
                continue
            if isinstance(value, MappingNode):
                steps.append(value.value[0][0].start_mark.column - key.start_mark.column)
            elif isinstance(value, SequenceNode):
                dash = self._dash(value.value[0])
                line = self.text.rfind("\n", 0, dash) + 1
                offsets.append(dash - line - key.start_mark.column)
        step = next((s for s in steps if s > 0), 2)
        return step, next((o for o in offsets if o >= 0), 0)

    # -------------------------------------------------------------- operations

    def _op(self, op: Op) -> None:
        parts = _parts(str(op["path"]))
        parent = self.root
        for part in parts[:-1]:
            parent = self._child(parent, part)
        kind, value = op["op"], op.get("value")
        if isinstance(parent, SequenceNode):
            self._item_op(parent, kind, parts[-1], value, str(op["path"]))
            return
        if not isinstance(parent, MappingNode):
            raise TextEditError(f"{op['path']}: not inside a map")
        pair = _pair(parent, parts[-1])
        if kind == "remove" and pair is not None:
            self._remove_key(parent, pair)
        elif kind in ("add", "replace") and pair is None:
            self._add_key(parent, parts[-1], value)
        elif kind in ("add", "replace") and pair is not None:
            self._replace(parent, pair, value)
        else:
            raise TextEditError(f"{op['path']}: cannot {kind}")

    def _item_op(self, parent: SequenceNode, kind: str, part: str, value: Any, path: str) -> None:
        """A list item's text replaced, an item removed, or a map appended (an env var)."""
        if kind == "replace" and isinstance(value, str):
            self._scalar(self._child(parent, part), value, flow=bool(parent.flow_style))
        elif kind == "remove" and not parent.flow_style and len(parent.value) > 1:
            item = self._child(parent, part)
            line = self._line_of(self._dash(item), "an item")
            self.edits.append(_Edit(line, self._line_after(self._content_end(item)), ""))
        elif kind == "add" and part == "-" and isinstance(value, dict) and value:
            if parent.flow_style or not parent.value:
                raise TextEditError(f"{path}: a map appended to a flow or empty list")
            self._append_map(parent.value, value)
        else:
            raise TextEditError(f"{path}: cannot {kind} that list item here")

    def _append_map(self, items: Sequence[Node], value: Mapping[str, Any]) -> None:
        """A map item after the last, its dash and keys where the last item has them."""
        last = items[-1]
        line = self._line_of(self._dash(last), "an item")
        prefix = self.text[line : last.start_mark.index]
        pad = " " * len(prefix)
        lines = [
            f"{prefix if i == 0 else pad}{_key(str(k))}: {_new_item(str(v), None, False)}\n"
            for i, (k, v) in enumerate(value.items())
        ]
        self._insert(self._line_after(self._content_end(last)), "".join(lines))

    def _child(self, node: Node, part: str) -> Node:
        if isinstance(node, MappingNode):
            pair = _pair(node, part)
            if pair is not None:
                return pair[1]
        elif isinstance(node, SequenceNode) and part.isdigit() and int(part) < len(node.value):
            child: Node = node.value[int(part)]
            return child
        raise TextEditError(f"no {part!r} where the change goes")

    def _replace(self, mapping: MappingNode, pair: Pair, value: Any) -> None:
        key, node = pair
        if isinstance(value, list) and isinstance(node, SequenceNode):
            self._sequence(node, [str(v) for v in value])
        elif isinstance(value, list) and _is_null(node):
            self._remove_key(mapping, pair)
            self._add_key(mapping, str(key.value), value)
        elif isinstance(value, str) and isinstance(node, ScalarNode):
            self._scalar(node, value, flow=bool(mapping.flow_style))
        else:
            raise TextEditError(f"{key.value}: cannot write a {type(value).__name__} there")

    def _scalar(self, node: Node, value: str, *, flow: bool) -> None:
        """One scalar rewritten in its own style."""
        if not isinstance(node, ScalarNode):
            raise TextEditError("a list or map where a string is written")
        if node.tag == STR and node.value == value:
            return
        start, end = node.start_mark.index, node.end_mark.index
        if node.style in ("|", ">"):
            edits = None if self.double else self._block_scalar(node, value)
            if edits is not None:
                self.edits += edits
                return
            end = self._content_end(node)
        elif "\n" in self.text[start:end] and not self.double:
            edit = self._lines(node, value)
            if edit is not None:
                self.edits.append(edit)
                return
        style = '"' if self.double or node.style in ("|", ">", '"') else node.style
        self.edits.append(_Edit(start, end, _styled(value, style, flow)))

    def _remove_key(self, mapping: MappingNode, pair: Pair) -> None:
        key, value = pair
        if mapping.flow_style or len(mapping.value) < 2:
            raise TextEditError(f"{key.value}: the only key of its map, or in a flow map")
        line = self._line_of(key.start_mark.index, f"{key.value}: a key")
        self.edits.append(_Edit(line, self._line_after(self._content_end(value)), ""))

    def _add_key(self, mapping: MappingNode, name: str, value: Any) -> None:
        """A key added after the map's last, at its keys' indentation (inside the braces of
        a flow map)."""
        if mapping.flow_style:
            end = mapping.end_mark.index - 1
            if self.text[end] != "}":
                raise TextEditError(f"{name}: a flow map without its closing brace")
            comma = ", " if mapping.value else ""
            self.edits.append(_Edit(end, end, f"{comma}{_flow(name)}: {_flow(value)}"))
            return
        if not mapping.value:
            raise TextEditError(f"{name}: cannot add a key to an empty map")
        column = mapping.value[0][0].start_mark.column
        self._insert(
            self._line_after(self._content_end(mapping.value[-1][1])),
            self._block(name, value, column),
        )

    def _block(self, name: str, value: Any, column: int) -> str:
        """`name: value` as block lines at `column`."""
        pad = " " * column
        key = _key(name)
        if isinstance(value, str):
            return f"{pad}{key}: {_new_item(value, None, False)}\n"
        step, offset = self._style()
        if isinstance(value, list) and value:
            dash = " " * (column + offset)
            items = "".join(self._list_item(dash, v) for v in value)
            return f"{pad}{key}:\n{items}"
        if isinstance(value, dict) and value:
            inner = "".join(self._block(str(k), v, column + step) for k, v in value.items())
            return f"{pad}{key}:\n{inner}"
        raise TextEditError(f"{name}: cannot write {value!r} as a new key")

    def _list_item(self, dash: str, value: Any) -> str:
        """One new block list item: a string, or a map of strings (an env var)."""
        if not isinstance(value, dict):
            return f"{dash}- {_new_item(str(value), None, False)}\n"
        if not value:
            raise TextEditError("cannot write an empty map as a list item")
        pad = dash + "  "
        return "".join(
            f"{dash + '- ' if i == 0 else pad}{_key(str(k))}: {_new_item(str(v), None, False)}\n"
            for i, (k, v) in enumerate(value.items())
        )

    # -------------------------------------------------------------- lists

    def _sequence(self, node: SequenceNode, values: list[str]) -> None:
        """A list made equal to `values` item by item: kept items keep their bytes and the
        comments between them."""
        if node.flow_style or not node.value:
            self._flow_sequence(node, values)
            return
        items = node.value
        old, new = _keys(items, values)
        matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                continue
            paired = min(i2 - i1, j2 - j1)
            for k in range(paired):
                self._scalar(items[i1 + k], values[j1 + k], flow=False)
            for item in items[i1 + paired : i2]:
                line = self._line_of(self._dash(item), "an item")
                self.edits.append(_Edit(line, self._line_after(self._content_end(item)), ""))
            if j1 + paired < j2:
                self._insert_items(items, i1 + paired - 1, values[j1 + paired : j2])

    def _insert_items(self, items: Sequence[Node], after: int, values: Sequence[str]) -> None:
        """New items after item `after` (-1: before the first), written like their neighbour."""
        neighbour = items[max(after, 0)]
        line = self._line_of(self._dash(neighbour), "an item")
        prefix = self.text[line : neighbour.start_mark.index]
        at = self._line_after(self._content_end(items[after])) if after >= 0 else line
        quote = _quotes(items)
        self._insert(at, "".join(f"{prefix}{_new_item(v, quote, False)}\n" for v in values))

    def _flow_sequence(self, node: SequenceNode, values: list[str]) -> None:
        """`[a, b]` edited within its brackets, kept items and separators as they were."""
        start, end = self.text.find("[", node.start_mark.index), node.end_mark.index
        items = node.value
        spans = [(i.start_mark.index, i.end_mark.index) for i in items]
        between = [self.text[a:b] for (_, a), (b, _) in itertools.pairwise(spans)]
        if not 0 <= start < end or self.text[end - 1] != "]" or "#" in "".join(between):
            raise TextEditError("a list written neither as a block nor as [ ... ] on its own")
        lead = self.text[start + 1 : spans[0][0]] if spans else ""
        trail = self.text[spans[-1][1] : end - 1] if spans else ""
        separator = between[0] if between else ", "
        if "#" in lead + trail:
            raise TextEditError("a comment inside [ ... ]")
        old, new = _keys(items, values)
        pieces: list[str] = []
        quote = _quotes(items)
        matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal":
                pieces += [self.text[a:b] for a, b in spans[i1:i2]]
                continue
            for k, value in enumerate(values[j1:j2]):
                item = items[i1 + k] if i1 + k < i2 else None
                if isinstance(item, ScalarNode):
                    style = '"' if self.double else item.style
                    pieces.append(_styled(value, style, True))
                else:
                    pieces.append(_new_item(value, '"' if self.double else quote, True))
        inner = lead + separator.join(pieces) + trail if pieces else ""
        self.edits.append(_Edit(start, end, f"[{inner}]"))

    # -------------------------------------------------------------- block scalars

    def _block_scalar(self, node: ScalarNode, value: str) -> list[_Edit] | None:
        """A `|` or `>` scalar rewritten with its own header and indentation, each line that
        did not change kept byte for byte; None where the value cannot be written so."""
        start = node.start_mark.index
        header_end = self.text.find("\n", start)
        match = _HEADER.match(self.text, start)
        if match is None or header_end < 0 or header_end >= node.end_mark.index:
            return None
        if not all(c.isprintable() or c in "\n\t" for c in value):
            return None
        old_body, old_trail = _body(node.value)
        new_body, new_trail = _body(value)
        old_chomp = match.group(3)
        chomp = old_chomp if new_trail == old_trail else {0: "-", 1: ""}.get(new_trail, "+")
        if chomp != old_chomp and "+" in (old_chomp, chomp):
            return None
        body_start = header_end + 1
        body_end = self.text.find("\n", self._content_end(node))
        body_end = len(self.text) if body_end < 0 else body_end
        if body_end < body_start:
            return None
        text_lines = self.text[body_start:body_end].split("\n")
        if match.group(1) == "|":
            lines = _literal(old_body, text_lines, new_body)
        else:
            lines = _folded(old_body, text_lines, new_body)
        if lines is None:
            return None
        edits = [_Edit(body_start, body_end, "\n".join(lines))]
        if chomp != old_chomp:
            digit = match.group(2) or match.group(4)
            edits.append(_Edit(start, match.end(), f"{match.group(1)}{digit}{chomp}"))
        return edits

    def _lines(self, node: ScalarNode, value: str) -> _Edit | None:
        """A plain or quoted scalar over several lines rewritten keeping the lines whose words
        stay (its line breaks fold into spaces); None where escapes, quotes or blank lines
        inside it (or the new value) would need more than that."""
        start, end = node.start_mark.index, node.end_mark.index
        quote = self.text[start] if node.style in ("'", '"') else ""
        lines = self.text[start + len(quote) : end - len(quote)].split("\n")
        special = {'"': '"\\', "'": "'"}.get(quote, "#")
        if any(c in special for c in "".join(lines) + value) or not value.isprintable():
            return None
        if not quote and not plain_ok(value):
            return None
        pieces = [lines[0].rstrip(" \t"), *(s.strip(" \t") for s in lines[1:-1])]
        pieces.append(lines[-1].lstrip(" \t"))
        if not all(pieces) or " ".join(pieces) != node.value:
            return None
        margin = lines[1][: len(lines[1]) - len(lines[1].lstrip(" \t"))]
        parts = _refold(pieces, lines, value)
        out: list[str] = []
        for i, (k, text) in enumerate(parts):
            if k is None or k == 0:  # a line that now follows another: indented
                text = text if i == 0 else margin + text
            elif i == 0:  # spaces after the opening quote would be the value's
                text = text.lstrip(" \t")
            if i == len(parts) - 1 and k not in (None, len(lines) - 1):
                text = text.rstrip(" \t")  # spaces before the closing quote would be too
            out.append(text)
        return _Edit(start + len(quote), end - len(quote), "\n".join(out))

    # -------------------------------------------------------------- annotations

    def _annotate(self, annotations: Mapping[str, str | None]) -> None:
        """The tuner's records set in (or removed from) metadata.annotations."""
        sets = {k: v for k, v in annotations.items() if v is not None}
        metadata = _pair(self.root, "metadata")
        if metadata is None or not isinstance(metadata[1], MappingNode):
            if sets:
                raise TextEditError("a workload without a metadata map")
            return
        pair = _pair(metadata[1], "annotations")
        if pair is None:
            if sets:
                self._add_key(metadata[1], "annotations", sets)
            return
        held = pair[1]
        if isinstance(held, MappingNode) and not held.flow_style and held.value:
            self._block_annotations(pair, annotations)
        elif isinstance(held, MappingNode) or _is_null(held):
            self._flow_annotations(held, annotations)
        elif sets:
            raise TextEditError("annotations: neither a map nor null")

    def _block_annotations(self, pair: Pair, annotations: Mapping[str, str | None]) -> None:
        key, held = pair
        assert isinstance(held, MappingNode)
        left = len(held.value)
        added: dict[str, str] = {}
        for name, value in annotations.items():
            entry = _pair(held, name)
            if entry is None:
                if value is not None:
                    added[name] = value
            elif value is None:
                left -= 1
                line = self._line_of(entry[0].start_mark.index, "an annotation")
                end = self._line_after(self._content_end(entry[1]))
                self.edits.append(_Edit(line, end, ""))
            else:
                self._scalar(entry[1], value, flow=False)
        if added:
            column = held.value[0][0].start_mark.column
            lines = "".join(
                f"{' ' * column}{self._annotation(k, v, False)}\n" for k, v in added.items()
            )
            self._insert(self._line_after(self._content_end(held.value[-1][1])), lines)
        elif not left:  # every annotation gone: an empty map, not null
            colon = self.text.index(":", key.end_mark.index)
            self.edits.append(_Edit(colon + 1, colon + 1, " {}"))

    def _flow_annotations(self, held: Node, annotations: Mapping[str, str | None]) -> None:
        """`annotations: {...}` (or null) written as a flow map holding the records: the
        other entries as they were written."""
        start, end = held.start_mark.index, held.end_mark.index
        if "#" in self.text[start:end] and isinstance(held, MappingNode):
            raise TextEditError("a comment inside the annotations' { ... }")
        entries: list[str] = []
        for key, value in held.value if isinstance(held, MappingNode) else []:
            written = self.text[key.start_mark.index : value.end_mark.index]
            if key.value not in annotations:
                entries.append(written)
            elif annotations[key.value] is not None:
                entries.append(self._annotation(key.value, str(annotations[key.value]), True))
        done = {k.value for k, _ in held.value} if isinstance(held, MappingNode) else set()
        entries += [
            self._annotation(k, v, True)
            for k, v in annotations.items()
            if v is not None and k not in done
        ]
        space = " " if start == end else ""  # `annotations:` with nothing after the colon
        self.edits.append(_Edit(start, end, space + "{" + ", ".join(entries) + "}"))

    def _annotation(self, name: str, value: str, flow: bool) -> str:
        """`name: 'value'` (the records are JSON: single quotes keep them readable)."""
        key = name if plain_ok(name, flow) else double_quoted(name)
        written = None if self.double else single_quoted(value)
        return f"{key}: {written or double_quoted(value)}"


def _body(value: str) -> tuple[str, int]:
    """A block scalar's value as its lines' text and its count of final line breaks."""
    body = value.rstrip("\n")
    return body, len(value) - len(body)


def _indent(old_lines: Sequence[str], text_lines: Sequence[str]) -> int | None:
    """A literal block's indentation, None where its text lines are not its value's lines."""
    if len(old_lines) != len(text_lines):
        return None
    sizes = {len(t) - len(v) for v, t in zip(old_lines, text_lines, strict=True) if v}
    if len(sizes) != 1 or min(sizes) <= 0:
        return None
    indent = sizes.pop()
    for value, text in zip(old_lines, text_lines, strict=True):
        if value and (text[indent:] != value or text[:indent].strip()):
            return None
        if not value and (text.strip() or len(text) > indent):
            return None
    return indent


def _literal(old_body: str, text_lines: Sequence[str], body: str) -> list[str] | None:
    """A literal block's new lines: the lines that stay as they were written."""
    old_lines = old_body.split("\n")
    indent = _indent(old_lines, text_lines)
    lines = body.split("\n")
    first = next((line for line in lines if line), "")
    if indent is None or first[:1] in (" ", "\t"):
        return None  # the indentation would be read from the first line
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=lines, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += text_lines[i1:i2]
        else:
            out += [" " * indent + line if line else "" for line in lines[j1:j2]]
    return out


def _folded(old_body: str, text_lines: Sequence[str], body: str) -> list[str] | None:
    """A folded block's new lines (_refold). Only a block of plain lines folded into one line
    of words is written so."""
    indent = len(text_lines[0]) - len(text_lines[0].lstrip(" "))
    old_lines = [t[indent:] for t in text_lines]
    if any(t[:indent].strip() or t[indent : indent + 1] in ("", " ", "\t") for t in text_lines):
        return None
    if " ".join(old_lines) != old_body or "\n" in body or not indent:
        return None
    out = [
        t if k is not None else " " * indent + t for k, t in _refold(old_lines, text_lines, body)
    ]
    if any(not line.strip() or line[indent : indent + 1] in (" ", "\t") for line in out):
        return None
    return out


def _refold(
    pieces: Sequence[str], text_lines: Sequence[str], body: str
) -> list[tuple[int | None, str]]:
    """The lines of a value whose line breaks fold into spaces: each old line whose words all
    stay is kept as written (its index, its text); new words go on lines of their own (None,
    the words), one flag (a word starting with `-`) a line."""
    words, owner = [], []
    for n, line in enumerate(pieces):
        for word in line.split(" "):
            words.append(word)
            owner.append(n)
    first = {n: owner.index(n) for n in range(len(pieces))}
    size = Counter(owner)
    new = body.split(" ")
    kept: dict[int, int] = {}
    matcher = difflib.SequenceMatcher(a=words, b=new, autojunk=False)
    for a, b, length in matcher.get_matching_blocks():
        for n, at in first.items():
            if a <= at and at + size[n] <= a + length:
                kept[b + at - a] = n
    out: list[tuple[int | None, str]] = []
    fresh: list[str] = []
    last = -1  # the old line kept last

    def flush(following: int) -> None:
        """The new words since the last kept line: one line where they take the place of one
        old line, else a line per flag."""
        lines: list[list[str]] = []
        for word in fresh:
            if not lines or (word.startswith("-") and following - last != 2):
                lines.append([])
            lines[-1].append(word)
        out.extend((None, " ".join(line)) for line in lines)
        fresh.clear()

    j = 0
    while j < len(new):
        if j in kept:
            flush(kept[j])
            last = kept[j]
            out.append((last, text_lines[last]))
            j += size[last]
            continue
        fresh.append(new[j])
        j += 1
    flush(len(pieces))
    return out
