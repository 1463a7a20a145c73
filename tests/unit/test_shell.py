"""The engine's command in a shell script (engines/shell.py), read and edited on every `sh -c`
script of the published corpus and on the layouts fleets write: opaque expansions, continuations,
comments, multi-line quoted JSON; a write changes only the managed words and comes back byte for
byte."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from autotuner.core.types import Setup
from autotuner.engines import shell
from autotuner.engines.commandline import edit_container, engine_tokens
from autotuner.engines.sglang.dialect import SglangDialect
from autotuner.engines.vllm.dialect import VllmDialect
from autotuner.errors import ArgsError

CORPUS = Path(__file__).resolve().parents[1] / "corpus" / "published"
VLLM = VllmDialect()
MANAGED = VLLM.managed
REPLAY = ["--use-replayssm", "--replayssm-buffer-len", "16"]
SPEC = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}']


def _containers(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, dict):
        own = [node] if "command" in node or "args" in node else []
        return own + [c for v in node.values() for c in _containers(v)]
    if isinstance(node, list):
        return [c for v in node for c in _containers(v)]
    return []


def _published_scripts() -> list[tuple[str, str]]:
    """(file and container, script) of every `sh -c` script in the corpus that starts vLLM."""
    found = []
    for path in sorted(CORPUS.rglob("*.yaml")):
        try:
            documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
        except yaml.YAMLError:
            continue
        for container in (c for d in documents for c in _containers(d)):
            words = [str(w) for w in (container.get("command") or [])]
            words += [str(w) for w in (container.get("args") or [])]
            index = shell.script_index(words)
            if index is None or index >= len(words):
                continue
            script = shell.parse(words[index])
            if shell.engine_command(script, MANAGED, ("vllm",)) is not None:
                name = f"{path.relative_to(CORPUS)}:{container.get('name')}:{index}"
                found.append((name, words[index]))
    return found


SCRIPTS = _published_scripts()


def engine(text: str) -> tuple[shell.Script, shell.Command]:
    script = shell.parse(text)
    found = shell.engine_command(script, MANAGED, ("vllm",))
    assert found is not None
    return script, found


def bash_n(text: str) -> str:
    checked = subprocess.run(
        ["bash", "-n"], input=text, capture_output=True, text=True, timeout=10, check=False
    )
    return checked.stderr


def test_the_corpus_has_the_scripts_fleets_write() -> None:
    names = " ".join(name for name, _ in SCRIPTS)
    for file in ("wide-ep-decode", "wide-ep-prefill", "brixbench-dynamo", "pd-orchestrated"):
        assert file in names


@pytest.mark.parametrize(("name", "text"), SCRIPTS, ids=[n for n, _ in SCRIPTS])
def test_every_published_script_is_read_word_by_word(name: str, text: str) -> None:
    _, command = engine(text)
    for word in command.words:
        assert word.value.strip(), f"{name}: an empty or blank word {word}"
        assert word.value != "\\", f"{name}: a continuation read as a word"
        assert not word.value.startswith("#"), f"{name}: a comment read as a word"
        assert text[word.start : word.end].strip() == text[word.start : word.end]


@pytest.mark.parametrize(("name", "text"), SCRIPTS, ids=[n for n, _ in SCRIPTS])
@pytest.mark.parametrize("added", [REPLAY, SPEC], ids=["replay", "spec"])
def test_every_published_script_takes_flags_and_gives_them_back(
    name: str, text: str, added: list[str]
) -> None:
    script, command = engine(text)
    written = shell.rewrite(script, command, [*command.values, *added])
    assert bash_n(written) == "", name
    end = command.words[-1].end
    inserted = written[end : end + len(written) - len(text)]
    assert written == text[:end] + inserted + text[end:], "only the new words are inserted"
    assert "\n" not in inserted
    again, moved = engine(written)
    assert moved.values == [*command.values, *added]
    assert shell.rewrite(again, moved, command.values) == text


def test_a_wide_ep_script_reads_its_model_and_writes_before_the_trailing_comments() -> None:
    text = dict(SCRIPTS)["llm-d/wide-ep-decode.yaml:vllm:2"]
    script, command = engine(text)
    assert VLLM.served_model(command.values) == "deepseek-ai/DeepSeek-R1-0528"
    assert "$((LWS_GROUP_SIZE * DP_SIZE_LOCAL))" in command.values
    assert "${MAX_TOKENS}" in command.values
    kv = command.values[command.values.index("--kv_transfer_config") + 1]
    assert kv.startswith('{"kv_connector":"NixlConnector",\n')
    assert VLLM.live_args((), command.values).tensor_parallel_size is None  # $TP_SIZE
    written = shell.rewrite(script, command, [*command.values, *REPLAY])
    assert "--moe-backend deep_gemm --use-replayssm --replayssm-buffer-len 16\n" in written
    assert written.endswith("# --collect-detailed-traces all")


LINES = """\
set -e
# start the engine
exec vllm serve \\
  m \\
  --speculative-config '{"method": "mtp",
      "num_speculative_tokens": 3}' \\
  --port $PORT \\
  --max-num-seqs ${SEQS:-8}
  # --enable-foo
"""


def test_a_flag_on_a_line_of_its_own_goes_with_its_line() -> None:
    script, command = engine(LINES)
    assert VLLM.parse(command.values) == Setup(spec_tokens=3)
    plain = shell.rewrite(script, command, VLLM.render_args(command.values, Setup())[0])
    assert plain == LINES.replace(
        """  --speculative-config '{"method": "mtp",\n      "num_speculative_tokens": 3}' \\\n""",
        "",
    )
    assert bash_n(plain) == ""


def test_a_flag_on_the_last_line_goes_with_the_continuation_before_it() -> None:
    text = "vllm serve m \\\n  --port 1 \\\n  --use-replayssm\n"
    script, command = engine(text)
    assert shell.rewrite(script, command, ["vllm", "serve", "m", "--port", "1"]) == (
        "vllm serve m \\\n  --port 1\n"
    )


def test_a_flag_first_on_a_line_with_others_leaves_the_others_in_place() -> None:
    text = "vllm serve m \\\n  --use-replayssm --port 1 \\\n  --x\n"
    script, command = engine(text)
    new = ["vllm", "serve", "m", "--port", "1", "--x"]
    assert shell.rewrite(script, command, new) == "vllm serve m \\\n  --port 1 \\\n  --x\n"


def test_a_joined_json_value_keeps_its_form() -> None:
    text = 'exec vllm serve m --speculative-config=\'{"method": "mtp"}\' --port 1'
    script, command = engine(text)
    new = [*command.values]
    new[4] = '--speculative-config={"method": "mtp", "num_speculative_tokens": 2}'
    written = shell.rewrite(script, command, new)
    assert written == (
        'exec vllm serve m --speculative-config=\'{"method": "mtp", '
        '"num_speculative_tokens": 2}\' --port 1'
    )


def test_a_managed_value_the_shell_computes_is_refused_for_advice() -> None:
    script, command = engine('vllm serve m --speculative-config "$SPEC" --port 1')
    with pytest.raises(ArgsError, match=r"shell computes this value \(\$SPEC\)"):
        shell.rewrite(script, command, ["vllm", "serve", "m", "--port", "1"])


def test_a_managed_flag_hidden_in_a_variable_is_named() -> None:
    text = 'SPEC_ARGS="--speculative-config {}"\nexec vllm serve $SPEC_ARGS m --port 1\n'
    script, command = engine(text)
    said = shell.computed_flags(script, command, MANAGED)
    assert said is not None
    assert "--speculative-config" in said
    assert "$SPEC_ARGS" in said
    script, command = engine("X=--port\nexec vllm serve $X m\n")
    assert shell.computed_flags(script, command, MANAGED) is None


def test_the_engine_inside_a_command_substitution_is_named() -> None:
    script, command = engine('OUT="$(vllm serve m --port 1)"\n')
    assert command.substituted
    assert shell.computed_flags(script, command, MANAGED) is not None


def test_kubernetes_references_are_words_and_other_substitutions_are_refused() -> None:
    _, command = engine("ray.sh --size=$(LWS_GROUP_SIZE); vllm serve m --port $(PORT)")
    assert shell.substitution_refusal(command) is None
    assert command.values[-1] == "$(PORT)"
    _, command = engine("vllm serve $(cat /m) --port 1")
    assert shell.substitution_refusal(command) is not None


def test_characters_beyond_ascii_keep_their_place() -> None:
    text = "# démarrage — ünïcode\nvllm serve m --port 1 # fin\n"
    script, command = engine(text)
    written = shell.rewrite(script, command, [*command.values, *REPLAY])
    assert written == text.replace("--port 1", "--port 1 " + " ".join(REPLAY))


def test_a_script_that_is_not_shell_is_refused() -> None:
    with pytest.raises(ArgsError, match="does not parse"):
        shell.parse("vllm serve 'unterminated")


def test_engine_names() -> None:
    assert shell.names_engine(["python3", "-m", "dynamo.vllm"])
    assert shell.names_engine(["exec", "/usr/bin/vllm", "serve"])
    assert not shell.names_engine(["pip", "install", "vllm"])
    assert not shell.names_engine(["ray.sh", "vllm"])


def test_bash_with_clustered_options_runs_its_script() -> None:
    assert shell.script_index(["/bin/bash", "-exc", "s"]) == 2
    assert shell.script_index(["sh", "--command", "s"]) is None


def test_a_positional_model_is_read_across_command_and_args() -> None:
    command, args = ["vllm", "serve"], ["Qwen/Qwen3-32B", "--port", "8000"]
    tokens = engine_tokens(command, args, MANAGED)
    assert VLLM.served_model(tokens) == "Qwen/Qwen3-32B"
    new_command, new_args = edit_container(command, args, MANAGED, lambda w: [*w, *REPLAY])
    assert (new_command, new_args) == (command, [*args, *REPLAY])
    new_command, new_args = edit_container(
        [*command, "--use-replayssm"], args, MANAGED, lambda w: [*w[:2], *w[3:]]
    )
    assert (new_command, new_args) == (command, args)


def test_the_model_is_read_past_expanded_words_and_a_computed_one_is_unknown() -> None:
    text = dict(SCRIPTS)["llm-d/wide-ep-glm-5.2-dspark-decode.yaml:vllm:2"]
    _, command = engine(text)
    assert command.values[3] == "$PROFILER_ARGS"
    assert VLLM.served_model(command.values) == "zai-org/GLM-5.2-FP8"
    _, command = engine("python -m vllm.entrypoints.openai.api_server --model ${MODEL_ID}")
    assert VLLM.served_model(command.values) is None
    _, command = engine("vllm serve $MODEL --port 1")
    assert VLLM.served_model(command.values) is None
    assert SglangDialect().served_model(["--model-path", "$(MODEL)"]) is None


def test_a_kubernetes_reference_in_a_script_is_named_as_such_when_a_write_would_change_it() -> None:
    script, command = engine("vllm serve m --speculative-config=$(SPEC) --port 1")
    with pytest.raises(ArgsError, match=r"Kubernetes fills in \$\(SPEC\)"):
        shell.rewrite(script, command, ["vllm", "serve", "m", "--port", "1"])
