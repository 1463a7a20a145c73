"""The Falcon-H1 reader: every layer runs attention and a Mamba-2 mixer in parallel, then an
MLP.
"""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build
from autotuner.core.model.spec import AttentionShape, Role


def read_falcon_h1(raw: Config, name: str) -> Read:
    f = Fields(raw, "FalconH1")
    count, hidden, vocab, heads, kv_heads = f.stack()
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    inter = f.req("intermediate_size")
    f.check()
    ssm = parts.mamba2_shape(f, parts.PREFIXED_MAMBA2, hidden, m_heads, d_state)
    head_dim = int(f.opt("head_dim", hidden // heads))
    blocks = {
        "P": {
            Role.SSM: parts.mamba2(hidden, ssm),
            Role.ATTENTION: parts.attention(hidden, heads, kv_heads, head_dim, gated=False),
            Role.MLP: parts.mlp(hidden, inter, gated=True),
        }
    }
    tied = bool(f.opt("tie_word_embeddings", False))
    return build(
        name,
        "FalconH1ForCausalLM",
        Body(hidden, vocab, tied, ["P"] * count, blocks),
        ssm=ssm,
        attention=AttentionShape(heads=heads, kv_heads=kv_heads, head_dim=head_dim),
    )
