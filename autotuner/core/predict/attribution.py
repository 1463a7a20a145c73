"""Online calibration by kernel class: where the cost model is wrong, learned from every window
of every setup the sidecar has watched, so that an error seen on one setup moves only the terms
that explain it.

A setup's step is modelled as plain's step at the same batch plus what the setup adds:
    step = sum_c  g_c * base_c  +  h_{c,family} * extra_c
where base_c is plain's time in kernel class c (weights GEMM, attention, SSM, copies, draft
passes, fixed overhead, ...) and extra_c what the setup's family (spec, replay, replay+spec)
adds to it (negative where it saves). The factors g (shared by every setup) and h (per family)
are fitted per batch band by weighted least squares on relative errors, pulled towards 1 by a
prior: a weak one for a family's own terms and a stronger one for the shared terms, so that an
error measured on spec:3 lands first on what speculation adds, and moves plain's terms only as
far as windows of plain (or of every family alike) say. Evidence fades with a half-life; each
(setup, band) keeps one decayed entry, so the persisted state stays small.

Where a family's own factors meet their bounds and another family's windows pin the shared
terms, what the bounds withheld stays with that family, as a factor on its whole step
(`BandFit.withheld`): handed to the shared terms, it would be lost as soon as another family's
windows pulled them back, and the family would be predicted as fast as before it was measured.

Each prediction also gets an uncertainty: wide where its family has not been measured in the
band (and wider still when the model has been seen to be far off there), narrow where it has.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, PrivateAttr

from autotuner.core.decay import decay
from autotuner.core.types import Setup, SetupKind

# The calibration's batch bands (edges): factors are fitted per band, coarser than the batch
# histogram's bins so that each band gathers windows enough.
CALIBRATION_BANDS = (1, 4, 16, 64, 256, 1 << 20)
NEIGHBOUR_WEIGHT = 0.25  # evidence from the next band counts this much, two bands away squared
# How strongly a factor is held at 1, in windows' worth of a term that is the whole step (a
# term with share x of a step needs about prior / x^2 windows to move halfway): shared terms
# a hundred times harder to move than a family's own, so an error lands on what a setup adds first.
SHARED_PRIOR = 0.5
OWN_PRIOR = 0.005
UNCHECKED_SIGMA = 0.2  # log-space uncertainty of a family never measured near a band
FLOOR_SIGMA = 0.02  # what no amount of evidence removes (noise between windows)
FAMILIES = tuple(k.value for k in SetupKind if k is not SetupKind.PLAIN)
# The families that draft: they run the same drafter passes and verify tokens through the same
# weights, so what one is measured to cost beyond its bounds says the other costs it too.
DRAFTING = (SetupKind.SPEC.value, SetupKind.REPLAY_SPEC.value)
PLAIN_FAMILY = SetupKind.PLAIN.value
WHOLE_STEP = "whole_step"  # the kernel label of a withheld factor: it scales the family's step

Array = npt.NDArray[np.float64]


def calibration_bands(batches: npt.ArrayLike) -> npt.NDArray[np.intp]:
    """The index of the calibration band each batch falls in (past the last edge, the last)."""
    index = np.searchsorted(CALIBRATION_BANDS[1:], batches, side="right")
    return np.minimum(index, len(CALIBRATION_BANDS) - 2)


def calibration_band(batch: float) -> int:
    """The index of the calibration band `batch` falls in."""
    return int(calibration_bands(batch))


class Entry(BaseModel):
    """One (setup, band): decayed means of the window's relative error and class shares."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    band: int
    weight: float
    ratio: float  # measured / predicted step time
    base: dict[str, float]  # plain's class times / the setup's predicted step
    extra: dict[str, float]  # what the setup adds per class / its predicted step
    updated_at: float

    def faded(self, now: float, half_life_s: float) -> float:
        return self.weight * decay(now - self.updated_at, half_life_s)


class Attribution(BaseModel):
    """The evidence, by setup label and band; `fit` turns it into factors."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    entries: dict[str, Entry] = {}  # "label|band" -> entry
    _fits: dict[tuple[float, float, tuple[float, float]], Fit] = PrivateAttr(default_factory=dict)

    def __eq__(self, other: object) -> bool:
        """Equal evidence (the cache of fits is not part of the value)."""
        return isinstance(other, Attribution) and self.entries == other.entries

    __hash__ = None  # type: ignore[assignment]  # a mutable-looking value, like BaseModel

    def add(
        self,
        setup: Setup,
        batch: float,
        measured_s: float,
        base_s: Mapping[str, float],
        setup_s: Mapping[str, float],
        now: float,
        *,
        half_life_s: float,
    ) -> Attribution:
        """One window: `setup` stepped in `measured_s` at `batch`, where the model predicts
        `setup_s` per class (and `base_s` for plain at the same batch)."""
        predicted = sum(setup_s.values())
        if not (measured_s > 0 and predicted > 0 and math.isfinite(measured_s)):
            return self
        band = calibration_band(batch)
        classes = set(base_s) | set(setup_s)
        base = {c: base_s.get(c, 0.0) / predicted for c in classes}
        extra = {c: (setup_s.get(c, 0.0) - base_s.get(c, 0.0)) / predicted for c in classes}
        if setup.kind is SetupKind.PLAIN:
            extra = dict.fromkeys(classes, 0.0)
        key = f"{setup.label}|{band}"
        old = self.entries.get(key)
        kept = old.faded(now, half_life_s) if old else 0.0
        total = kept + 1.0

        def mixed(new: float, before: float) -> float:
            return (before * kept + new) / total

        entry = Entry(
            family=setup.kind.value,
            band=band,
            weight=total,
            ratio=mixed(measured_s / predicted, old.ratio if old else 0.0),
            base={c: mixed(base[c], old.base.get(c, 0.0) if old else 0.0) for c in classes},
            extra={c: mixed(extra[c], old.extra.get(c, 0.0) if old else 0.0) for c in classes},
            updated_at=now,
        )
        return Attribution(entries={**self.entries, key: entry})

    def fit(self, now: float, half_life_s: float, bounds: tuple[float, float]) -> Fit:
        """The factors now (computed once per time and settings: a step asks many times)."""
        key = (now, half_life_s, (bounds[0], bounds[1]))
        cached = self._fits.get(key)
        if cached is None:
            classes = sorted({c for e in self.entries.values() for c in e.base})
            bands = range(len(CALIBRATION_BANDS) - 1)
            seen = self._seen_doubt(now, half_life_s)
            cached = Fit(
                classes=tuple(classes),
                bands=tuple(
                    replace(self._band(b, classes, now, half_life_s, bounds), seen=seen)
                    for b in bands
                ),
            )
            self._fits.clear()
            self._fits[key] = cached
        return cached

    def _seen_doubt(self, now: float, half_life_s: float) -> dict[str, float]:
        """Per family measured anywhere (half a decayed window or more), how far off the raw
        model has been on it over every band it ran (weighted rms log error)."""
        live = [(e, e.faded(now, half_life_s)) for e in self.entries.values()]
        live = [(e, w) for e, w in live if w > 1e-6]
        families = [e.family for e, _ in live]
        weights = [w for _, w in live]
        doubt = _doubt([e.ratio for e, _ in live], weights, families)
        evidence = _evidence(weights, families)
        return {f: d for f, d in doubt.items() if evidence.get(f, 0.0) >= 0.5}

    def _band(
        self,
        band: int,
        classes: Sequence[str],
        now: float,
        half_life_s: float,
        bounds: tuple[float, float],
    ) -> BandFit:
        """Weighted ridge regression towards 1 for this band's factors."""
        names = [("shared", c) for c in classes] + [(f, c) for f in FAMILIES for c in classes]
        rows, targets, weights, families = [], [], [], []
        for entry in self.entries.values():
            w = entry.faded(now, half_life_s) * NEIGHBOUR_WEIGHT ** (abs(entry.band - band) ** 2)
            if w <= 1e-6:
                continue
            row = [entry.base.get(c, 0.0) for c in classes]
            for family in FAMILIES:
                own = family == entry.family
                row += [entry.extra.get(c, 0.0) if own else 0.0 for c in classes]
            rows.append(row)
            targets.append(entry.ratio)
            weights.append(w)
            families.append(entry.family)
        prior = np.array([SHARED_PRIOR if who == "shared" else OWN_PRIOR for who, _ in names])
        factors = _ridge(rows, targets, weights, prior, bounds)
        fitted = {name: float(f) for name, f in zip(names, factors, strict=True)}
        evidence = _evidence(weights, families)
        bounded = {who for (who, _), f in fitted.items() if who != "shared" and _held(f, bounds)}
        return BandFit(
            shared={c: fitted[("shared", c)] for c in classes},
            own={f: {c: fitted[(f, c)] for c in classes} for f in FAMILIES},
            evidence=evidence,
            misfit=_misfit(rows, targets, weights, families, factors),
            doubt=_doubt(targets, weights, families),
            withheld=_withheld(rows, targets, weights, families, factors, bounded, evidence),
            upper=bounds[1],
        )


def _ridge(
    rows: list[list[float]],
    targets: list[float],
    weights: list[float],
    prior: Array,
    bounds: tuple[float, float],
) -> Array:
    """argmin sum w (t - x.f)^2 + sum prior (f - 1)^2 with every factor within the bounds: a
    factor the unbounded solution puts past a bound is held there and the others are solved
    again, so the error it could not take lands on the terms that can (a family's own term
    clipped at 2 does not leave the shared terms short of what the windows measured)."""
    factors: Array = np.ones(len(prior))
    if not rows:
        return factors
    x, t, w = np.asarray(rows), np.asarray(targets), np.asarray(weights)
    free = np.ones(len(prior), dtype=bool)
    for _ in range(len(prior)):
        rest = t - x[:, ~free] @ factors[~free]
        xf = x[:, free]
        normal = xf.T @ (xf * w[:, None]) + np.diag(prior[free])
        factors[free] = np.linalg.solve(normal, xf.T @ (w * rest) + prior[free])
        past = free & ((factors < bounds[0]) | (factors > bounds[1]))
        factors = np.clip(factors, *bounds)
        free &= ~past
        if not past.any() or not free.any():
            break
    return factors


def _held(factor: float, bounds: tuple[float, float]) -> bool:
    """Whether a factor sits at a bound that keeps the fit from following its windows: not a
    bound of 1 (the model kept as it is, where a factor with no evidence sits too)."""
    low, high = bounds
    return (factor <= low < 1.0) or (factor >= high > 1.0)


def _withheld(
    rows: list[list[float]],
    targets: list[float],
    weights: list[float],
    families: list[str],
    factors: Array,
    bounded: set[str],
    evidence: Mapping[str, float],
) -> dict[str, float]:
    """Per family with an own factor at a bound, the error the fit leaves on its windows (a
    weighted geometric mean of measured over fitted): only while two or more families were
    measured near the band. With one, the shared terms take that error and predict the family
    right; with two, the other's windows pin them, and the error has nowhere else to go."""
    if sum(1 for w in evidence.values() if w >= 0.5) < 2:
        return {}
    sums: dict[str, tuple[float, float]] = {}
    for row, t, w, family in zip(rows, targets, weights, families, strict=True):
        if family not in bounded:
            continue
        total, weight = sums.get(family, (0.0, 0.0))
        sums[family] = (total - w * _log_error(row, t, factors), weight + w)
    return {f: math.exp(total / weight) for f, (total, weight) in sums.items()}


def _evidence(weights: Sequence[float], families: Sequence[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for w, family in zip(weights, families, strict=True):
        out[family] = out.get(family, 0.0) + w
    return out


def _misfit(
    rows: list[list[float]],
    targets: list[float],
    weights: list[float],
    families: list[str],
    factors: Array,
) -> dict[str, float]:
    """Per family, the rms relative error the fit leaves (what the factors cannot explain)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for row, t, w, family in zip(rows, targets, weights, families, strict=True):
        out.setdefault(family, []).append((w, _log_error(row, t, factors) ** 2))
    return {f: math.sqrt(sum(w * e for w, e in v) / sum(w for w, _ in v)) for f, v in out.items()}


def _log_error(row: list[float], target: float, factors: Array) -> float:
    """log(fitted / measured) of one window's step ratio."""
    return math.log(max(float(np.dot(row, factors)), 1e-9) / max(target, 1e-9))


def _doubt(
    targets: Sequence[float], weights: Sequence[float], families: Sequence[str]
) -> dict[str, float]:
    """Per family, how far off the raw model has been seen to be near this band (weighted rms
    log error)."""
    sums: dict[str, tuple[float, float]] = {}
    for t, w, family in zip(targets, weights, families, strict=True):
        squares, total = sums.get(family, (0.0, 0.0))
        sums[family] = (squares + w * math.log(max(t, 1e-9)) ** 2, total + w)
    return {family: math.sqrt(sq / total) for family, (sq, total) in sums.items()}


@dataclass(frozen=True)
class BandFit:
    shared: dict[str, float]  # class -> factor on plain's part
    own: dict[str, dict[str, float]]  # family -> class -> factor on what it adds
    evidence: dict[str, float]  # family -> decayed windows measured near this band
    misfit: dict[str, float]  # family -> rms log error left after the fit
    doubt: dict[str, float]  # family -> rms log error of the raw model near this band
    seen: dict[str, float] = field(default_factory=dict)  # family -> the same, every band it ran
    # family -> factor on its whole step: what its bounded own factors could not take
    withheld: dict[str, float] = field(default_factory=dict)
    upper: float = 2.0  # the factors' upper bound (calibration.bounds)

    def own_as_priced(self, family: str) -> tuple[dict[str, float], float]:
        """(the factors on what `family` adds, the factor on its whole step) as predictions use
        them. A drafting family not measured near the band takes, from the other drafting
        family where its bounds withheld part of its error, every own factor at the upper
        bound and the withheld factor: the same drafter and verify kernels, underpriced by at
        least as much (SGLang's speculation alone, priced from the model after its speculation
        with replay measured 2.2-2.5x slower, was switched to and reverted)."""
        own, whole = self.own.get(family, {}), self.withheld.get(family, 1.0)
        if family not in DRAFTING or self.evidence.get(family, 0.0) >= 0.5:
            return own, whole
        own = dict(own)
        for other in DRAFTING:
            if other == family or other not in self.withheld:
                continue
            for kernel, factor in self.own[other].items():
                if factor >= self.upper:
                    own[kernel] = max(own.get(kernel, 1.0), factor)
            whole = max(whole, self.withheld[other])
        return own, whole

    def sigma(self, family: str, running: str | None = None) -> float:
        """Log-space uncertainty of a prediction for `family` in this band: what the fit leaves,
        plus the prior's doubt on plain's terms and on what the family adds, each shrinking
        with the windows that checked it (`_plain_left`; only the family's own windows check
        what it adds). The prior's doubt is what the raw model missed on the family where it
        ran (it is one model across bands: seen within 5% at batch 4-110, it is not given 20%
        at 313); for a family never measured it is UNCHECKED_SIGMA, and on plain's terms wider
        when the model was far off on the `running` family here: that miss may lie in the
        terms every setup shares, and says nothing of what another family adds."""
        if family in self.seen:
            on_plain = on_own = max(self.seen[family], self.doubt.get(family, 0.0))
        else:
            on_own = UNCHECKED_SIGMA
            on_plain = max(UNCHECKED_SIGMA, self.doubt.get(running or family, 0.0))
        plain = on_plain**2 * self._plain_left(family)
        if family == PLAIN_FAMILY:
            prior = plain
        else:
            prior = 0.5 * plain + 0.5 * on_own**2 / (1.0 + self.evidence.get(family, 0.0))
        left = self.misfit.get(family, 0.0)
        return math.sqrt(FLOOR_SIGMA**2 + left**2 + prior)

    def _plain_left(self, family: str) -> float:
        """The share of the prior's doubt on plain's terms left for a prediction of `family`:
        one over one plus the windows that checked them. Plain's windows and the family's own
        (they measured the sum it predicts) count whole. Another family's w windows count
        w / (1 + w), never a whole one: they measure plain's terms plus what that family adds,
        two terms doubted alike, so however many there are they leave half the doubt, and N
        such families leave 1 / (1 + N). Counted whole, spec:3's windows hid the published
        days' error: spec:3 runs near its prediction there while the model's plain is far off,
        and replay, priced on plain's terms, was asked about well after it had overtaken
        spec:3."""
        own = self.evidence.get(family, 0.0) if family != PLAIN_FAMILY else 0.0
        others = sum(
            w / (1.0 + w) for f, w in self.evidence.items() if f not in (PLAIN_FAMILY, family)
        )
        return 1.0 / (1.0 + self.evidence.get(PLAIN_FAMILY, 0.0) + own + others)

    def checked(self, family: str) -> bool:
        """At least one (decayed) window checked this family's terms in or next to the band
        (for plain, whose terms every setup has: a window of any family)."""
        seen = sum(self.evidence.values()) if family == PLAIN_FAMILY else self.evidence.get(family)
        return (seen or 0.0) >= 0.5


class Factor(NamedTuple):
    term: str  # "shared", or the family whose own terms it scales
    kernel: str  # the kernel class
    band: int
    factor: float


@dataclass(frozen=True)
class Fit:
    classes: tuple[str, ...]
    bands: tuple[BandFit, ...]

    def factors(self) -> list[Factor]:
        """Every factor some window has checked (1.0 where the model held), for export and
        `status`: plain's terms in every band with evidence, a family's own where it ran, and
        what a family's bounds withheld (kernel WHOLE_STEP). A drafting family priced with the
        other's factors (`BandFit.own_as_priced`) has no windows of its own, and none listed."""
        out = []
        for band, fit in enumerate(self.bands):
            terms = [("shared", fit.shared, fit.checked(PLAIN_FAMILY))]
            terms += [(f, fit.own[f], fit.evidence.get(f, 0.0) >= 0.5) for f in FAMILIES]
            for term, factors, seen in terms:
                if seen:
                    out += [Factor(term, k, band, v) for k, v in sorted(factors.items())]
            out += [Factor(f, WHOLE_STEP, band, v) for f, v in sorted(fit.withheld.items())]
        return out

    def at(self, batch: float) -> BandFit:
        return self.bands[calibration_band(batch)]

    def steps(
        self,
        setup: Setup,
        batches: npt.NDArray[np.int64],
        base_s: Mapping[str, Array],
        setup_s: Mapping[str, Array],
    ) -> Array:
        """Calibrated step time of `setup` at each batch from the model's class times there:
        plain's terms times the band's shared factor, what the setup adds times its family's
        own, the whole times what the bounds withheld from its family (one array pass per
        class: a curve over a thousand batches is not a thousand calls)."""
        band = calibration_bands(batches)
        priced = [fit.own_as_priced(setup.kind.value) for fit in self.bands]
        owns = [own for own, _ in priced]
        none = np.zeros(len(batches))
        total = np.zeros(len(batches))
        for c in set(base_s) | set(setup_s):
            base = base_s.get(c, none)
            extra = none if setup.kind is SetupKind.PLAIN else setup_s.get(c, none) - base
            shared = np.array([fit.shared.get(c, 1.0) for fit in self.bands])
            own = np.array([factors.get(c, 1.0) for factors in owns])
            total += shared[band] * base + own[band] * extra
        withheld: Array = np.array([whole for _, whole in priced])
        return np.maximum(total * withheld[band], 1e-9)
