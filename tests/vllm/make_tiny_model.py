"""Build the tiny random-weight Llama the real-vLLM tier serves (run with the vLLM venv's
python): a byte-level BPE tokenizer trained on a few sentences and LlamaForCausalLM with hidden
64, 2 layers, 2 heads, 1 KV head, head_dim 32. Seeded, so runs repeat.

Usage: make_tiny_model.py OUT [SEED]            a model (seed 0 is the served one)
       make_tiny_model.py OUT --draft-of DIR S  DIR's weights plus Gaussian noise of S x each
                                                tensor's spread: a draft model whose greedy
                                                guesses agree with DIR's often, not always."""

import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "speculative decoding drafts tokens and verifies them in one pass",
    "replay logs small inputs and checkpoints the state every few tokens",
    "def add(a, b): return a + b",
    "for i in range(10): print(i)",
    "one two three four five six seven eight nine ten",
] * 20


def draft(out: str, target: str, sigma: float) -> None:
    torch.manual_seed(1)
    model = LlamaForCausalLM.from_pretrained(target)
    with torch.no_grad():
        for tensor in model.parameters():
            tensor.add_(torch.randn_like(tensor) * tensor.std() * sigma)
    model.save_pretrained(out)
    PreTrainedTokenizerFast.from_pretrained(target).save_pretrained(out)


def main(out: str, seed: int = 0) -> None:
    torch.manual_seed(seed)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(TEXT, trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    config = LlamaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    wrapped.save_pretrained(path)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[2] == "--draft-of":
        draft(sys.argv[1], sys.argv[3], float(sys.argv[4]))
    else:
        main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 0)
