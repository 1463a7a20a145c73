"""Benchmarks run by hand (`python -m benchmarks.NAME`): the cost model against measurements,
the policy against static setups, and what the sidecar, the canary and the load generator cost.
"""
