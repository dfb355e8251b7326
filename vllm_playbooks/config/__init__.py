"""Configurations checked before any GPU time: speculative decoding, the engine, and the load."""
