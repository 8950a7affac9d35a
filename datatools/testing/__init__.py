"""Test utilities users can use too: :class:`~datatools.testing.slow_proxy.SlowProxy`, a far bucket on loopback."""

from datatools.testing.slow_proxy import ProxyStats, SlowProxy

__all__ = ["ProxyStats", "SlowProxy"]
