"""Composition off, for a side-by-side: every search edit on contiguous tensors alone, as before search.compose."""
from torchsleuth.search import compose

compose.levels = lambda *args, **kwargs: [()]
