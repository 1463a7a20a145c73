"""Build the random-weight Llama the prefill check serves (run with the vLLM venv's python):
the tiny models' tokenizer and shapes scaled up until the CPU's arithmetic, not vLLM's per-step
host work, sets the times: hidden 1024, 4 layers, 16 heads of 64 (4 KV heads), MLP 4096,
about 60M parameters (240 MB in float32). A prompt token then costs about 120 MFLOP of GEMMs
and a decode step streams 240 MB of weights, so prefill is compute-bound and decode
bandwidth-bound, as on a GPU; the tiny models' 100K parameters make both pure overhead.

Usage (from the repository root): python -m tests.vllm.make_prefill_model OUT"""

import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tests.vllm.make_tiny_model import save, tokenizer

SHAPE = {
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_hidden_layers": 4,
    "num_attention_heads": 16,
    "num_key_value_heads": 4,
    "head_dim": 64,
    "max_position_embeddings": 2048,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "tie_word_embeddings": False,
}


def main(out: str) -> None:
    torch.manual_seed(0)
    wrapped = tokenizer()
    config = LlamaConfig(vocab_size=wrapped.backend_tokenizer.get_vocab_size(), **SHAPE)
    save(LlamaForCausalLM(config), wrapped, out)


if __name__ == "__main__":
    main(sys.argv[1])
