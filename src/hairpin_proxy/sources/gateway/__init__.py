"""Gateway API support, pure part: hostnames, objects and the hosts a route asks for.

Nothing here does I/O: the controller feeds parsed objects in and gets host names and human
notes out, so every rule of the specification is testable without a cluster.
"""
