"""Exponential decay by age: how every estimate forgets."""

from __future__ import annotations


def decay(age_s: float, half_life_s: float) -> float:
    return 0.5 ** (max(age_s, 0.0) / half_life_s) if half_life_s > 0 else 0.0
