"""The engine seam: everything one serving engine spells its own way, one package per engine.

An engine package (today `vllm/`) provides, as pure data and pure functions (no I/O):
- `flags`: the spelling of each flag the tuner manages, a settings group an operator may change;
- `args`: its command line read into the core's engine-neutral `EngineArgs` and
  `SpeculativeConfig` (`parse`, `live_args`), and a saved speculative config read back;
- `setup`: a `Setup` written into its args and read back from them (`render`, `parse_setup`),
  in a container's command, args or `sh -c` line;
- `metrics`: the names of its Prometheus series the sources read;
- `capabilities`: what each of its builds accepts, as presets of the core's
  `EngineCapabilities`.

`commandline` holds what every engine's command line shares (argparse's flag forms, shell
words, where in a container the engine's args sit). The core never imports an engine: it works
on the engine-neutral values these modules fill; `sources/` and `actuators/` ask the engine's
modules. A second engine is a second package here.
"""
