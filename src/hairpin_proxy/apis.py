"""The Kubernetes API names several floors share: the Ingress API's group, version and
annotations, the Gateway API's group and the annotation Istio reads its ProxyConfig from. A
leaf: it imports nothing of the package, so that the sources, the domain and the shells name
the same constant."""

from __future__ import annotations

from typing import Final

INGRESS_GROUP: Final = "networking.k8s.io"
INGRESS_API_VERSION: Final = f"{INGRESS_GROUP}/v1"
CLASS_ANNOTATION: Final = "kubernetes.io/ingress.class"
DEFAULT_CLASS_ANNOTATION: Final = "ingressclass.kubernetes.io/is-default-class"

GATEWAY_GROUP: Final = "gateway.networking.k8s.io"
# The Gateway annotation that carries Istio's ProxyConfig (its PROXY protocol setting).
ISTIO_PROXY_CONFIG: Final = "proxy.istio.io/config"
