"""The proxy: accept connections, prepend a PROXY header, relay them to the ingress controller."""

import dns._features

# The relay asks plain DNS only (lookup.py). Left on, DNS over HTTPS has dnspython import an
# HTTP client (httpx2, which lightkube brings into the image) into every proxy worker. Set here,
# before any module of the relay imports dns.query, which reads the switch once.
dns._features.force("doh", False)
