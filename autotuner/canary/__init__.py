"""Quality guard: greedy canary runs before and after a change, and their comparison."""

from autotuner.canary.compare import Comparison, PromptResult, Verdict, compare
from autotuner.canary.run import CanaryPrompt, CanaryRun, load_canary, run_canary

__all__ = [
    "CanaryPrompt",
    "CanaryRun",
    "Comparison",
    "PromptResult",
    "Verdict",
    "compare",
    "load_canary",
    "run_canary",
]
