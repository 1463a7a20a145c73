"""`autotuner bench` and `autotuner calibrate`: measure every setup on the operator's own
hardware, and fit the cost model's efficiencies to what was measured."""
