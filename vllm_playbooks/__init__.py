"""Reproducible tuning playbooks for vLLM."""
