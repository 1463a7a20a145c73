"""How the engine runs the model: its args, the deployed drafter, what a build accepts, and the
live workload resolved from them.
"""
