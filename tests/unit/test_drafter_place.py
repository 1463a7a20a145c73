"""Speculation turned off and on again puts the operator's drafter flag back where and as it
stood (issue 38, item 9): before the same word, `--flag=JSON` as one word, the operator's own
JSON text when the config is the one written."""

from __future__ import annotations

from autotuner.core.types import Setup
from autotuner.engines.drafter_place import DRAFTER, drafter_record, placed
from autotuner.engines.vllm.dialect import VllmDialect

VLLM = VllmDialect()
FLAG = "--speculative-config"
JOINED = f'{FLAG}={{"method": "eagle", "model": "d/eagle", "num_speculative_tokens": 3}}'


def off_and_on(args: list[str], back: Setup) -> tuple[list[str], list[str]]:
    """(args with speculation off, then back to `back`), the record carried between."""
    plain, record = VLLM.render_args(args, Setup())
    assert record is not None
    assert DRAFTER in record
    saved = VLLM.speculative_config([], args)
    restored, kept = VLLM.render_args(
        plain, back, saved_companions=record, saved_speculative_config=saved
    )
    assert kept is None or DRAFTER not in kept  # consumed by the way back
    return plain, restored


def test_a_joined_drafter_comes_back_byte_for_byte_where_it_stood() -> None:
    args = ["--model", "m", JOINED, "--port", "8000"]
    plain, restored = off_and_on(args, Setup(spec_tokens=3))
    assert FLAG not in " ".join(plain)
    assert restored == args


def test_another_k_keeps_the_place_and_the_form_with_the_new_value() -> None:
    value = '{"method": "eagle", "model": "d/eagle", "num_speculative_tokens": 3}'
    args = ["--model", "m", FLAG, value, "--port", "8000"]
    _, restored = off_and_on(args, Setup(spec_tokens=2))
    at = restored.index(FLAG)
    assert restored[:at] == ["--model", "m"]
    assert restored[at + 2 :] == ["--port", "8000"]
    assert '"num_speculative_tokens":2' in restored[at + 1].replace(" ", "")


def test_a_drafter_that_stood_last_comes_back_last() -> None:
    args = ["--model", "m", "--port", "8000", JOINED]
    _, restored = off_and_on(args, Setup(spec_tokens=3))
    assert restored == args


def test_the_record_and_the_move_are_pure() -> None:
    assert drafter_record(["--model", "m"], FLAG) is None
    record = drafter_record(["--x", FLAG, "{}", "--y"], FLAG)
    assert record == ["--y", FLAG, "{}"]
    written = ["--x", "--y", FLAG, '{"a":1}']
    assert placed(written, FLAG, ["--y", f"{FLAG}={{}}"]) == ["--x", f'{FLAG}={{"a":1}}', "--y"]
    # The word it stood before is gone: it goes last.
    assert placed(["--x", FLAG, "{}"], FLAG, ["--gone", FLAG, "{}"]) == ["--x", FLAG, "{}"]
