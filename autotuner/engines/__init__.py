"""The engine seam: everything one serving engine spells its own way, one package per engine.

An engine package (today `vllm/`) provides, as pure data and pure functions (no I/O):
- `flags`: the spelling of each flag the tuner manages (`FlagNames`), a settings group an
  operator may change, and which of them mark where the engine's args sit (`managed`);
- `args`: its command line read into the core's engine-neutral `EngineArgs` and
  `SpeculativeConfig` (`parse`, and `live_args` for a container's command and args), and a
  saved speculative config read back (`speculative_of`);
- `setup`: a `Setup` written into its args and read back (`render`, `parse_setup`), in a
  container's command, args or `sh -c` line, and the name that marks its container;
- `metrics`: the names of its Prometheus series the sources read;
- `capabilities`: what each of its builds accepts, as presets of the core's
  `EngineCapabilities` (`PRESETS`, named in `engine.capabilities`).

`commandline` holds what every engine's command line shares (argparse's flag forms, JSON
values, shell words, where in a container the engine's args sit). The core never imports an
engine: it works on the engine-neutral values these modules fill. Settings, `sources/`,
`actuators/` and the loop ask the engine's modules; a second engine is a second package here
with the same modules.
"""
