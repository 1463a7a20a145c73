"""The prompts' prefill against a published prefill-heavy throughput table
(benchmarks/prefill_table.py: NVIDIA's Llama 3.3 70B / B200 FP4 max-throughput table)."""

from __future__ import annotations

from benchmarks.prefill_table import points


def test_prefill_heavy_points_are_predicted_only_with_the_prefill() -> None:
    found = {(p.prompt, p.output): p for p in points()}
    heavy = [found[(2048, 128)], found[(5000, 500)], found[(1000, 1000)]]
    for point in heavy:  # prompts of 2 to 16 tokens per output token
        assert abs(point.error(point.predicted)) <= 0.2, point
        assert point.error(point.without_prefill) > 0.15, point  # decode alone: far too fast
    worst = found[(2048, 128)]
    assert worst.error(worst.without_prefill) > 2.0  # 4.5x too fast without it
    assert worst.prefill_share > 0.5
    light = found[(128, 2048)]  # a few prompt tokens per answer: prefill changes little
    assert abs(light.predicted / light.without_prefill - 1) < 0.05
