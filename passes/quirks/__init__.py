"""Runtime workarounds: each module rewrites what one or more quirks of
``seqlower/targets/registry.py`` name, for the targets that have them."""
