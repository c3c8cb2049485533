"""The local world, one helper for the demo, the tests and the benchmarks: the emulator process
(the cloud), kubectl against the local cluster (`spotpool cluster up`), the operator as a
process (optionally under a hostname of its own, killed as a whole tree), and the S3 server
(spotpool.cluster.s3)."""
