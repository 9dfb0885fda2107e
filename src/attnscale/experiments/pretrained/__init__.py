"""Pretrained models, offline: loading them, reading their attention calls, probing the seed's assumptions on them, and rescaling their attention."""
