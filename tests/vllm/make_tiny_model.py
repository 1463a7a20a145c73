"""Build the tiny random-weight models the real-vLLM tier serves (run with the vLLM venv's
python): a byte-level BPE tokenizer trained on a few sentences and LlamaForCausalLM with hidden
64, 2 layers, 2 heads, 1 KV head, head_dim 32; or, with the same tokenizer, the hybrid: a
NemotronH of four layers `M-M*` (Mamba-2, MLP, Mamba-2, attention; Mamba-2 with 4 heads x 16,
one group, state 16; attention as the Llama's). float32, seeded, so runs repeat.

Usage: make_tiny_model.py OUT [SEED]            a Llama (seed 0 is the served one)
       make_tiny_model.py OUT --draft-of DIR S  DIR's weights plus Gaussian noise of S x each
                                                tensor's spread: a draft model whose greedy
                                                guesses agree with DIR's often, not always
       make_tiny_model.py OUT --nemotron        the hybrid"""

import sys
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    NemotronHConfig,
    NemotronHForCausalLM,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding drafts tokens and verifies them in one pass",
    "replay logs small inputs and checkpoints the state every few tokens",
    "def add(a, b): return a + b",
    "for i in range(10): print(i)",
    "one two three four five six seven eight nine ten",
] * 20
NEMOTRON_PATTERN = "M-M*"
NEMOTRON_BLOCKS = {"M": "mamba", "-": "mlp", "*": "attention"}


# The Llama's shapes, which the hybrid's attention, MLP and token ids share.
SHARED: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "max_position_embeddings": 512,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
}


def save(model: PreTrainedModel, wrapped: PreTrainedTokenizerFast, out: str) -> None:
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    wrapped.save_pretrained(path)


def draft(out: str, target: str, sigma: float) -> None:
    torch.manual_seed(1)
    model = LlamaForCausalLM.from_pretrained(target)
    with torch.no_grad():
        for tensor in model.parameters():
            tensor.add_(torch.randn_like(tensor) * tensor.std() * sigma)
    save(model, PreTrainedTokenizerFast.from_pretrained(target), out)


def tokenizer() -> PreTrainedTokenizerFast:
    """The byte-level BPE tokenizer every tiny model here shares (trained on TEXT: the same
    vocabulary each time)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(TEXT, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )


def main(out: str, seed: int = 0) -> None:
    torch.manual_seed(seed)
    wrapped = tokenizer()
    vocab = wrapped.backend_tokenizer.get_vocab_size()
    config = LlamaConfig(vocab_size=vocab, num_hidden_layers=2, **SHARED)
    save(LlamaForCausalLM(config), wrapped, out)


def nemotron(out: str) -> None:
    torch.manual_seed(0)
    wrapped = tokenizer()
    config = NemotronHConfig(
        vocab_size=wrapped.backend_tokenizer.get_vocab_size(),
        layers_block_type=[NEMOTRON_BLOCKS[c] for c in NEMOTRON_PATTERN],
        ssm_state_size=16,
        mamba_num_heads=4,
        mamba_head_dim=16,
        n_groups=1,
        conv_kernel=4,
        chunk_size=64,
        pad_token_id=2,
        dtype="float32",
        **SHARED,
    )
    save(NemotronHForCausalLM(config), wrapped, out)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[2] == "--nemotron":
        nemotron(sys.argv[1])
    elif len(sys.argv) == 5 and sys.argv[2] == "--draft-of":
        draft(sys.argv[1], sys.argv[3], float(sys.argv[4]))
    else:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
