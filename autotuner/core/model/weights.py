"""Which format each weight is stored in, read from a checkpoint's quantization config.

A reader describes a model as an `Inventory`: per layer, parameters by module role (attention,
ssm, mlp, router, shared_experts, moe_dense, experts), plus the embedding table and LM head. A
`Scheme` says the format of each (layer, role): from `quantization_config` in config.json, an
NVIDIA ModelOpt `hf_quant_config.json`, a built-in variant or an override. `plan` joins the two
into `WeightShare`s (parameters by role and format) and notes for the operator.

Module names in quantization configs (`quantized_layers`, `exclude_modules`, `ignore`,
`modules_to_not_convert`, compressed-tensors `targets`) are matched by what they name, not by
their exact spelling: `model.language_model.layers.3.self_attn.q_proj`, `layers.3.attn`,
`*.attn.*` and `backbone.layers.3.mixer` (on an attention layer) all select attention.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from autotuner.core.model.spec import DTYPE_BYTES, Role, WeightShare
from autotuner.errors import ModelConfigError

# --------------------------------------------------------------------------- formats

_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "e4m3": "fp8",
    "fp4": "nvfp4",
}
FORMATS = ("bfloat16", "float16", "float32", "fp8", "int8", "nvfp4", "mxfp4", "int4")
UNQUANTIZED = ("bfloat16", "float16", "float32")


def weight_format(name: str) -> str:
    """A weight format as a user may write it (`bf16`, `FP8`, `nvfp4`) -> its canonical name."""
    text = str(name).strip().lower().removeprefix("torch.")
    canonical = _ALIASES.get(text, text)
    if canonical not in FORMATS:
        raise ModelConfigError(
            f"unknown weight format {name!r}; known: {', '.join(FORMATS)} "
            f"(also {', '.join(sorted(_ALIASES))})"
        )
    return canonical


def _algo_format(algo: str) -> str:
    """A ModelOpt `quant_algo` (NVFP4, W4A16_NVFP4, FP8, FP8_PB_WO, INT4_AWQ, ...) -> format."""
    text = algo.upper()
    for token, fmt in (("NVFP4", "nvfp4"), ("MXFP4", "mxfp4"), ("FP8", "fp8"), ("MXFP8", "fp8")):
        if token in text:
            return fmt
    if "INT4" in text or "AWQ" in text or text.startswith("W4A"):
        return "int4"
    if "INT8" in text:
        return "int8"
    if text.lower() in FORMATS or text.lower() in _ALIASES:
        return weight_format(text)
    raise ModelConfigError(
        f"quant_algo {algo!r} is not a weight format this tool knows (NVFP4, MXFP4, FP8, "
        "INT8, INT4/AWQ or MIXED_PRECISION): pass weights=<format> to say what the weights are"
    )


# --------------------------------------------------------------------------- roles

MOE_ONLY = frozenset({Role.ROUTER, Role.SHARED_EXPERTS, Role.MOE_DENSE, Role.EXPERTS})
FFN = frozenset({Role.MLP}) | MOE_ONLY
LAYER_ROLES = frozenset({Role.ATTENTION, Role.SSM}) | FFN
LINEAR = LAYER_ROLES | {Role.LM_HEAD}
NOTHING: frozenset[str] = frozenset()

# Module names in checkpoints and quantization configs -> the roles their weights hold: each
# role's spellings listed together.
_BLOCKS: dict[str, frozenset[str]] = {
    **dict.fromkeys(("self_attn", "attn", "attention"), frozenset({Role.ATTENTION})),
    **dict.fromkeys(("linear_attn", "mamba", "ssm"), frozenset({Role.SSM})),
    **dict.fromkeys(("mlp", "ffn", "feed_forward", "block_sparse_moe", "moe"), FFN),
    "shared_mlp": frozenset({Role.SHARED_EXPERTS, Role.MLP}),  # Granite: shared expert or dense MLP
    "mixer": LAYER_ROLES,  # NemotronH: whatever the layer holds
}
_FFN_PARTS: dict[str, frozenset[str]] = {
    # GraniteMoe's input_linear and output_linear: the experts as one batched tensor.
    **dict.fromkeys(("experts", "input_linear", "output_linear"), frozenset({Role.EXPERTS})),
    **dict.fromkeys(
        ("shared_expert", "shared_experts", "shared_expert_gate"), frozenset({Role.SHARED_EXPERTS})
    ),
    **dict.fromkeys(("gate", "router"), frozenset({Role.ROUTER})),
}
_GLOBAL_NAMES: dict[str, frozenset[str]] = {
    **dict.fromkeys(("lm_head", "head", "output"), frozenset({Role.LM_HEAD})),
    "wte": frozenset({Role.EMBEDDING}),
}
_GLOBAL_PARTS = (
    ("embed", frozenset({Role.EMBEDDING})),
    ("visual", NOTHING),
    ("vision", NOTHING),
    ("norm", NOTHING),
)


@dataclass(frozen=True)
class Selector:
    """What one module name or glob in a quantization config names."""

    text: str
    layer: str | None  # the layer index or a glob over it ("1*"); None: every layer
    roles: frozenset[str]

    def matches(self, layer: int | None, role: str) -> bool:
        if role not in self.roles:
            return False
        return self.layer is None or (layer is not None and fnmatchcase(str(layer), self.layer))


def _token_roles(token: str, table: Mapping[str, frozenset[str]]) -> frozenset[str] | None:
    if token in table:
        return table[token]
    stem = token.rstrip("*")
    if stem != token and stem in table:
        return table[stem]
    return None


def _refine(block: frozenset[str], rest: Sequence[str]) -> frozenset[str]:
    """`mlp.experts` -> experts, `mixer.gate` -> router, `mlp.gate_proj` -> mlp, `mlp` -> all;
    blocks without experts (attention, ssm, shared_mlp) are what they are."""
    if Role.EXPERTS not in block or not rest or rest[0] in ("*", ""):
        return block
    token = rest[0]
    part = _token_roles(token, _FFN_PARTS)
    if part is None and "latent" in token:
        part = frozenset({Role.MOE_DENSE})
    if part is None:
        part = block - MOE_ONLY
    return block & part


def _layer_of(tokens: Sequence[str]) -> tuple[str | None, int] | None:
    """(layer index or glob, None for any; position after it) for a name through `layers`."""
    for i, token in enumerate(tokens[:-1]):
        if token in ("layers", "h", "blocks"):
            index = tokens[i + 1]
            return (None if index.strip("*") == "" else index), i + 2
    return None


def selector(text: str) -> Selector | None:
    """Parse one module name or glob; None when it names nothing this tool recognises."""
    name = text.strip().removeprefix("re:").replace(".*", "*").replace("\\.", ".")
    tokens = [t for t in name.lower().split(".") if t]
    if not tokens:
        return None
    if tokens[0].startswith("mtp"):  # the MTP drafter's layers are not the target's weights
        return Selector(text, None, NOTHING)
    located = _layer_of(tokens)
    layer, start = located if located else (None, 0)
    for i in range(start, len(tokens)):
        block = _token_roles(tokens[i], _BLOCKS)
        if block is not None:
            return Selector(text, layer, _refine(block, tokens[i + 1 :]))
        if "norm" in tokens[i]:
            return Selector(text, layer, NOTHING)
    if located:
        return Selector(text, layer, LAYER_ROLES)
    return _global_selector(text, tokens)


def _global_selector(text: str, tokens: Sequence[str]) -> Selector | None:
    if tokens == ["*"]:
        return Selector(text, None, LINEAR | {Role.EMBEDDING})
    if tokens == ["linear"]:  # compressed-tensors targets by class
        return Selector(text, None, LINEAR)
    for token in tokens:
        stem = token.strip("*")
        if stem in _GLOBAL_NAMES:
            return Selector(text, None, _GLOBAL_NAMES[stem])
        for part, roles in _GLOBAL_PARTS:
            if part in stem:
                return Selector(text, None, roles)
    return None


# --------------------------------------------------------------------------- schemes


@dataclass(frozen=True)
class Scheme:
    """The stored format of every weight, as one source describes it."""

    label: str  # the headline: nvfp4, fp8, mixed, bfloat16, ...
    default: str  # the format of any weight the lists do not name
    source: str
    listed: tuple[tuple[Selector, str], ...] = ()
    excluded: tuple[Selector, ...] = ()
    unrecognised: tuple[str, ...] = ()
    whole: bool = False  # the default covers the embedding table too (a uniform statement)

    def format_of(self, layer: int | None, role: str, unquantized: str) -> str:
        """Exclusions keep a weight unquantized; a layer-specific listing beats a wildcard one;
        of several listings the widest format wins. A checkpoint's quantizer leaves the input
        embedding table (a lookup, not a GEMM) unconverted unless its lists name it."""
        if any(s.matches(layer, role) for s in self.excluded):
            return unquantized
        found = [(s, fmt) for s, fmt in self.listed if s.matches(layer, role)]
        if found:
            specific = [item for item in found if item[0].layer is not None] or found
            return max((fmt for _, fmt in specific), key=lambda f: DTYPE_BYTES[f])
        if role == Role.EMBEDDING and not self.whole:
            return unquantized
        return self.default


def uniform(fmt: str, source: str) -> Scheme:
    """Every weight in one format: an override, a built-in variant, an unquantized checkpoint."""
    return Scheme(label=fmt, default=fmt, source=source, whole=True)


def _selectors(names: Any) -> tuple[list[Selector], list[str]]:
    if names is None:
        return [], []
    if not isinstance(names, list | tuple):
        raise ModelConfigError(f"a module list must be a JSON list of names, got {names!r}")
    found: list[Selector] = []
    unknown: list[str] = []
    for name in names:
        parsed = selector(str(name))
        if parsed is None:
            unknown.append(str(name))
        else:
            found.append(parsed)
    return found, unknown


def _exclusions(quant: Mapping[str, Any]) -> tuple[list[Selector], list[str]]:
    selectors: list[Selector] = []
    unknown: list[str] = []
    for key in ("exclude_modules", "ignore", "modules_to_not_convert", "ignored_layers"):
        found, missed = _selectors(quant.get(key))
        selectors += found
        unknown += missed
    return selectors, unknown


def _modelopt(quant: Mapping[str, Any], source: str, unquantized: str) -> Scheme:
    algo = str(quant["quant_algo"])
    excluded, unknown = _exclusions(quant)
    if algo.upper() != "MIXED_PRECISION":
        fmt = _algo_format(algo)
        return Scheme(fmt, fmt, f"{source} ({algo})", (), tuple(excluded), tuple(unknown))
    layers = quant.get("quantized_layers")
    if not isinstance(layers, Mapping) or not layers:
        raise ModelConfigError(
            f"{source}: quant_algo MIXED_PRECISION needs 'quantized_layers' (module -> "
            "{quant_algo}), which is missing or empty"
        )
    listed: list[tuple[Selector, str]] = []
    for name, detail in layers.items():
        parsed = selector(str(name))
        if parsed is None:
            unknown.append(str(name))
            continue
        if not isinstance(detail, Mapping) or "quant_algo" not in detail:
            raise ModelConfigError(f"{source}: quantized_layers[{name!r}] has no quant_algo")
        listed.append((parsed, _algo_format(str(detail["quant_algo"]))))
    return Scheme(
        "mixed",
        unquantized,
        f"{source} (MIXED_PRECISION)",
        tuple(listed),
        tuple(excluded),
        tuple(unknown),
    )


def _group_format(group: Mapping[str, Any]) -> str:
    """A compressed-tensors config group's weights (num_bits, type, group_size) -> format."""
    weights = group.get("weights") or {}
    bits, kind = int(weights.get("num_bits", 16)), str(weights.get("type", "float"))
    if bits >= 16:
        return "bfloat16"
    if bits == 8:
        return "fp8" if kind == "float" else "int8"
    if bits == 4 and kind == "float":
        return "mxfp4" if int(weights.get("group_size") or 16) == 32 else "nvfp4"
    if bits == 4:
        return "int4"
    raise ModelConfigError(f"compressed-tensors weights of {bits} bits ({kind}) are not modelled")


def _compressed(quant: Mapping[str, Any], source: str, unquantized: str) -> Scheme:
    groups = quant.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise ModelConfigError(f"{source}: compressed-tensors without config_groups")
    listed: list[tuple[Selector, str]] = []
    excluded, unknown = _exclusions(quant)
    formats: set[str] = set()
    for group in groups.values():
        fmt = _group_format(group)
        formats.add(fmt)
        found, missed = _selectors(group.get("targets"))
        listed += [(s, fmt) for s in found]
        unknown += missed
    label = formats.pop() if len(formats) == 1 else "mixed"
    return Scheme(
        label,
        unquantized,
        f"{source} (compressed-tensors)",
        tuple(listed),
        tuple(excluded),
        tuple(unknown),
    )


_METHODS = {
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "mxfp4": "mxfp4",
    "quark_mxfp4": "mxfp4",
}


def scheme_of(quant: Any, source: str, unquantized: str) -> Scheme:
    """Read a `quantization_config` (or hf_quant_config.json's `quantization`) object."""
    if not isinstance(quant, Mapping):
        raise ModelConfigError(f"{source} must be a JSON object, got {type(quant).__name__}")
    method = str(quant.get("quant_method", "")).lower()
    if quant.get("quant_algo"):
        return _modelopt(quant, source, unquantized)
    if method == "compressed-tensors":
        return _compressed(quant, source, unquantized)
    if method in _METHODS:
        excluded, unknown = _exclusions(quant)
        fmt = _METHODS[method]
        return Scheme(fmt, fmt, f"{source} ({method})", (), tuple(excluded), tuple(unknown))
    if method in ("awq", "gptq", "bitsandbytes") or quant.get("bits"):
        bits = int(quant.get("bits") or (4 if quant.get("load_in_4bit") else 8))
        fmt = "int4" if bits == 4 else "int8"
        excluded, unknown = _exclusions(quant)
        return Scheme(fmt, fmt, f"{source} ({method})", (), tuple(excluded), tuple(unknown))
    raise ModelConfigError(
        f"{source}: quant_method {method or None!r} is not read (known: modelopt quant_algo, "
        f"compressed-tensors, awq, gptq, {', '.join(_METHODS)}): pass weights=<format> to say "
        "what the weights are"
    )


# --------------------------------------------------------------------------- plan


@dataclass(frozen=True)
class Inventory:
    """A model's parameters by where they sit: per layer the block characters it holds (as in
    ModelSpec.layer_pattern), each block's parameters by role, the embedding table and LM head."""

    layers: tuple[str, ...]
    blocks: Mapping[str, Mapping[Role, int]]
    embedding: int
    lm_head: int

    def instances(self) -> Iterator[tuple[int | None, Role, int]]:
        yield None, Role.EMBEDDING, self.embedding
        yield None, Role.LM_HEAD, self.lm_head
        for index, chars in enumerate(self.layers):
            for char in chars:
                for role, params in self.blocks[char].items():
                    yield index, role, params

    def params(self, *, experts: bool) -> int:
        """Routed-expert parameters (experts=True) or all the others."""
        return sum(p for _, role, p in self.instances() if (role == Role.EXPERTS) == experts)


def plan(
    inventory: Inventory, scheme: Scheme, unquantized: str
) -> tuple[tuple[WeightShare, ...], list[str]]:
    """Parameters by (role, format), and notes on names that matched nothing."""
    totals: dict[tuple[str, str], int] = {}
    used: set[str] = set()
    for layer, role, params in inventory.instances():
        if params <= 0:
            continue
        fmt = scheme.format_of(layer, role, unquantized)
        totals[role, fmt] = totals.get((role, fmt), 0) + params
        used.update(s.text for s, _ in scheme.listed if s.matches(layer, role))
    shares = tuple(
        WeightShare(role=role, dtype=fmt, params=params)
        for (role, fmt), params in sorted(totals.items())
    )
    unmatched = [s.text for s, _ in scheme.listed if s.text not in used]
    return shares, _name_notes(scheme, unmatched)


def _name_notes(scheme: Scheme, unmatched: Sequence[str]) -> list[str]:
    notes = []
    for what, names in (
        ("module name(s) not recognised, counted at the default format", scheme.unrecognised),
        ("listed module(s) match no weight of this model", unmatched),
    ):
        if names:
            shown = ", ".join(repr(n) for n in names[:3])
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            notes.append(f"weights: {len(names)} {what} ({scheme.source}): {shown}{more}")
    return notes


def describe(shares: Sequence[WeightShare]) -> str:
    """`nvfp4 17.11B params (mlp), fp8 7.24B (attention, ssm)`: formats by size, with roles."""
    params: dict[str, int] = {}
    roles: dict[str, list[str]] = {}
    for share in shares:
        params[share.dtype] = params.get(share.dtype, 0) + share.params
        roles.setdefault(share.dtype, []).append(share.role)
    ranked = sorted(params, key=lambda fmt: -params[fmt])
    parts = [f"{fmt} {params[fmt] / 1e9:.2f}B ({', '.join(sorted(roles[fmt]))})" for fmt in ranked]
    return ", ".join(parts).replace("B (", "B params (", 1)
