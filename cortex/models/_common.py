"""Helpers shared by the zoo models (per-node input declaration, sums of terms).

Pipeline position: used only by the model definitions in ``cortex.models``; not public API.
"""

from __future__ import annotations

from typing import Sequence

from cortex.core.frontend.model import Model
from cortex.core.frontend.model_errors import ModelDefinitionError
from cortex.core.frontend.trace import CaseBuilder, Sym


def declare_input(model: Model, *, vocab: int | None, embed: int | None, features: int | None) -> int:
    """Declare either a token input with an embedding table ``E [vocab, embed]`` or a dense
    feature input ``[features]``; return the width ``D`` of the per-node input vector ``x``."""
    if (vocab is None) == (features is None):
        raise ModelDefinitionError(
            f"{model.name}: give exactly one of vocab= (token ids, with embed=) or features= "
            f"(dense vectors); got vocab={vocab}, features={features}"
        )
    if vocab is not None:
        if embed is None:
            raise ModelDefinitionError(f"{model.name}: vocab= needs embed= (embedding width)")
        model.add_word_input("word", vocab)
        model.add_param("E", (vocab, embed), init="normal", scale=1.0)
        return int(embed)
    model.add_feature_input("x", features)
    return int(features)


def node_vector(model: Model, g: CaseBuilder) -> Sym:
    """The node's input vector ``x``: ``E[word]`` or the dense feature vector."""
    if "word" in model.node_inputs:
        return g.embedding("E", g.input("word"))
    return g.input("x")


def total(terms: Sequence[Sym]) -> Sym:
    """``terms[0] + terms[1] + ...`` (left to right)."""
    out = terms[0]
    for t in terms[1:]:
        out = out + t
    return out
