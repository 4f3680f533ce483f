"""``torchsleuth watch``: from a misbehaving training run to the broken op (watch.session has the design)."""

from .session import Watch, WatchConfig, watch

__all__ = ["Watch", "WatchConfig", "watch"]
