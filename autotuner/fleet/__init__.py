"""One controller for many serving objects: a SpecTuner custom resource per target, one loop
per SpecTuner inside one process (`autotuner controller`)."""
