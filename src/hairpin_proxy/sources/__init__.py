"""The sources of hosts as data: the registry (every source's resources, slims, claims, facts,
RBAC and declared target key kinds) and the sources it names beyond the Ingress and Gateway
API ones (traefik.py). Pure; the controller's shells of them are in controller/sources/."""
