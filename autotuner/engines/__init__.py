"""The engine seam: everything one serving engine spells its own way, one package per engine
(`vllm/`, `sglang/`).

An engine package provides, as pure data and pure functions (no I/O):
- `flags`: the spelling of each flag the tuner reads or writes, and which of them mark where
  the engine's args sit in a container;
- `args`: its command line read into the core's engine-neutral `EngineArgs` and
  `SpeculativeConfig`, and a saved drafter read back;
- `setup`: a `Setup` written into its args and read back (`render`, `parse_setup`), in a
  container's command, args or `sh -c` line, and the name that marks its container;
- `metrics`: the names of its Prometheus series the sources read;
- `builds.yaml` and `builds`: what each of its builds accepts by version and SSM family (the
  core's `BuildRow`s, loaded by `build_table`), and `capabilities`: its presets of the core's
  `EngineCapabilities` (named in `engine.capabilities`);
- `dialect`: all of it behind a subclass of `Dialect` (dialect.py), which actuators hold; the
  base writes a setup and its companion flags into a container the same way for every engine.

Shared by every engine: `commandline` (argparse's flag forms, JSON values, shell words, where
in a container the engine's args sit), `companion_record` (companion flags written and the
operator's put back), `build_table` (a capability table and the build in force) and `kinds`
(which engine: `engine.kind` vllm, sglang or auto, and each engine's package behind one
value). The core never imports an engine: it works on the engine-neutral values these modules
fill.
"""
