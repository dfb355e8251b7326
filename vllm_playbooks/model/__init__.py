"""Closed forms and fitted models: speculative decoding, the roofline, pipeline micro-batches, calibration on rows."""
