"""`reasoning-proxy demo`: the proxy in front of a built-in simulated upstream
that speaks every supported provider's wire format (simulator.py), so the
proxy can be tried without keys or network (run.py). Only the command line
imports this package."""
