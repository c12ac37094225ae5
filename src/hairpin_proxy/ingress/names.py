"""The Ingress API's names the sources and the plan share: its group, version and annotations."""

from __future__ import annotations

from typing import Final

INGRESS_GROUP: Final = "networking.k8s.io"
INGRESS_API_VERSION: Final = f"{INGRESS_GROUP}/v1"
CLASS_ANNOTATION: Final = "kubernetes.io/ingress.class"
DEFAULT_CLASS_ANNOTATION: Final = "ingressclass.kubernetes.io/is-default-class"
