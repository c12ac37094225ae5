"""Where the controller's host list goes: the Corefile, an import key, the published list."""
