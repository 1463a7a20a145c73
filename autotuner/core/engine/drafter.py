"""The drafter that is really deployed (pure): the operator's speculative config, else the one
declared, else the model's own MTP layers, else none; where it came from, and whether its cost
and acceptance can be predicted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict

from autotuner.core.engine.args import SpeculativeConfig
from autotuner.core.model.draft import DraftModel
from autotuner.core.model.spec import DrafterKind, ModelSpec
from autotuner.errors import InputError

LIVE = "live args"
DECLARED = "declared"  # --drafter / --draft-model on predict, model.drafter in the settings
MODEL_CONFIG = "model config"
DEFAULT = "default"

NO_DRAFTER = (
    "no drafter: speculation not predicted (declare one with --drafter or deploy "
    "--speculative-config)"
)
MODELLED_METHODS = ("mtp", "eagle", "eagle3", "ngram", "suffix", "draft_model")


DraftLoader = Callable[[str], DraftModel]  # raises InputError when the model cannot be sized


class Drafter(BaseModel):
    """The drafter speculation would run with, where it came from, and whether its cost and
    acceptance can be predicted (`problem` says why not)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: DrafterKind
    source: str
    method: str | None = None
    model: str | None = None
    spec_tokens: int | None = None
    adaptive_verification: bool | None = None
    draft: DraftModel | None = None
    problem: str | None = None  # speculation not predicted, and why
    notes: tuple[str, ...] = ()

    @property
    def predictable(self) -> bool:
        return self.problem is None

    @property
    def acceptance_is_the_workloads(self) -> bool:
        """ngram and suffix: acceptance depends on the text served, never assumed."""
        return self.kind in (DrafterKind.NGRAM, DrafterKind.SUFFIX)

    def describe(self) -> str:
        if self.kind is DrafterKind.NONE:
            return "none"
        parts = [self.method or self.kind.value]
        if self.model:
            size = f", {self.draft.params / 1e9:.2f}B params" if self.draft else ""
            parts.append(f"({self.model}{size})")
        if self.spec_tokens:
            parts.append(f"K={self.spec_tokens}")
        if self.adaptive_verification:
            parts.append("adaptive verification")
        return " ".join(parts)


def deployed_drafter(
    model: ModelSpec,
    speculative: SpeculativeConfig | None,
    declared: DrafterKind | None = None,
    *,
    source: str = LIVE,
    declared_source: str = DECLARED,
    draft_model: str | None = None,
    load_draft: DraftLoader | None = None,
) -> Drafter:
    """The drafter the operator deployed (the speculative config), else the one declared,
    else the model's own MTP layers, else none. The tuner never invents one: without a drafter,
    or with one it cannot cost, speculation is not predicted."""
    if speculative is not None:
        return _configured(model, speculative, declared, source, load_draft)
    if declared is not None and declared is not DrafterKind.NONE:
        return _kind_only(model, declared, declared_source, draft_model, load_draft)
    if declared is None and model.drafter is not DrafterKind.NONE:
        return Drafter(kind=model.drafter, source=MODEL_CONFIG, method=model.drafter.value)
    return Drafter(
        kind=DrafterKind.NONE, source=declared_source if declared else DEFAULT, problem=NO_DRAFTER
    )


def _configured(
    model: ModelSpec,
    spec: SpeculativeConfig,
    declared: DrafterKind | None,
    source: str,
    load_draft: DraftLoader | None,
) -> Drafter:
    method = spec.resolved_method
    kind = spec.kind
    base: dict[str, Any] = {
        "source": source,
        "method": method,
        "model": spec.model,
        "spec_tokens": spec.num_speculative_tokens,
        "adaptive_verification": spec.enable_adaptive_verification,
    }
    notes: list[str] = []
    if declared is not None and kind is not None and declared is not kind:
        notes.append(f"the settings declare {declared.value}; the {source} say {method}: used")
    if spec.enable_adaptive_verification:
        notes.append(
            "adaptive verification is on: the engine verifies up to K drafts per step by its "
            "own start-up profile; predicted as spec:K@adaptive (at each batch the verified "
            "count its cost favours, the drafter running K passes)"
        )
    if kind is None:
        what = f"method {method}" if method else "no method and no draft model"
        return Drafter(
            kind=DrafterKind.NONE,
            problem=f"{what} in the speculative config is not modelled (modelled: "
            f"{', '.join(MODELLED_METHODS)}): speculation not predicted",
            notes=tuple(notes),
            **base,
        )
    drafter = _kind_only(model, kind, source, spec.model, load_draft, spec)
    return drafter.model_copy(update={**base, "notes": (*notes, *drafter.notes)})


def _kind_only(
    model: ModelSpec,
    kind: DrafterKind,
    source: str,
    draft_model: str | None,
    load_draft: DraftLoader | None,
    spec: SpeculativeConfig | None = None,
) -> Drafter:
    base: dict[str, Any] = {"kind": kind, "source": source, "method": kind.value}
    if draft_model:
        base["model"] = draft_model
    if kind is DrafterKind.MTP and model.drafter is not DrafterKind.MTP:
        return Drafter(
            problem="method mtp, but the model's config has no MTP layers: speculation not "
            "predicted",
            **base,
        )
    if kind in (DrafterKind.NGRAM, DrafterKind.SUFFIX):
        return Drafter(
            notes=(
                f"{kind.value} drafts on the CPU (no GPU passes), but its acceptance is the "
                "workload's: speculation is predicted only from measured acceptance",
            ),
            **base,
        )
    if kind is DrafterKind.EAGLE:
        return Drafter(
            notes=("an EAGLE head is costed as one decoder layer of the target's width",),
            **base,
        )
    if kind is DrafterKind.DRAFT_MODEL:
        return _sized(base, draft_model, load_draft, spec)
    return Drafter(**base)


def _sized(
    base: dict[str, Any],
    name: str | None,
    load_draft: DraftLoader | None,
    spec: SpeculativeConfig | None,
) -> Drafter:
    if not name:
        return Drafter(
            problem="draft_model without a model: its size is unknown, speculation not "
            "predicted (give --draft-model, or the model in the speculative config)",
            **base,
        )
    if load_draft is None:
        return Drafter(
            problem=f"draft model {name}: size unknown, speculation not predicted", **base
        )
    try:
        draft = load_draft(name)
    except InputError as exc:
        return Drafter(
            problem=f"draft model {name}: size unknown ({exc}), speculation not predicted",
            **base,
        )
    tp = spec.draft_tensor_parallel_size if spec is not None else None
    draft = draft.model_copy(update={"tensor_parallel": tp})
    return Drafter(
        draft=draft,
        notes=(
            f"draft model {name}: {draft.params / 1e9:.2f}B params, "
            f"{draft.weight_bytes / 2**30:.2f} GiB read per pass, {draft.layers} blocks",
        ),
        **base,
    )
