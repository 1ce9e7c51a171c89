"""linear_attention op: api (entry point), reference, xla (chunked), pallas (kernels), config."""
