"""GPU (or CPU) microbenchmarks that measure a HardwareProfile, and float64 proofs that the
replay forms of Mamba-2 and Gated DeltaNet are exact."""

__all__ = ["exactness", "probe"]
