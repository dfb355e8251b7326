"""How large a difference must be before the book calls it a gain or a loss: the bands every comparison uses."""

from __future__ import annotations

#: A change within ±5 % counts as no change (the claims ledger's band; run-to-run spread is not measured yet).
NO_CHANGE_BAND_PCT = 5.0


#: A speed-up within 1 ± this counts as no change (break-even). The book has not measured its run-to-run spread, so
#: this band is a stated choice, not a measured one.
BREAK_EVEN_BAND = 0.05


#: A measured (or modelled) ratio within ±10 % of the claimed ratio, or of the ends of a claimed range, counts as the
#: same size.
SIZE_TOLERANCE = 0.10


#: The verdict's margin: PP=2 at N counts as "not faster" than PP=1 at N within this many percent.
THRESHOLD_PCT = 20.0


#: Relative change below which a difference is not called a gain or a loss (a choice: repeated runs of one point
#: have not been measured here; the first recorded sweeps re-measured short runs within a few per cent).
TOLERANCE = 0.03
