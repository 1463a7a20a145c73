"""SGLang's spelling of each flag the tuner reads or writes (sglang 0.5.23: every flag is
"--" + a ServerArgs field with "-" for "_", arg_groups/arg_utils.py:288-290; a bool field is a
`store_true` switch with no `--no-` form, :393-398)."""

from __future__ import annotations

# The drafter's flags: the operator's, kept as written and never invented.
ALGORITHM = "--speculative-algorithm"
DRAFT_MODEL = "--speculative-draft-model-path"
DRAFT_MODEL_ALIAS = "--speculative-draft-model"  # arg_groups/fields/spec.py:36-42
SPECULATIVE_PREFIX = "--speculative-"
# What the tuner writes for K (topk 1 is the linear chain ReplaySSM's verify needs).
NUM_STEPS = "--speculative-num-steps"
EAGLE_TOPK = "--speculative-eagle-topk"
NUM_DRAFT_TOKENS = "--speculative-num-draft-tokens"
ADAPTIVE = "--speculative-adaptive"
ADAPTIVE_CONFIG = "--speculative-adaptive-config"
# ReplaySSM on Gated DeltaNet / KDA layers: alone, or under speculative verify (exclusive).
REPLAY = "--enable-linear-replayssm"
REPLAY_SPEC = "--enable-linear-replayssm-spec"
REPLAY_LEN = "--linear-replayssm-cache-len"
# Companions of replay: the radix cache strategy it needs and the scheduler no_buffer needs.
RADIX_STRATEGY = "--mamba-radix-cache-strategy"
OVERLAP_OFF = "--disable-overlap-schedule"
PAGE_SIZE = "--page-size"
# The linear-attention decode backend replay runs on (the decode one, else the general one).
LINEAR_ATTN_BACKEND = "--linear-attn-backend"
LINEAR_ATTN_DECODE_BACKEND = "--linear-attn-decode-backend"
SSM_DTYPE = "--mamba-ssm-dtype"
METRICS = "--enable-metrics"
MAX_RUNNING = "--max-running-requests"
# The prefill budget and the attention data-parallel groups that share it
# (arg_groups/fields/schedule.py:52-55, fields/parallel.py:73-90; the deprecated
# `--dp-size N --enable-dp-attention` is a store_true switch, server_args.py:416-424).
CHUNKED_PREFILL_SIZE = "--chunked-prefill-size"
ATTN_DP_SIZE = ("--attn-dp-size", "--attention-data-parallel-size")
DP_SIZE = ("--dp-size", "--data-parallel-size")
DP_ATTENTION = "--enable-dp-attention"
MIXED_CHUNK = "--enable-mixed-chunk"  # prefill chunks ride in decode batches (fields/schedule.py)
MODEL = "--model-path"
MODEL_ALIAS = "--model"  # arg_groups/fields/model.py:51-57

# The switches and valued flags a setup writes: where they stand, SGLang's args are.
MANAGED = (
    ALGORITHM,
    NUM_STEPS,
    EAGLE_TOPK,
    NUM_DRAFT_TOKENS,
    ADAPTIVE,
    REPLAY,
    REPLAY_SPEC,
    REPLAY_LEN,
    MODEL,
    MODEL_ALIAS,
)
# The store_true switches among them and among the drafter's own --speculative-* flags
# (arg_groups/fields/spec.py:98-123): they take no value, so a following word is not theirs.
SWITCHES = frozenset(
    {
        ADAPTIVE,
        REPLAY,
        REPLAY_SPEC,
        OVERLAP_OFF,
        METRICS,
        DP_ATTENTION,
        MIXED_CHUNK,
        "--speculative-use-rejection-sampling",
        "--speculative-use-block-verification",
        "--speculative-dspark-align-verify-tokens-to-graph-tier",
    }
)
