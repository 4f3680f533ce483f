"""What an ``alias`` finding carries for its script: the ``Detail`` record in ``Finding.data``.

Design note. The oracle writes one ``Detail`` into every finding it makes
(``judge.plugin.encode_detail``) and the script reads it back
(``decode_detail``); ``Finding.detail`` is the same facts as a sentence for
a reader (``Detail.words``), which nothing parses.
"""

from __future__ import annotations

from dataclasses import dataclass

from .forms import Form


@dataclass(frozen=True, kw_only=True, slots=True)
class Detail:
    form: Form  # the aliasing the call was made with
    # intra-op threads of the sweep's worker: which elements a kernel reads after writing them can
    # depend on how it splits the work (None: not recorded)
    threads: int | None = None
    imports: tuple[str, ...] = ()  # the sweep's --import modules (run.imports): planted kernels, backends

    def words(self) -> str:
        """The record as a sentence, for ``Finding.detail``."""
        text = f"aliasing: {self.form.words()}"
        if self.threads is not None:
            text += f"; {self.threads} intra-op thread{'s' if self.threads > 1 else ''}"
        if self.imports:
            text += f"; with --import {', '.join(self.imports)}"
        return text
