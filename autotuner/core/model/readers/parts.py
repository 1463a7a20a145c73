"""The blocks several families share: their parameters by module role, and the Mamba-2 mixer's
shapes by the names each family gives its config fields."""

from __future__ import annotations

from dataclasses import dataclass

from autotuner.core.model.readers.base import Fields
from autotuner.core.model.spec import MoeShape, Role, SsmKind, SsmShape


def attention(hidden: int, heads: int, kv_heads: int, head_dim: int, gated: bool) -> int:
    """q (twice as wide with an output gate), k, v and o projections."""
    q = hidden * heads * head_dim * (2 if gated else 1)
    return q + 2 * hidden * kv_heads * head_dim + heads * head_dim * hidden


def mamba2(hidden: int, ssm: SsmShape) -> int:
    inner = ssm.heads * ssm.head_dim
    in_proj = hidden * (2 * inner + 2 * ssm.groups * ssm.state_size + ssm.heads)
    return in_proj + ssm.conv_dim * ssm.conv_kernel + inner * hidden + 3 * ssm.heads + inner


def gdn(hidden: int, ssm: SsmShape) -> int:
    keys = ssm.groups * ssm.state_size
    values = ssm.heads * ssm.head_dim
    projections = hidden * (2 * keys + 2 * values + 2 * ssm.heads)
    return projections + ssm.conv_dim * ssm.conv_kernel + values * hidden


def mamba1(hidden: int, ssm: SsmShape, dt_rank: int) -> int:
    inner = ssm.heads
    return (
        hidden * 2 * inner
        + inner * ssm.conv_kernel
        + inner * (dt_rank + 2 * ssm.state_size)
        + dt_rank * inner
        + inner * ssm.state_size
        + inner * hidden
    )


def mlp(hidden: int, intermediate: int, gated: bool) -> int:
    return (3 if gated else 2) * hidden * intermediate


@dataclass(frozen=True)
class Mamba2Names:
    """The config fields by which a family names the Mamba-2 mixer's optional shapes."""

    expand: str
    head_dim: str
    groups: str
    conv_kernel: str
    inner: str | None = None  # the mixer's width written out, where the family allows it


PLAIN_MAMBA2 = Mamba2Names("expand", "head_dim", "n_groups", "conv_kernel")  # Mamba2Config
# Granite-4.0-H, Bamba and Falcon-H1: the same fields behind a `mamba_` prefix.
PREFIXED_MAMBA2 = Mamba2Names(
    "mamba_expand", "mamba_d_head", "mamba_n_groups", "mamba_d_conv", inner="mamba_d_ssm"
)


def mamba2_shape(
    f: Fields, names: Mamba2Names, hidden: int, heads: int, state_size: int
) -> SsmShape:
    """A Mamba-2 mixer's shapes: the head width defaults to the inner width (written out, or
    `expand` x hidden) over the heads, one group and a 4-wide convolution."""
    written = int(f.opt(names.inner, 0) or 0) if names.inner else 0
    inner = written or int(f.opt(names.expand, 2) * hidden)
    return SsmShape(
        kind=SsmKind.MAMBA2,
        heads=heads,
        head_dim=int(f.opt(names.head_dim, inner // heads)),
        state_size=state_size,
        groups=int(f.opt(names.groups, 1)),
        conv_kernel=int(f.opt(names.conv_kernel, 4)),
    )


def moe_block(hidden: int, moe: MoeShape, *, shared: int = 0, latent: int = 0) -> dict[Role, int]:
    """A MoE layer's roles: router, routed experts, and the shared experts and a latent MoE's
    down/up projections where it has them."""
    roles = {Role.ROUTER: hidden * moe.experts, Role.EXPERTS: moe.experts * moe.expert_params}
    if shared:
        roles[Role.SHARED_EXPERTS] = shared
    if latent:
        roles[Role.MOE_DENSE] = latent
    return roles
