"""Engine command lines inside shell scripts, read and edited by their words' spans (pure).

Fleets start engines from `sh -c` scripts: comments, setup commands, `exec vllm serve \\` with
backslash-newline continuations, `$VAR`, `${VAR:-0}`, `$((A * B))`, multi-line quoted JSON.
Splitting such a script by hand (regexes, a home-made tokenizer) misreads it: a continuation
becomes a word, a `$` makes it unreadable. The script is parsed instead with tree-sitter and its
bash grammar (tree-sitter-bash): a maintained parser of the whole shell grammar (MIT licensed,
shipped as wheels, no subprocess) that keeps the byte range of every node, so a write replaces
the characters of the managed words alone and the rest of the script keeps its bytes. (bashlex,
the other Python parser of the grammar, is GPL-3; `bash -n` checks but gives no positions.)

A word the shell computes (an expansion) is opaque: its value is kept as written (`$TP_SIZE`)
and it is never rewritten; a write that would change one raises ArgsError for the caller to
advise instead.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

import tree_sitter_bash
from tree_sitter import Language, Node, Parser

from autotuner.errors import ArgsError

_PARSER = Parser(Language(tree_sitter_bash.language()))
SHELLS = frozenset({"sh", "bash", "dash"})
ENGINES = ("vllm", "sglang")
# What the shell computes inside a word; Kubernetes' own `$(VAR)` is filled in before the shell
# runs, so it reads as an opaque word too.
_COMPUTED = frozenset(
    {
        "simple_expansion",
        "expansion",
        "arithmetic_expansion",
        "command_substitution",
        "process_substitution",
    }
)
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_KUBE_REFERENCE = re.compile(r"\$\([A-Za-z_][A-Za-z0-9_]*\)")
_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")
_WRAPPERS = frozenset({"exec", "env", "nohup", "time"})


@dataclass(frozen=True)
class Word:
    """One word of a command: its value once the shell removed quotes and escapes (the parts
    the shell computes kept as written), and its characters in the script."""

    value: str
    start: int
    end: int
    computed: str | None = None  # the expansion the shell computes in it, as written


@dataclass(frozen=True)
class Command:
    """A simple command of the script: its name and arguments in order."""

    words: tuple[Word, ...]
    start: int
    end: int
    substituted: bool  # runs inside `$(...)` or backticks: its output is a value, not a server

    @property
    def values(self) -> list[str]:
        return [w.value for w in self.words]


@dataclass(frozen=True)
class Script:
    text: str
    commands: tuple[Command, ...]
    assignments: dict[str, tuple[str, ...]]  # a variable -> every text the script assigns it


def script_index(values: Sequence[str]) -> int | None:
    """Index of the script in a `sh -c SCRIPT` list (`-c` alone or among clustered options,
    as in `bash -exc`), if the list runs one."""
    for i in range(2, len(values)):
        option, shell = values[i - 1], values[i - 2].rsplit("/", 1)[-1]
        if shell in SHELLS and re.fullmatch(r"-[a-z]*c[a-z]*", option):
            return i
    return None


def parse(text: str) -> Script:
    """A script's commands and assignments; ArgsError if it is not shell syntax."""
    data = text.encode("utf-8")
    tree = _PARSER.parse(data)
    if tree.root_node.has_error:
        raise ArgsError("the shell script does not parse (an unterminated quote?): refused")
    at = _char_index(text, data)
    commands: list[Command] = []
    assignments: dict[str, list[str]] = {}
    for node, substituted in _walk(tree.root_node, False):
        if node.type == "command":
            commands.append(_command(node, substituted, at))
        elif node.type == "variable_assignment":
            name = node.child_by_field_name("name")
            value = node.child_by_field_name("value")
            if name is not None:
                assignments.setdefault(_text(name), []).append(_text(value) if value else "")
    return Script(text, tuple(commands), {k: tuple(v) for k, v in assignments.items()})


def plain_words(text: str) -> tuple[Word, ...]:
    """The words of a string that is one command of plain words and quotes (an env var's
    args); ArgsError for anything the shell would compute or run besides."""
    data = text.encode("utf-8")
    tree = _PARSER.parse(data)
    root = tree.root_node
    if root.has_error:
        raise ArgsError("the command line does not parse (an unterminated quote?): refused")
    parts = [c for c in root.named_children if c.type != "comment"]
    if not parts:
        return ()
    if len(parts) > 1 or parts[0].type != "command":
        raise ArgsError(
            f"the command line uses shell syntax ({parts[-1].type}): only a plain command line "
            "can be edited safely"
        )
    command = _command(parts[0], False, _char_index(text, data))
    for word in command.words:
        if word.computed is not None:
            raise ArgsError(f"shell substitution in the command line ({word.computed}): refused")
    return command.words


def _char_index(text: str, data: bytes) -> list[int]:
    """Byte offset -> character index (tree-sitter counts bytes, Python strings characters)."""
    if len(data) == len(text):
        return list(range(len(data) + 1))
    index = [0] * (len(data) + 1)
    offset = 0
    for i, char in enumerate(text):
        width = len(char.encode("utf-8"))
        for k in range(width):
            index[offset + k] = i
        offset += width
    index[len(data)] = len(text)
    return index


def _walk(node: Node, substituted: bool) -> Iterator[tuple[Node, bool]]:
    yield node, substituted
    inside = substituted or node.type in _SUBSTITUTIONS
    for child in node.children:
        yield from _walk(child, inside)


def _text(node: Node) -> str:
    return (node.text or b"").decode("utf-8")


def _command(node: Node, substituted: bool, at: list[int]) -> Command:
    # Its words: not the assignments before it (`A=1 vllm ...`) nor its redirections.
    parts = [
        c
        for c in node.named_children
        if c.type != "variable_assignment" and not c.type.endswith("redirect")
    ]
    words = []
    for part in parts:
        target = part.children[0] if part.type == "command_name" and part.children else part
        value, computed = _value(target)
        words.append(Word(value, at[target.start_byte], at[target.end_byte], computed))
    return Command(tuple(words), at[node.start_byte], at[node.end_byte], substituted)


def _value(node: Node) -> tuple[str, str | None]:
    """A word's value and the expansion it holds, if any (the first, as written)."""
    kind, text = node.type, _text(node)
    if kind in _COMPUTED:
        return text, text
    if kind == "raw_string":
        return text[1:-1], None
    if kind == "string":
        return _double_quoted(node)
    if kind == "concatenation":
        pieces = [_value(c) for c in node.children]
        computed = next((c for _, c in pieces if c is not None), None)
        return "".join(v for v, _ in pieces), computed
    if kind in ("word", "number"):
        return re.sub(r"\\(.)", r"\1", text.replace("\\\n", ""), flags=re.DOTALL), None
    return text, text if "$" in text or "`" in text else None


def _double_quoted(node: Node) -> tuple[str, str | None]:
    """`"..."`: escapes of `$`, backquote, `"`, `\\` and newline removed; expansions kept."""
    pieces: list[str] = []
    computed = None
    for child in node.children:
        if child.type == '"':
            continue
        text = _text(child)
        if child.type in _COMPUTED:
            computed = computed or text
            pieces.append(text)
        else:
            pieces.append(re.sub(r'\\([$`"\\])', r"\1", text.replace("\\\n", "")))
    return "".join(pieces), computed


# --------------------------------------------------------------------------- the engine's command


def names_engine(words: Sequence[str], engines: Sequence[str] = ENGINES) -> bool:
    """The command starts an engine: `vllm serve`, `/usr/bin/sglang`, `exec vllm ...`,
    `python3 -m vllm.entrypoints...`, Dynamo's `python3 -m dynamo.vllm` (not `pip install
    vllm`, nor a path that only mentions one)."""
    rest = list(words)
    while rest and rest[0] in _WRAPPERS:
        rest = rest[1:]
    if not rest:
        return False
    program = [rest[0].rsplit("/", 1)[-1]]
    if program[0].startswith("python") and len(rest) > 2 and rest[1] == "-m":
        program.append(rest[2].removeprefix("dynamo."))
    return any(p == e or p.startswith(e + ".") for p in program for e in engines)


def holds(words: Sequence[str], managed: Collection[str]) -> bool:
    return any(w.split("=", 1)[0] in managed for w in words)


def engine_command(
    script: Script, managed: Collection[str], engines: Sequence[str] = ENGINES
) -> Command | None:
    """The script's command that runs the engine: the one holding managed flags, else the last
    one that starts an engine; None if no command does."""
    holding = [c for c in script.commands if holds(c.values, managed)]
    if len(holding) > 1:
        raise ArgsError("managed flags in several commands of the shell script: refusing")
    named = holding or [c for c in script.commands if names_engine(c.values, engines)]
    return named[-1] if named else None


def computed_flags(script: Script, command: Command, managed: Collection[str]) -> str | None:
    """Why the shell, not the command's words, decides a managed flag: a variable expanded in
    the command whose assigned text names one (`SPEC_ARGS="--speculative-config ..."`), or the
    command's output taken as a value. None: the words say it all."""
    if command.substituted:
        return "the engine's command runs inside a command substitution $(...)"
    for word in command.words:
        for name in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", word.computed or ""):
            for text in script.assignments.get(name, ()):
                flags = [f for f in managed if re.search(rf"(?<![\w-]){re.escape(f)}\b", text)]
                flags += [f for f in managed if _underscored(f) in text and f not in flags]
                if flags:
                    shown = text if len(text) <= 60 else text[:57] + "..."
                    return f"the shell computes {sorted(flags)[0]} into ${name} ({name}={shown})"
    return None


def _underscored(flag: str) -> str:
    return "--" + flag.removeprefix("--").replace("-", "_")


def command_at(script: Script, start: int) -> Command:
    """The command that starts at this character (where a reading found the engine's)."""
    for command in script.commands:
        if command.start == start:
            return command
    raise ArgsError("the shell script changed since it was read: read it again")


def substitution_refusal(command: Command) -> str | None:
    """A command substitution among the engine's words (`vllm serve $(cat f)`): what runs is
    another program's output, which the tuner does not read. Kubernetes' `$(VAR)` is not one."""
    for word in command.words:
        computed = word.computed or ""
        if "$(" in computed.replace("$((", "") and not _KUBE_REFERENCE.fullmatch(computed):
            return f"shell syntax: the command substitution {computed} in the engine's command"
        if "`" in computed:
            return f"shell syntax: the command substitution {computed} in the engine's command"
    return None


# --------------------------------------------------------------------------- writing


def quote(value: str) -> str:
    """Single-quote a value for a shell unless it is a plain word."""
    if value and _PLAIN.fullmatch(value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def rewrite(script: Script, command: Command, new: Sequence[str], *, program: bool = True) -> str:
    """The script with the command's words made `new`: a changed word is rewritten in its own
    span (`--flag=VALUE` keeps its form), a removed word goes with the blank before it (a line
    that held only removed words goes whole, with the continuation before it), new words follow
    the word before them on its line. Every other character keeps its bytes. ArgsError if a
    word the shell computes would change, or the program (the first word, unless `program` is
    off: a list of args alone)."""
    words, old = command.words, command.values
    edits: list[tuple[int, int, str]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(a=old, b=list(new), autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if i1 == 0 and program:
            raise ArgsError("the engine's program itself would change: refusing")
        common = min(i2 - i1, j2 - j1)
        for k in range(common):
            edits.append(_replaced(words[i1 + k], new[j1 + k]))
        if i2 - i1 > common:
            edits.append(_removed(script.text, words, i1 + common, i2))
        if j2 - j1 > common:
            edits.append(_inserted(script.text, words, i1 + common, new[j1 + common : j2]))
    text = script.text
    for start, end, piece in sorted(edits, reverse=True):
        text = text[:start] + piece + text[end:]
    return text


def _inserted(
    text: str, words: Sequence[Word], before: int, values: Sequence[str]
) -> tuple[int, int, str]:
    """New words after the word before them, on its line (first of all: before the first)."""
    quoted = [quote(v) for v in values]
    if before > 0:
        at = words[before - 1].end
        return at, at, "".join(" " + q for q in quoted)
    at = words[0].start if words else len(text)
    return at, at, " ".join(quoted) + (" " if words else "")


def _replaced(word: Word, value: str) -> tuple[int, int, str]:
    _refuse_computed(word)
    name, joined, _ = word.value.partition("=")
    if joined and word.value.startswith("--") and value.startswith(name + "="):
        return word.start, word.end, name + "=" + quote(value[len(name) + 1 :])
    return word.start, word.end, quote(value)


def _removed(text: str, words: Sequence[Word], i1: int, i2: int) -> tuple[int, int, str]:
    """The characters that go with words[i1:i2]: the blank before them when a word precedes
    them on their line; up to the next word when they open a line it goes on; else the line
    they stand on, with the continuation before it."""
    for word in words[i1:i2]:
        _refuse_computed(word)
    first, last = words[i1], words[i2 - 1]
    after = words[i2] if i2 < len(words) else None
    if i1 > 0 and "\n" not in text[words[i1 - 1].end : first.start]:
        return words[i1 - 1].end, last.end, ""
    if after is not None and ("\n" not in text[last.end : after.start] or i1 == 0):
        return first.start, after.start, ""
    if i1 == 0:
        return first.start, last.end, ""
    return words[i1 - 1].end, last.end, ""


def _refuse_computed(word: Word) -> None:
    if word.computed is None:
        return
    reference = _KUBE_REFERENCE.search(word.computed)
    if reference is not None:
        raise ArgsError(
            f"{word.value}: Kubernetes fills in {reference.group(0)} from the container's env "
            "when the pod starts: set the value there"
        )
    raise ArgsError(
        f"{word.value}: the shell computes this value ({word.computed}): set it where the "
        "script assigns it"
    )
