"""Prometheus metrics of one daemon, in a registry of its own (so tests can run many)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from rock.daemon.manager import SandboxManager

_FAST = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
_SLOW = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class Metrics:
    """Counters and histograms the manager and the app update, plus gauges read at scrape."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.acquire_seconds = Histogram(
            "rock_acquire_seconds",
            "Time to hand a sandbox to a client, by source (pool or cold start).",
            ["source"],
            buckets=_FAST,
            registry=self.registry,
        )
        self.exec_seconds = Histogram(
            "rock_exec_seconds",
            "Duration of commands, by kind (exec or session).",
            ["kind"],
            buckets=_SLOW,
            registry=self.registry,
        )
        self.errors = Counter("rock_errors", "Errors, by kind.", ["kind"], registry=self.registry)
        self.requests = Counter(
            "rock_http_requests",
            "HTTP requests, by status class.",
            ["status"],
            registry=self.registry,
        )

    def error(self, kind: str) -> None:
        self.errors.labels(kind=kind).inc()

    def watch(self, manager: SandboxManager) -> None:
        """Report the manager's sandboxes by state and its pools' sizes at every scrape."""
        self.registry.register(_StateCollector(manager))

    def render(self) -> bytes:
        return generate_latest(self.registry)


class _StateCollector(Collector):
    def __init__(self, manager: SandboxManager) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Metric]:
        states = GaugeMetricFamily("rock_sandboxes", "Sandboxes by state.", labels=["state"])
        for state, count in self.manager.store.counts_by_state(self.manager.daemon_id).items():
            states.add_metric([state], count)
        yield states
        families = {
            "idle": GaugeMetricFamily(
                "rock_pool_idle", "Idle sandboxes per pool.", labels=["pool"]
            ),
            "in_use": GaugeMetricFamily(
                "rock_pool_in_use", "Sandboxes handed out per pool.", labels=["pool"]
            ),
            "starting": GaugeMetricFamily(
                "rock_pool_starting", "Sandboxes starting per pool.", labels=["pool"]
            ),
            "min_idle": GaugeMetricFamily(
                "rock_pool_min_idle", "Configured minimum idle per pool.", labels=["pool"]
            ),
            "max_total": GaugeMetricFamily(
                "rock_pool_max_total", "Configured maximum per pool.", labels=["pool"]
            ),
        }
        for pool in self.manager.pools():
            for key, family in families.items():
                family.add_metric([pool.name], getattr(pool, key))
        yield from families.values()
