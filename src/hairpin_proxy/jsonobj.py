"""The shapes of a Kubernetes object as decoded JSON: the one home of these aliases. A leaf:
it imports nothing of the package, so that every layer may name them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

# An object as the API sends it (and as a writer builds one).
JsonObj = dict[str, Any]
# An object only read.
Obj = Mapping[str, Any]
# A change of one object: given the current one (None when absent), the object to write, or
# None for "as is".
Mutate = Callable[[JsonObj | None], JsonObj | None]
