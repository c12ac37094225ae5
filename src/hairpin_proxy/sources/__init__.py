"""The sources of hosts as data: the registry (every source's resources, slims, claims, facts,
RBAC and declared target key kinds) and the sources it names: ingress/ (the Ingress API),
gateway/ (the Gateway API) and traefik.py. Pure; the controller's shells of them are in
controller/sources/."""
