"""The Ingress API's names the sources and the plan share: its group and its annotations."""

from __future__ import annotations

from typing import Final

INGRESS_GROUP: Final = "networking.k8s.io"
CLASS_ANNOTATION: Final = "kubernetes.io/ingress.class"
DEFAULT_CLASS_ANNOTATION: Final = "ingressclass.kubernetes.io/is-default-class"
