"""The search space: which setups this engine, model and drafter allow (within the settings and
the observed acceptance), and the per-batch K schedules worth comparing."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from autotuner.core.decide.backtrack import best_path
from autotuner.core.decide.context import Context
from autotuner.core.decide.estimates import BATCH_BINS, BIN_MIDDLES
from autotuner.core.decide.settings import PolicySettings
from autotuner.core.decide.state import TunerState
from autotuner.core.engine.capabilities import EngineCapabilities
from autotuner.core.predict.acceptance import AcceptanceEstimate
from autotuner.core.predict.predictor import Predictor
from autotuner.core.types import PLAIN, ScheduleBand, Setup

SCHEDULE_END = BATCH_BINS[-1] - 1
MAX_BANDS = 3  # an operator can read three bands; the physics rarely asks for more
EDGE_COST = 1e-4  # share of the expected tokens a band edge must buy


def candidates(
    state: TunerState, ctx: Context, settings: PolicySettings, acceptance: AcceptanceEstimate | None
) -> tuple[list[Setup], list[str]]:
    """Setups this engine accepts, within the settings, never beyond observed acceptance."""
    notes: list[str] = []
    engine = ctx.engine.serving(ctx.model)
    windows = _replay_windows(ctx, engine, settings, notes)
    ks: tuple[int, ...] = ()
    if engine.speculation and ctx.drafter_available:
        if acceptance is None:
            notes.append("speculation not proposed: no acceptance observed yet")
        else:
            limit = min(acceptance.max_spec_tokens, engine.max_spec_tokens)
            ks = tuple(k for k in settings.candidates.spec_tokens if 1 <= k <= limit)
    elif engine.speculation and ctx.drafter_problem:
        notes.append(ctx.drafter_problem)
    setups = [PLAIN, *(Setup(replay_window=w) for w in windows)]
    speculating = [Setup(spec_tokens=k) for k in ks]
    if engine.replay_with_speculation:
        speculating += [
            Setup(spec_tokens=k, replay_window=w) for k in ks for w in windows if w >= k + 1
        ]
    setups += speculating + _adaptive(speculating, ctx, notes)
    kept, held = unquarantined(state, ctx.now, [s for s in setups if engine.accepts(s)])
    return kept, notes + held


def unquarantined(
    state: TunerState, now: float, setups: Sequence[Setup]
) -> tuple[list[Setup], list[str]]:
    """`setups` less those quarantined now, and a note naming those left out. By label: a K
    schedule found again for the same load is the same setup, and waits out its quarantine
    like any other."""
    quarantined = {label for label, until in state.quarantine.items() if until > now}
    kept = [s for s in setups if s.label not in quarantined]
    held = sorted({s.label for s in setups} & quarantined)
    return kept, [f"quarantined: {', '.join(held)}"] if held else []


def _replay_windows(
    ctx: Context, engine: EngineCapabilities, settings: PolicySettings, notes: list[str]
) -> tuple[int, ...]:
    """The replay windows to propose, and why none are where the model has state."""
    windows = settings.candidates.replay_windows
    if not (ctx.model.is_hybrid and engine.replay and windows):
        return ()
    refusal = engine.refusal(Setup(replay_window=windows[0]))
    if refusal is not None:
        notes.append(f"replay not proposed: {refusal}")
        return ()
    if ctx.model.ssm_state_dtype in ("float32", "fp32") or ctx.low_precision_replay:
        return windows
    notes.append(
        f"replay not proposed: the SSM state is {ctx.model.ssm_state_dtype}, and a "
        "low-precision state drifts under replay (target.allow_low_precision_replay overrides)"
    )
    return ()


def _adaptive(speculating: Sequence[Setup], ctx: Context, notes: list[str]) -> list[Setup]:
    """Each speculating setup with adaptive verification, where the build has it."""
    if not (ctx.engine.adaptive_verification and speculating):
        return []
    if ctx.workload.cudagraph_capture_tokens == 0:
        notes.append(
            "adaptive verification not proposed: it needs full CUDA graphs (the engine runs eager)"
        )
        return []
    return [s.model_copy(update={"adaptive": True}) for s in speculating]


def schedules(
    predictor: Predictor,
    setups: Sequence[Setup],
    acceptance: AcceptanceEstimate,
    mass: npt.NDArray[np.float64],
) -> list[Setup]:
    """For each replay option and each largest K, the K schedule that serves most over the
    load to come (`mass`: the share of the horizon at each histogram bin), under the physics:
    K never rises with batch (verifying more only gets dearer as the batch grows), at most
    MAX_BANDS bands, and band edges only where the load is (a bin nobody visits takes its
    neighbour's K). vLLM reserves state slots for the largest K at every batch, so each K is
    evaluated with the capacity of the schedule's largest K."""
    edges = np.asarray(BATCH_BINS)
    active = mass > 0
    found = []
    for window in sorted({s.replay_window for s in setups}):
        ks = sorted({s.spec_tokens for s in setups if s.replay_window == window} - {0})
        for top in ks:
            table = np.zeros((top + 1, len(BIN_MIDDLES)))
            for k in range(top + 1):
                flat = _flat(top, k, window)
                table[k, active] = predictor.curve(flat, BIN_MIDDLES[active], acceptance)[0]
            best_k = monotone_ks(table, mass)
            bands = _merged(best_k, edges)
            if len(bands) > 1 and best_k[0] == top:
                found.append(Setup(spec_tokens=top, replay_window=window, schedule=tuple(bands)))
    return found


def monotone_ks(table: npt.NDArray[np.float64], mass: npt.NDArray[np.float64]) -> list[int]:
    """The K of each bin (`table[k, bin]`: tokens/s) that maximises the tokens expected over
    `mass`, K non-increasing from bin to bin, in at most MAX_BANDS runs; each edge must buy
    more than EDGE_COST of the expected tokens (so bins without load start no band)."""
    options, bins = table.shape
    gain = table * mass[None, :]
    edge = EDGE_COST * float(np.max(np.sum(gain, axis=1)))
    value = np.full((options, MAX_BANDS), -np.inf)
    value[:, 0] = gain[:, 0]
    back = np.zeros((bins, options, MAX_BANDS, 2), dtype=np.int64)
    for b in range(1, bins):
        after = np.full_like(value, -np.inf)
        for k in range(options):
            for n in range(MAX_BANDS):
                stay = value[k, n]
                higher = value[k + 1 :, n - 1] - edge if n else np.asarray([])
                source = (k, n)
                best = stay
                if higher.size and float(np.max(higher)) > best:
                    best = float(np.max(higher))
                    source = (k + 1 + int(np.argmax(higher)), n - 1)
                after[k, n] = best + gain[k, b]
                back[b, k, n] = source
        value = after
    return [k for k, _ in best_path(value, back)]


def _merged(best_k: Sequence[int], edges: npt.NDArray[np.int64]) -> list[ScheduleBand]:
    """One schedule band per run of bins with the same best K."""
    bands: list[ScheduleBand] = []
    for i, k in enumerate(best_k):
        start, end = int(edges[i]), int(edges[i + 1] - 1)
        if bands and bands[-1].spec_tokens == k:
            bands[-1] = bands[-1].model_copy(update={"end_batch": end})
        else:
            bands.append(ScheduleBand(start_batch=start, end_batch=end, spec_tokens=k))
    return bands


def _flat(top: int, k: int, window: int) -> Setup:
    """K drafts at every batch, as a schedule whose largest K is `top` runs it: with that K's
    state slots, and with the CUDA graphs the engine runs a schedule with (so every band,
    the top one too, pays what a schedule costs the engine)."""
    band = ScheduleBand(start_batch=1, end_batch=SCHEDULE_END, spec_tokens=k)
    return Setup(spec_tokens=top, replay_window=window, schedule=(band,))
