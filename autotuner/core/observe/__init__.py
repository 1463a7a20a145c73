"""What a window of metrics says: totals turned into an Observation, or a typed reason it cannot be
used.
"""
