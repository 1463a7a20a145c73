"""SGLang: its flag spellings, its args read and written, its metric names and what its builds
accept (read from the sglang 0.5.23 wheel; docs/engine-rules.md section 2)."""
