"""The loop's helpers around the core: the persisted state, the live inputs, the phase timer."""
