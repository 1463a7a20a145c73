"""Reference recurrences in float64 and their replay forms (checkpoint + logged inputs).

Mamba-2 (per head): h_t = exp(dt_t A) h_(t-1) + dt_t x_t B_t^T,  y_t = h_t C_t.
Replay logs (x, dt, B) per token and rebuilds h from the checkpoint in closed form:
h_T = exp(A sum dt) h_0 + sum_i exp(A sum_(j>i) dt_j) dt_i x_i B_i^T.

Gated DeltaNet (per head): S_t = a_t S_(t-1) + u_t k_t^T with u_t = b_t (v_t - a_t S_(t-1) k_t),
o_t = S_t q_t. Replay logs (u, k, g = log a) and rebuilds S the same way: the delta rule's
dependence on the state lives in u, fixed when the token was processed.

Speculation: each verify step appends 1 + K entries to the ring, computes outputs for all of
them from the replayed state, then keeps the accepted prefix (a pointer move). The ring is
folded into the checkpoint (a flush) when occupancy + 1 + K > L, as vLLM does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.float64]


# --------------------------------------------------------------------------- Mamba-2


@dataclass(frozen=True)
class MambaTokens:
    x: Array  # (T, heads, head_dim)
    dt: Array  # (T, heads), positive
    b: Array  # (T, d_state)
    c: Array  # (T, d_state)


def mamba_step(h: Array, a: Array, x: Array, dt: Array, b: Array) -> Array:
    """One recurrent update for every head: h (heads, head_dim, d_state)."""
    decay = np.exp(dt * a)[:, None, None]
    result: Array = decay * h + (dt[:, None] * x)[:, :, None] * b[None, None, :]
    return result


def mamba_replay(h0: Array, a: Array, x: Array, dt: Array, b: Array) -> Array:
    """The state after len(dt) tokens, from the checkpoint and the logged inputs, in one
    contraction (how a replay kernel does it on tensor cores)."""
    if len(dt) == 0:
        same: Array = np.array(h0, dtype=np.float64)
        return same
    after = np.cumsum(dt[::-1], axis=0)[::-1] - dt  # sum_(j>i) dt_j, per head
    weights = np.exp(after * a) * dt  # (T, heads)
    total = np.exp(dt.sum(axis=0) * a)[:, None, None]
    result: Array = total * h0 + np.einsum("th,thp,ts->hps", weights, x, b)
    return result


def mamba_output(h: Array, c: Array) -> Array:
    result: Array = np.einsum("hps,s->hp", h, c)
    return result


# --------------------------------------------------------------------------- Gated DeltaNet


def gdn_step(s: Array, q: Array, k: Array, v: Array, g: Array, beta: Array) -> tuple[Array, Array]:
    """One gated delta-rule update per head; returns (new state, the logged u)."""
    decay = np.exp(g)[:, None, None]
    predicted = np.einsum("hvk,hk->hv", decay * s, k)
    u = beta[:, None] * (v - predicted)
    return decay * s + u[:, :, None] * k[:, None, :], u


def gdn_replay(s0: Array, u: Array, k: Array, g: Array) -> Array:
    if len(g) == 0:
        same: Array = np.array(s0, dtype=np.float64)
        return same
    after = np.cumsum(g[::-1], axis=0)[::-1] - g
    weights = np.exp(after)  # (T, heads)
    decay = np.exp(g.sum(axis=0))[:, None, None]
    result: Array = decay * s0 + np.einsum("th,thv,thk->hvk", weights, u, k)
    return result


# --------------------------------------------------------------------------- speculation


@dataclass(frozen=True)
class ReplayReport:
    max_output_error: float
    max_state_error: float
    flushes: int
    steps: int


def _relative(a: Array, b: Array) -> float:
    scale = max(float(np.max(np.abs(b))), 1e-300)
    return float(np.max(np.abs(a - b))) / scale


Entry = tuple[Array, Array, Array]


@dataclass
class _Ring:
    """A run's replay ring: the checkpoint, the entries logged since it, and how a state is
    rebuilt from them (`replay(checkpoint, *the entries stacked)`). It is folded into the
    checkpoint (a flush) when a step's 1 + K entries would not fit in the window."""

    checkpoint: Array
    replay: Callable[[Array, Array, Array, Array], Array]
    window: int
    entries: list[Entry] = field(default_factory=list)
    flushes: int = 0
    state_error: float = 0.0

    def rebuilt(self, more: Sequence[Entry] = ()) -> Array:
        """The state after the ring's entries and then `more`."""
        entries = [*self.entries, *more]
        if not entries:
            same: Array = np.array(self.checkpoint, dtype=np.float64)
            return same
        first, second, third = (np.array([e[i] for e in entries]) for i in range(3))
        return self.replay(self.checkpoint, first, second, third)

    def flush(self, truth: Array) -> None:
        """Fold the ring into the checkpoint, which the recurrence says is `truth`."""
        self.checkpoint = self.rebuilt()
        self.entries = []
        self.flushes += 1
        self.state_error = max(self.state_error, _relative(self.checkpoint, truth))

    def make_room(self, entries: int, truth: Array) -> None:
        if len(self.entries) + entries > self.window:
            self.flush(truth)

    def report(self, output_error: float, truth: Array, steps: int) -> ReplayReport:
        """After the last step: the final fold, then the run's largest errors."""
        self.flush(truth)
        return ReplayReport(output_error, self.state_error, self.flushes, steps)


def mamba_speculative(
    rng: np.random.Generator,
    *,
    heads: int,
    head_dim: int,
    d_state: int,
    window: int,
    drafts: int,
    steps: int,
    accept: Sequence[int] | None = None,
) -> ReplayReport:
    """Drive a replay engine and the plain recurrence over the same accepted tokens with
    random drafts and rejections; return the largest relative differences."""
    a = -np.exp(rng.normal(size=heads))
    h_true = rng.normal(size=(heads, head_dim, d_state))
    ring = _Ring(h_true.copy(), lambda h0, x, dt, b: mamba_replay(h0, a, x, dt, b), window)
    out_err = 0.0
    for step in range(steps):
        n = 1 + drafts
        ring.make_room(n, h_true)
        x = rng.normal(size=(n, heads, head_dim))
        dt = np.log1p(np.exp(rng.normal(size=(n, heads))))
        b, c = rng.normal(size=(n, d_state)), rng.normal(size=(n, d_state))
        kept = accept[step % len(accept)] if accept else int(rng.integers(0, n))
        # Reference: the recurrence through every verified position from the accepted state.
        h = h_true
        reference = []
        for i in range(n):
            h = mamba_step(h, a, x[i], dt[i], b[i])
            reference.append(mamba_output(h, c[i]))
            if i == kept:
                h_true = h
        # Replay: outputs from checkpoint + ring + the new entries, no state copies.
        logged = [(x[i], dt[i], b[i]) for i in range(n)]
        for i in range(n):
            rebuilt = ring.rebuilt(logged[: i + 1])
            out_err = max(out_err, _relative(mamba_output(rebuilt, c[i]), reference[i]))
        ring.entries.extend(logged[: kept + 1])  # pointer move
    return ring.report(out_err, h_true, steps)


def gdn_speculative(
    rng: np.random.Generator,
    *,
    heads: int,
    d_k: int,
    d_v: int,
    window: int,
    drafts: int,
    steps: int,
) -> ReplayReport:
    s_true = rng.normal(size=(heads, d_v, d_k)) * 0.1
    ring = _Ring(s_true.copy(), gdn_replay, window)  # entries (u, k, g)
    out_err = 0.0
    for _ in range(steps):
        n = 1 + drafts
        ring.make_room(n, s_true)
        q = rng.normal(size=(n, heads, d_k))
        k = rng.normal(size=(n, heads, d_k))
        k /= np.linalg.norm(k, axis=-1, keepdims=True)
        v = rng.normal(size=(n, heads, d_v))
        g = -np.log1p(np.exp(rng.normal(size=(n, heads))))
        beta = 1 / (1 + np.exp(-rng.normal(size=(n, heads))))
        kept = int(rng.integers(0, n))
        s = s_true
        logged: list[Entry] = []
        for i in range(n):
            s, u = gdn_step(s, q[i], k[i], v[i], g[i], beta[i])
            logged.append((u, k[i], g[i]))
            rebuilt = ring.rebuilt(logged)
            reference = np.einsum("hvk,hk->hv", s, q[i])
            out_err = max(out_err, _relative(np.einsum("hvk,hk->hv", rebuilt, q[i]), reference))
            if i == kept:
                s_true = s
        ring.entries.extend(logged[: kept + 1])
    return ring.report(out_err, s_true, steps)


# --------------------------------------------------------------------------- precision


def to_bfloat16(values: npt.NDArray[np.floating]) -> npt.NDArray[np.float32]:
    """Round to bfloat16 (round to nearest even) and back to float32."""
    as_float = np.asarray(values, dtype=np.float32)
    bits = as_float.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def bf16_drift(
    rng: np.random.Generator,
    *,
    steps: int = 10_000,
    heads: int = 4,
    head_dim: int = 16,
    d_state: int = 32,
    report_at: Sequence[int] = (10, 100, 1_000, 10_000),
) -> dict[int, float]:
    """Relative error of a Mamba-2 state kept in bf16 against float64, after n steps."""
    a = -np.exp(rng.uniform(-9, -1, size=heads))  # from long-memory heads to fast-decaying ones
    h64 = np.zeros((heads, head_dim, d_state))
    h16 = np.zeros((heads, head_dim, d_state), dtype=np.float32)
    errors: dict[int, float] = {}
    for step in range(1, steps + 1):
        x = rng.normal(size=(heads, head_dim))
        dt = np.log1p(np.exp(rng.normal(size=heads) - 2))
        b = rng.normal(size=d_state)
        h64 = mamba_step(h64, a, x, dt, b)
        h16 = to_bfloat16(mamba_step(h16.astype(np.float64), a, x, dt, b))
        if step in report_at:
            errors[step] = float(np.linalg.norm(h16 - h64) / np.linalg.norm(h64))
    return errors


BOUND = 1e-12


def run_all(seed: int = 0) -> dict[str, float]:
    """The exactness suite the CLI prints: max relative errors over varied cases."""
    rng = np.random.default_rng(seed)
    results = {
        "mamba2_outputs": 0.0,
        "mamba2_state_after_flush": 0.0,
        "gdn_outputs": 0.0,
        "gdn_state_after_flush": 0.0,
    }
    for window, drafts in ((8, 0), (8, 3), (16, 4), (5, 4), (32, 7)):
        m = mamba_speculative(
            rng, heads=3, head_dim=8, d_state=16, window=window, drafts=drafts, steps=25
        )
        g = gdn_speculative(rng, heads=2, d_k=8, d_v=8, window=window, drafts=drafts, steps=25)
        results["mamba2_outputs"] = max(results["mamba2_outputs"], m.max_output_error)
        results["mamba2_state_after_flush"] = max(
            results["mamba2_state_after_flush"], m.max_state_error
        )
        results["gdn_outputs"] = max(results["gdn_outputs"], g.max_output_error)
        results["gdn_state_after_flush"] = max(results["gdn_state_after_flush"], g.max_state_error)
    return results
