"""The Kubernetes side of the controller: client, list+watch, leader election, Events."""
