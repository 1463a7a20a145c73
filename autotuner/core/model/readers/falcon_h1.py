"""The Falcon-H1 reader: every layer runs attention and a Mamba-2 mixer in parallel, then an
MLP.
"""

from __future__ import annotations

from autotuner.core.model.readers.base import (
    Blocks,
    Body,
    Config,
    Fields,
    Read,
    attention_params,
    build,
    mamba2_params,
    mamba2_shape,
    mlp_params,
)
from autotuner.core.model.spec import AttentionShape


def read_falcon_h1(raw: Config, name: str) -> Read:
    f = Fields(raw, "FalconH1")
    count = f.req("num_hidden_layers")
    hidden, vocab = f.req("hidden_size"), f.req("vocab_size")
    heads, kv_heads = f.req("num_attention_heads"), f.req("num_key_value_heads")
    m_heads, d_state = f.req("mamba_n_heads"), f.req("mamba_d_state")
    inter = f.req("intermediate_size")
    f.check()
    ssm = mamba2_shape(f, hidden, m_heads, d_state)
    head_dim = int(f.opt("head_dim", hidden // heads))
    blocks: Blocks = {
        "P": {
            "ssm": mamba2_params(hidden, ssm),
            "attention": attention_params(hidden, heads, kv_heads, head_dim, gated=False),
            "mlp": mlp_params(hidden, inter, gated=True),
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
