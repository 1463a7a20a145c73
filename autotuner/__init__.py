"""spec-autotuner: tunes speculative decoding and ReplaySSM for hybrid-model vLLM deployments."""

__version__ = "0.1.0"
