"""SGLang's live configuration read back from `GET /server_info` (entrypoints/http_server.py:
863-891: every ServerArgs field after resolution, by its flat name, plus "version"): what the
running server does, as the Observation's LiveSetup. The metrics cannot say it: under
--speculative-adaptive `sglang:spec_num_steps` moves with the batch (K = 0 from batch 64), and
no series tells replay. Every call has a deadline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from autotuner.core.types import LiveSetup, Observation
from autotuner.deadline import Deadline
from autotuner.engines.sglang.setup import DEFAULT_REPLAY_LEN
from autotuner.sources.detect import DETECT_DEADLINE_S, base_url, get_body

SERVER_INFO = "/server_info"


def live_setup_of(info: Mapping[str, Any]) -> LiveSetup | None:
    """The setup a /server_info answer shows (None: not SGLang's answer)."""
    if "speculative_algorithm" not in info and "enable_linear_replayssm" not in info:
        return None
    speculates = info.get("speculative_algorithm") is not None
    steps = info.get("speculative_num_steps")
    k = int(steps) if speculates and isinstance(steps, int) and not isinstance(steps, bool) else 0
    length = info.get("linear_replayssm_cache_len")
    window = int(length) if isinstance(length, int) and length > 0 else DEFAULT_REPLAY_LEN
    replay = bool(info.get("enable_linear_replayssm")) or (
        bool(info.get("enable_linear_replayssm_spec")) and k > 0
    )
    dtype = info.get("mamba_ssm_dtype")
    return LiveSetup(
        speculation=k > 0,
        spec_tokens=k,
        replay=replay,
        replay_window=window if replay else None,
        mamba_ssm_cache_dtype=str(dtype) if dtype else None,
        mamba_cache_mode=None,
        cache_config_read=True,
    )


def server_info(url: str, deadline_s: float = DETECT_DEADLINE_S) -> dict[str, Any] | None:
    """The server's /server_info answer (from its /metrics or base URL), or None when it does
    not answer a JSON object in time."""
    body = get_body(f"{base_url(url)}{SERVER_INFO}", Deadline(deadline_s))
    try:
        info = json.loads(body) if body is not None else None
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def with_live_config(observation: Observation, url: str, deadline_s: float) -> Observation:
    """The observation with the live setup SGLang's /server_info shows (unchanged when it
    does not answer: the metrics' reading stands)."""
    info = server_info(url, deadline_s)
    live = live_setup_of(info) if info is not None else None
    if live is None or not observation.usable:
        return observation
    return observation.model_copy(update={"live_setup": live})
