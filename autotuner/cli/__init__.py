"""The command line, a thin adapter over the core: parse, call, render. The app and its
entry point are in `main`, one module per command group beside it, what they print in
`render`."""
