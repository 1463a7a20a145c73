"""The plain Mamba-2 reader: a stack of Mamba-2 layers and nothing else."""

from __future__ import annotations

from autotuner.core.model.readers import parts
from autotuner.core.model.readers.base import Body, Config, Fields, Read, build
from autotuner.core.model.spec import Role, SsmKind, SsmShape


def read_mamba2(raw: Config, name: str) -> Read:
    f = Fields(raw, "Mamba2")
    count = f.req("num_hidden_layers", "n_layer")
    hidden, vocab = f.req("hidden_size", "d_model"), f.req("vocab_size")
    heads, d_state = f.req("num_heads"), f.req("state_size", "d_state")
    f.check()
    inner = int(f.opt("expand", 2)) * hidden
    ssm = SsmShape(
        kind=SsmKind.MAMBA2,
        heads=heads,
        head_dim=int(f.opt("head_dim", inner // heads)),
        state_size=d_state,
        groups=int(f.opt("n_groups", 1)),
        conv_kernel=int(f.opt("conv_kernel", 4)),
    )
    tied = bool(f.opt("tie_word_embeddings", True))
    blocks = {"M": {Role.SSM: parts.mamba2(hidden, ssm)}}
    return build(
        name, "Mamba2ForCausalLM", Body(hidden, vocab, tied, ["M"] * count, blocks), ssm=ssm
    )
