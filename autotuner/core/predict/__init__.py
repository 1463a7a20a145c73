"""What a setup would serve: acceptance math, the GPU profile, the cost model, online attribution
of its error, the one Predictor and the predict report.
"""
