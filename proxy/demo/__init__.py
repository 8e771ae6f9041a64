"""The built-in simulated upstream of `reasoning-proxy demo`."""
