"""The proxy: accept connections, prepend a PROXY header, relay them to the ingress controller."""
