"""The tuning advisor: an SLO in, a measured configuration out, for a share of a sweep's GPU time.

``goodput`` defines what is maximised and the grid best, ``oracle`` is the only way the search sees a measurement
(and what it costs), ``predict`` is the model that proposes points (roofline theory, refitted on what was paid for,
and the KV calculator's pruning), ``search`` is the loop and its stopping rule, ``evaluate`` replays it against every
recorded grid (``vllm-playbooks advise``)."""
