"""The delta rule (DeltaNet, Gated DeltaNet): kernels_pallas.delta_rule."""
