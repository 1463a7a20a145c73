"""The pure core: plain data in, plain data out; no I/O beyond reading bundled data files."""
