"""What is served: the model's shapes from its config.json (one reader per family), its weights,
the built-in registry and a separate draft model's size.
"""
