"""The operator's SGLang speculation the tests start from."""

# The model's own MTP layers (NEXTN) drafting K=3 tokens, one chain (top-k 1).
NEXTN_K3 = [
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
]
