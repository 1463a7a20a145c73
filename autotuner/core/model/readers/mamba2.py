"""The plain Mamba-2 reader: a stack of Mamba-2 layers and nothing else."""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build
from autotuner.core.model.spec import Role


def read_mamba2(raw: Config, name: str) -> Read:
    f = Fields(raw, "Mamba2")
    count = f.req("num_hidden_layers", "n_layer")
    hidden, vocab = f.req("hidden_size", "d_model"), f.req("vocab_size")
    heads, d_state = f.req("num_heads"), f.req("state_size", "d_state")
    f.check()
    ssm = parts.mamba2_shape(f, parts.PLAIN_MAMBA2, hidden, heads, d_state)
    tied = bool(f.opt("tie_word_embeddings", True))
    blocks = {"M": {Role.SSM: parts.mamba2(hidden, ssm)}}
    return build(
        name, "Mamba2ForCausalLM", Body(hidden, vocab, tied, ["M"] * count, blocks), ssm=ssm
    )
