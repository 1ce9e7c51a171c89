"""What the tests share (not test modules): `helpers.train` (tiny trainer configs and their flags),
`helpers.mosaic_payload` (the Mosaic kernels of a module exported for TPU), and the scripts the
tests run in subprocesses: `multihost_worker` (the trainer with a fault hook), and
`models_shard_map_check` and `pallas_shard_map_check` (8 simulated devices; each writes its
measured errors and counts as JSON for the test to judge)."""
