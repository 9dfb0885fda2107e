"""Experiments built on the core, by job:

sweeps/        running a sweep's cells: here, in local worker processes or on a Ray cluster
training/      the training experiments (scale-vs-dk, lm, logit-growth, early-warning), their models and data
pretrained/    real pretrained models: loading, their attention calls, the probe, the rescale
telemetry.py   the telemetry benchmark (attention with figures against plain SDPA)
references.py  what produced each shipped reference result, and whether this code still would
reproduction.py  the shipped reference results recomputed in part, against a calibrated tolerance
"""
