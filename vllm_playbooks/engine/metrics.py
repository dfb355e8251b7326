"""Prometheus ``/metrics`` text → counter snapshots, and what happened between two snapshots.

Acceptance is the difference of the ``vllm:spec_decode_*`` counters scraped before and after a load level, the way
``vllm bench serve`` computes it, so warm-up traffic never leaks into a measured point.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from enum import StrEnum

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from vllm_playbooks.engine.exchange import get
from vllm_playbooks.errors import ServerError

_DRAFTS = "vllm:spec_decode_num_drafts_total"
_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_PREEMPTIONS = "vllm:num_preemptions_total"
_GENERATION_TOKENS = "vllm:generation_tokens_total"
_PROMPT_TOKENS = "vllm:prompt_tokens_total"
#: vLLM's histogram of tokens scheduled per engine step.
ITERATION_TOKENS = "vllm:iteration_tokens_total"
#: vLLM's histogram of the time between two output tokens of a request (seconds).
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"


@dataclass(frozen=True)
class Histogram:
    """A Prometheus histogram summed over label sets: bucket upper bounds (``inf`` last), the cumulative count at
    each, and the ``_count`` and ``_sum`` samples."""

    bounds: tuple[float, ...]
    cumulative: tuple[float, ...]
    count: float
    total: float

    @property
    def per_bucket(self) -> tuple[float, ...]:
        """Observations in each bucket alone (between the previous bound and this one)."""
        return tuple(c - p for c, p in zip(self.cumulative, (0.0, *self.cumulative[:-1]), strict=True))

    def count_above(self, bound: float) -> float:
        """Observations above ``bound``, which must be one of the bucket bounds."""
        if float(bound) not in self.bounds:
            raise ValueError(f"{bound} is not a bucket bound of the histogram: {self.bounds}")
        return self.count - self.cumulative[self.bounds.index(float(bound))]

    def minus(self, before: Histogram) -> Histogram:
        """What was observed between ``before`` and this snapshot of the same histogram."""
        if before.bounds != self.bounds:
            raise ServerError(f"histogram buckets changed between scrapes: {before.bounds} → {self.bounds}")
        cumulative = tuple(a - b for a, b in zip(self.cumulative, before.cumulative, strict=True))
        if min(cumulative, default=0.0) < 0 or self.count < before.count:
            raise ServerError("a histogram went down between scrapes: the server restarted")
        return Histogram(self.bounds, cumulative, self.count - before.count, self.total - before.total)


def _histogram(families: list[Metric], name: str) -> Histogram | None:
    """The histogram ``name`` among parsed metric families, summed over its label sets other than ``le``; None when
    the server does not export it."""
    buckets: dict[float, float] = defaultdict(float)
    count = total = 0.0
    found = False
    for family in families:
        if family.name != name or family.type != "histogram":
            continue
        found = True
        for sample in family.samples:
            if sample.name == f"{name}_bucket":
                buckets[float(sample.labels["le"])] += sample.value
            elif sample.name == f"{name}_count":
                count += sample.value
            elif sample.name == f"{name}_sum":
                total += sample.value
    if not found:
        return None
    bounds = tuple(sorted(buckets))
    return Histogram(bounds, tuple(buckets[b] for b in bounds), count, total)


def parse_histogram(text: str, name: str) -> Histogram | None:
    """The histogram ``name`` (e.g. ``ITERATION_TOKENS``) from Prometheus text, summed over its label sets other than
    ``le``; None when the server does not export it."""
    return _histogram(list(text_string_to_metric_families(text)), name)


@dataclass(frozen=True)
class MetricsSnapshot:
    """Counter values summed over engines and models: ``totals[sample]`` and per position ``accepted_per_pos``; and
    the histograms of tokens per engine step (``step_tokens``) and of inter-token latency (``inter_token``), each
    None when the server does not export it."""

    totals: dict[str, float]
    accepted_per_pos: dict[int, float] = field(default_factory=dict)
    step_tokens: Histogram | None = None
    inter_token: Histogram | None = None

    def get(self, name: str) -> float:
        """A counter's value, 0 when the server does not export it (e.g. no speculation)."""
        return self.totals.get(name, 0.0)


def _snapshot_lines(text: str) -> str:
    """The lines of Prometheus text that a ``MetricsSnapshot`` reads: the ``# TYPE`` comments, counter samples
    (``…_total``) and the two histograms' samples. A vLLM scrape is mostly other histograms' buckets, which
    prometheus_client's pure-Python parser would otherwise spend most of its time on."""
    histograms = (ITERATION_TOKENS, INTER_TOKEN_LATENCY)
    kept = []
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if line.startswith("# TYPE ") or name.endswith("_total") or name.startswith(histograms):
            kept.append(line)
    return "\n".join(kept) + "\n"


#: Snapshots already parsed in this process, by the BLAKE2 digest of their text: replay rebuilds every row from its
#: raw scrapes, and a page or a test session replays a case many times.
_PARSED: dict[bytes, MetricsSnapshot] = {}
_PARSED_MAX = 8192


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus exposition text with prometheus_client's parser: the counters, summed over label sets, and
    the step and inter-token histograms. The same text parses once per process (the snapshot is returned again)."""
    key = hashlib.blake2b(text.encode("utf-8"), digest_size=20).digest()
    if key not in _PARSED:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = _parse_snapshot(_snapshot_lines(text))
    return _PARSED[key]


#: One sample line in its plain form: a name, labels without escapes or braces in their values, a value and perhaps
#: a timestamp. A line of another form goes to prometheus_client's parser (``_parse_snapshot``).
_PLAIN_SAMPLE = re.compile(
    r"(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^{}\\]*)\})?[ \t]+(?P<value>[^ \t]+)(?:[ \t]+-?[0-9]+)?"
)
_PLAIN_LABEL = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"([^"]*)"[ \t]*(?:,|$)')
_PLAIN_TYPE = re.compile(r"# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) ([a-z]+)")
#: The sample names a family of each type takes after its ``# TYPE`` line (prometheus_client's text parser).
_FAMILY_SUFFIXES = {"histogram": ("_count", "_sum", "_bucket"), "summary": ("_count", "_sum", "")}


class _NotPlain(Exception):
    """A line of Prometheus text in a form the plain reader does not take."""


def _plain_labels(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    pairs = list(_PLAIN_LABEL.finditer(text))
    if sum(len(m.group(0)) for m in pairs) != len(text):
        raise _NotPlain
    return {m.group(1): m.group(2) for m in pairs}


def _plain_snapshot(text: str) -> MetricsSnapshot:
    """``_parse_snapshot`` for text in the plain form vLLM's servers write (``_PLAIN_SAMPLE``): the same families and
    samples as prometheus_client's parser reads (a sample belongs to the family of the ``# TYPE`` line before it when
    its name is one that family takes, else it and the samples after it to none until the next ``# TYPE``), read
    about ten times faster; ``_NotPlain`` at the first line of another form."""
    totals: dict[str, float] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    buckets: dict[str, dict[float, float]] = {}
    sums: dict[str, list[float]] = {}
    family, kind, allowed = "", "", ()
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if not line:
            continue
        if line.startswith("#"):
            declared = _PLAIN_TYPE.fullmatch(line)
            if declared is None:
                raise _NotPlain
            family, kind = declared.groups()
            allowed = tuple(family + suffix for suffix in _FAMILY_SUFFIXES.get(kind, ("",)))
            if kind == "histogram":
                buckets.setdefault(family, {})
                sums.setdefault(family, [0.0, 0.0])
            continue
        sample = _PLAIN_SAMPLE.fullmatch(line)
        if sample is None:
            raise _NotPlain
        name, value = sample["name"], float(sample["value"])
        if name not in allowed:
            family, kind, allowed = "", "", ()
            continue
        labels = _plain_labels(sample["labels"])
        if kind == "counter" and name.endswith("_total"):
            if name == _ACCEPTED_PER_POS:
                per_pos[int(labels["position"])] += value
            else:
                totals[name] += value
        elif kind == "histogram":
            if name.endswith("_bucket"):
                bound = float(labels["le"])
                buckets[family][bound] = buckets[family].get(bound, 0.0) + value
            else:
                sums[family][name.endswith("_sum")] += value

    def histogram(name: str) -> Histogram | None:
        if name not in buckets:
            return None
        bounds = tuple(sorted(buckets[name]))
        return Histogram(bounds, tuple(buckets[name][b] for b in bounds), *sums[name])

    return MetricsSnapshot(dict(totals), dict(per_pos), histogram(ITERATION_TOKENS), histogram(INTER_TOKEN_LATENCY))


def _parse_snapshot(text: str) -> MetricsSnapshot:
    """The snapshot of ``text`` (``_snapshot_lines``' lines): by the plain reader where every line is in its form,
    else by prometheus_client's parser, which raises on text that is not Prometheus text."""
    try:
        return _plain_snapshot(text)
    except (_NotPlain, ValueError):
        return _prometheus_snapshot(text)


def _prometheus_snapshot(text: str) -> MetricsSnapshot:
    totals: dict[str, float] = defaultdict(float)
    per_pos: dict[int, float] = defaultdict(float)
    families = list(text_string_to_metric_families(text))
    for family in families:
        if family.type != "counter":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            if sample.name == _ACCEPTED_PER_POS:
                per_pos[int(sample.labels["position"])] += sample.value
            else:
                totals[sample.name] += sample.value
    return MetricsSnapshot(
        dict(totals), dict(per_pos), _histogram(families, ITERATION_TOKENS), _histogram(families, INTER_TOKEN_LATENCY)
    )


@dataclass(frozen=True)
class SpecDecodeStats:
    """Speculative decoding during one measured run (deltas of the counters)."""

    num_drafts: int
    num_draft_tokens: int
    num_accepted_tokens: int
    accepted_per_position: tuple[int, ...]

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted draft tokens / drafted tokens (vLLM's 'Avg Draft acceptance rate', as a fraction)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """1 + accepted / drafts: tokens each verify step emits per sequence, the bonus token included."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else None

    @property
    def per_position_rates(self) -> tuple[float, ...]:
        """Accepted at position i / drafts: the unconditional chance that the first i+1 drafts are accepted."""
        if not self.num_drafts:
            return ()
        return tuple(a / self.num_drafts for a in self.accepted_per_position)


@dataclass(frozen=True)
class MetricsDelta:
    """What the server counted between two scrapes."""

    spec: SpecDecodeStats | None
    num_preemptions: int
    generation_tokens: int
    prompt_tokens: int
    #: The engine steps taken between the scrapes, by tokens per step (None without the histogram in both).
    step_tokens: Histogram | None = None
    #: The gaps between consecutive output tokens of a request, in seconds (None without the histogram in both).
    inter_token: Histogram | None = None


def _delta(before: MetricsSnapshot, after: MetricsSnapshot, name: str) -> int:
    value = after.get(name) - before.get(name)
    if value < 0:
        raise ServerError(f"counter {name} went down ({before.get(name)} → {after.get(name)}): the server restarted")
    return round(value)


def diff_metrics(before: MetricsSnapshot, after: MetricsSnapshot) -> MetricsDelta:
    """Counter deltas from ``before`` to ``after``; ``spec`` is None when the server exports no spec counters."""
    spec = None
    if _DRAFTS in after.totals:
        positions = sorted(set(after.accepted_per_pos) | set(before.accepted_per_pos))
        per_pos = tuple(
            round(after.accepted_per_pos.get(p, 0.0) - before.accepted_per_pos.get(p, 0.0)) for p in positions
        )
        spec = SpecDecodeStats(
            num_drafts=_delta(before, after, _DRAFTS),
            num_draft_tokens=_delta(before, after, _DRAFT_TOKENS),
            num_accepted_tokens=_delta(before, after, _ACCEPTED),
            accepted_per_position=per_pos,
        )
    return MetricsDelta(
        spec=spec,
        num_preemptions=_delta(before, after, _PREEMPTIONS),
        generation_tokens=_delta(before, after, _GENERATION_TOKENS),
        prompt_tokens=_delta(before, after, _PROMPT_TOKENS),
        step_tokens=_histogram_delta(before.step_tokens, after.step_tokens),
        inter_token=_histogram_delta(before.inter_token, after.inter_token),
    )


def _histogram_delta(before: Histogram | None, after: Histogram | None) -> Histogram | None:
    return after.minus(before) if after is not None and before is not None else None


def scrape(base_url: str, timeout_s: float = 10.0) -> str:
    """GET ``<base_url>/metrics`` within ``timeout_s`` (``engine.exchange.get``) and return the text; ``ServerError``
    in one line when the exchange breaks or the status is not 200."""
    answer = get(f"{base_url}/metrics", timeout_s)
    if answer.status != 200:
        raise ServerError(f"{base_url}/metrics answered HTTP {answer.status}, not 200")
    return answer.text


class ScrapeFault(StrEnum):
    """Why a ``/metrics`` text cannot be trusted as a vLLM scrape (``untrusted_scrape``)."""

    EMPTY = "empty"
    HTML = "html"
    NOT_PROMETHEUS = "not-prometheus"
    NO_VLLM_COUNTER = "no-vllm-counter"
    NO_SPEC_COUNTERS = "no-spec-counters"


def untrusted_scrape(text: str, speculative: bool) -> tuple[ScrapeFault, str] | None:
    """Why the ``/metrics`` text ``text`` cannot be trusted as a vLLM scrape, or None when it can: empty, HTML,
    not Prometheus text, without a single ``vllm:`` counter, or, where speculation is on (``speculative``), without
    the speculative-decoding counters (a row would count every draft since start-up, or none). The fault comes with
    its detail: the parser's error for text that is not Prometheus text, else ''."""
    if not text.strip():
        return ScrapeFault.EMPTY, ""
    if text.lstrip().startswith("<"):
        return ScrapeFault.HTML, ""
    try:
        snapshot = parse_metrics(text)
    except (ValueError, KeyError, IndexError, TypeError) as error:
        return ScrapeFault.NOT_PROMETHEUS, f"{type(error).__name__}: {str(error)[:80]}"
    if not any(name.startswith("vllm:") for name in snapshot.totals):
        return ScrapeFault.NO_VLLM_COUNTER, ""
    if speculative and any(name not in snapshot.totals for name in (_DRAFTS, _DRAFT_TOKENS, _ACCEPTED)):
        return ScrapeFault.NO_SPEC_COUNTERS, ""
    return None


def per_position_json(stats: SpecDecodeStats | None) -> str | None:
    """Per-position rates as the JSON list stored in a row."""
    if stats is None or not stats.num_drafts:
        return None
    return json.dumps(list(stats.per_position_rates))
