"""What to do about it: the policy's settings, the decayed estimates, the tuner's state, the policy
by concern and the pure loop step.
"""
