"""The fast exposition reader must agree with prometheus_client's parser."""

import math
from collections.abc import Collection

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from autotuner.errors import SourceError, UnusableReason
from autotuner.sources.promtext import parse
from autotuner.sources.vllm_metrics import wanted_names


def reference(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    result: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = tuple(sorted(sample.labels.items()))
            result.setdefault(sample.name, {})[key] = sample.value
    return result


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def assert_equal(ours: dict, theirs: dict, names: "Collection[str]") -> None:  # type: ignore[type-arg]
    for name in names:
        mine, ref = ours.get(name, {}), theirs.get(name, {})
        assert mine.keys() == ref.keys(), name
        assert all(same(mine[k], ref[k]) for k in ref), name


def test_equal_to_prometheus_client_on_the_real_capture(vllm_capture: str) -> None:
    theirs = reference(vllm_capture)
    every = set(theirs)
    assert_equal(parse(vllm_capture, every), theirs, every)
    assert_equal(parse(vllm_capture, wanted_names()), theirs, wanted_names() & every)


def test_only_wanted_names_are_kept(vllm_capture: str) -> None:
    ours = parse(vllm_capture, {"vllm:generation_tokens_total"})
    assert list(ours) == ["vllm:generation_tokens_total"]
    assert next(iter(ours["vllm:generation_tokens_total"].values())) == 1078.0


label_values = st.text(alphabet=st.sampled_from(list('ab}{,="\\\n x')), max_size=12)
values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.integers(-(10**12), 10**12).map(float),
)


def escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def fmt(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["vllm:a_total", "vllm:b", "c_bucket", "vllm:d_sum"]),
            st.dictionaries(
                st.sampled_from(["engine", "le", "model_name", "x_y"]), label_values, max_size=3
            ),
            values,
            st.booleans(),
        ),
        max_size=12,
    )
)
def test_equal_to_prometheus_client_on_generated_payloads(rows) -> None:  # type: ignore[no-untyped-def]
    seen = set()
    lines = []
    for name, labels, value, stamped in rows:
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            continue
        seen.add(key)
        inner = ",".join(f'{k}="{escape(v)}"' for k, v in labels.items())
        text = f"{name}{{{inner}}}" if labels else name
        lines.append(f"{text} {fmt(value)}" + (" 1700000000000" if stamped else ""))
    payload = "\n".join(lines) + "\n"
    theirs = reference(payload)
    names = {row[0] for row in rows}
    assert_equal(parse(payload, names), theirs, names)


@pytest.mark.parametrize(
    "line",
    ['vllm:x{engine="0" 1.0', "vllm:x", 'vllm:x{a="1"} one', "vllm:x{a=1} 2", "vllm:x 1 2 3"],
)
def test_malformed_lines_are_refused(line: str) -> None:
    with pytest.raises(SourceError) as info:
        parse(f"# HELP vllm:x x\n{line}\n", {"vllm:x"})
    assert info.value.reason is UnusableReason.MALFORMED


def test_families_we_do_not_read_are_not_validated() -> None:
    text = 'other_metric{a="1"} not-a-number\nvllm:x 3\nvllm:x_suffix 4\n'
    assert parse(text, {"vllm:x"}) == {"vllm:x": {(): 3.0}}


def test_duplicate_series_are_refused() -> None:
    text = 'vllm:x{engine="0"} 1\nvllm:x{engine="0"} 2\n'
    with pytest.raises(SourceError) as info:
        parse(text, {"vllm:x"})
    assert info.value.reason is UnusableReason.DUPLICATE_SERIES
